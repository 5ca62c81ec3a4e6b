"""What a route handler gets (``Call``) and gives (``Reply``), the route table and paging."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import invalid
from ..render import Render
from ..state import Repo, State, User


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Call:
    """One request as a handler sees it: the state (under the server's lock) and the caller."""

    state: State
    render: Render
    method: str
    path: str  # under /api/v3, without the query
    params: dict[str, str]
    query: dict[str, str]
    body: Any
    user: User | None

    @property
    def repo(self) -> Repo:
        return self.state.repo(f"{self.params['owner']}/{self.params['name']}")

    def field(self, name: str) -> Any:
        if not isinstance(self.body, dict) or name not in self.body:
            raise invalid({"resource": "Request", "field": name, "code": "missing_field"})
        return self.body[name]

    def login(self) -> str:
        assert self.user is not None, "writes are authenticated before a handler runs"
        return self.user.login


Handler = Callable[[Call], Reply]


@dataclass(frozen=True)
class Route:
    method: str
    pattern: re.Pattern[str]
    handler: Handler
    write: bool  # needs a token with write permission on the repository


ROUTES: list[Route] = []
REPO = r"/repos/(?P<owner>[^/]+)/(?P<name>[^/]+)"


def route(method: str, pattern: str, *, write: bool = False) -> Callable[[Handler], Handler]:
    def register(handler: Handler) -> Handler:
        ROUTES.append(Route(method, re.compile(f"^{pattern}$"), handler, write))
        return handler

    return register


def paged(call: Call, items: list[Any]) -> Reply:
    """One page of ``items`` with GitHub's ``Link`` header (first/prev/next/last), 30 a page."""
    per_page = max(1, min(int(call.query.get("per_page", 30)), 100))
    page = max(1, int(call.query.get("page", 1)))
    last = max(1, -(-len(items) // per_page))

    def link(number: int, rel: str) -> str:
        query = urllib.parse.urlencode(sorted((call.query | {"page": str(number)}).items()))
        return f'<{call.render.api}{call.path}?{query}>; rel="{rel}"'

    links = []
    if page > 1:
        links += [link(page - 1, "prev"), link(1, "first")]
    if page < last:
        links += [link(page + 1, "next"), link(last, "last")]
    chunk = items[(page - 1) * per_page : page * per_page]
    return Reply(200, chunk, {"link": ", ".join(links)} if links else {})
