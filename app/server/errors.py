"""OpenAI-shaped errors: ``{"error": {"message", "type", "param", "code"}}`` with a status."""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from app.errors import LlamaDeskError


class ApiError(LlamaDeskError):
    """An error a client gets back: an HTTP status and an OpenAI error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }

    def response(self) -> bytes:
        """The whole HTTP/1.1 response, ``Connection: close``: for the transport, which
        answers malformed, oversized or late requests before any handler exists."""
        body = json.dumps(self.body(), ensure_ascii=False).encode("utf-8")
        try:
            reason = HTTPStatus(self.status).phrase
        except ValueError:
            reason = "Error"
        lines = [
            f"HTTP/1.1 {self.status} {reason}",
            "Content-Type: application/json; charset=utf-8",
            f"Content-Length: {len(body)}",
            "Connection: close",
            *(f"{key}: {value}" for key, value in self.headers.items()),
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def unavailable(message: str, code: str = "unavailable") -> ApiError:
    return ApiError(503, message, type="server_error", code=code, headers={"Retry-After": "1"})


def server_error(message: str) -> ApiError:
    return ApiError(500, message, type="server_error", code="internal_error")
