"""The authenticated user, other users and the rate limit."""

from __future__ import annotations

from ..errors import ApiError
from ..state import RATE_LIMIT
from .base import Call, Reply, route


@route("GET", "/user")
def get_authenticated_user(call: Call) -> Reply:
    if call.user is None:
        raise ApiError(401, "Requires authentication")
    if call.user.app:
        raise ApiError(403, "Resource not accessible by integration")
    return Reply(200, call.render.user(call.user.login))


@route("GET", r"/users/(?P<login>[^/]+)")
def get_user(call: Call) -> Reply:
    if call.params["login"] not in call.state.users:
        raise ApiError(404, "Not Found")
    return Reply(200, call.render.user(call.params["login"]))


@route("GET", "/rate_limit")
def get_rate_limit(call: Call) -> Reply:
    core = {
        "limit": RATE_LIMIT,
        "remaining": call.state.rate_remaining,
        "reset": call.state.rate_reset,
        "used": RATE_LIMIT - call.state.rate_remaining,
    }
    return Reply(200, {"resources": {"core": core, "search": core, "graphql": core}, "rate": core})
