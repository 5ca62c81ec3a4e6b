"""The routes of the fake, one module per area; importing them fills ``ROUTES`` in order."""

from . import git, issues, pulls, repos, users  # noqa: F401  (registers their routes)
from .base import REPO, ROUTES, Call, Reply, Route, paged, route

__all__ = ["REPO", "ROUTES", "Call", "Reply", "Route", "paged", "route"]
