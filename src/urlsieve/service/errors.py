"""The service's errors: :class:`ApiError` and the JSON body every error is answered with
(``{"error": code, "detail": text}``), for the endpoints and for Starlette's own."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

__all__ = ["ApiError"]

Handler = Callable[[Request], Awaitable[Response]]


class ApiError(Exception):
    def __init__(self, status: int, code: str, detail: str, *, close: bool = False) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.close = close  # ask the server to close the connection (unread body)
        super().__init__(detail)


def _error(status: int, code: str, detail: str, *, close: bool = False) -> JSONResponse:
    headers = {"connection": "close"} if close else None
    return JSONResponse({"error": code, "detail": detail}, status_code=status, headers=headers)


def _wrap(handler: Handler) -> Callable[..., Any]:
    """``handler`` answering its :class:`ApiError` as the JSON error body."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except ApiError as exc:
            return _error(exc.status, exc.code, exc.detail, close=exc.close)

    endpoint.__name__ = handler.__name__
    endpoint.__doc__ = handler.__doc__
    return endpoint


async def _http_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return _error(exc.status_code, code, str(exc.detail))
    return _error(500, "internal_error", f"{type(exc).__name__}: {exc}")
