"""GitHub's error answer: ``message``, ``errors``, ``documentation_url`` and ``status``."""

from __future__ import annotations

from typing import Any

DOCS = "https://docs.github.com/rest"


class ApiError(Exception):
    """An answer in GitHub's error shape, raised by a handler and sent by the dispatcher."""

    def __init__(self, status: int, message: str, errors: list[Any] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.errors = status, message, errors

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"message": self.message}
        if self.errors is not None:
            body["errors"] = self.errors
        return body | {"documentation_url": DOCS, "status": str(self.status)}


def invalid(*errors: Any) -> ApiError:
    return ApiError(422, "Validation Failed", list(errors))
