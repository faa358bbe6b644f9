"""Exceptions raised by the delayq client, one class per protocol error code.

    DelayqError                 every error; .code .status .message
    +-- ClientError             4xx: the request was refused, nothing changed
    |   +-- BadRequest          400 bad_request
    |   +-- Unauthorized        401 unauthorized
    |   +-- NotFound            404 not_found
    |   +-- Conflict            409 conflict
    |   +-- TooLarge            413 too_large
    +-- ServerError             5xx (and 500 internal)
        +-- Unavailable         503 unavailable: no effect, safe to retry
        |   +-- ConnectFailed   could not connect: the request was never sent
        +-- Timeout             504 timeout: the outcome is unknown
            +-- ConnectionLost  the connection broke after the request may
                                have reached the server: outcome unknown
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Type

__all__ = [
    "DelayqError", "ClientError", "BadRequest", "Unauthorized", "NotFound", "Conflict",
    "TooLarge", "ServerError", "Unavailable", "Timeout", "ConnectFailed", "ConnectionLost",
    "error_for",
]


class DelayqError(Exception):
    """A request delayq refused or could not complete.

    code:    the protocol's machine string ("not_found", "unavailable", ...)
    status:  the HTTP status, or None when no HTTP answer arrived
    message: the server's human sentence (or a description of the failure)
    response: the decoded JSON answer when there was one
    """

    code: str = "error"

    def __init__(self, message: str, code: Optional[str] = None, status: Optional[int] = None,
                 response: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.status = status
        self.message = message
        self.response = response

    def __str__(self) -> str:
        where = "HTTP %d, " % self.status if self.status is not None else ""
        return "%s (%s%s)" % (self.message, where, self.code)

    def __repr__(self) -> str:
        return "%s(%r, code=%r, status=%r)" % (type(self).__name__, self.message, self.code,
                                               self.status)


class ClientError(DelayqError):
    """A 4xx answer: the request was refused and changed nothing. Sending it
    again unchanged fails the same way."""


class BadRequest(ClientError):
    """400: not a JSON object, unknown command, bad field type, range or
    characters."""

    code = "bad_request"


class Unauthorized(ClientError):
    """401: auth is enabled and the token is missing, wrong or not allowed
    this command or topic."""

    code = "unauthorized"


class NotFound(ClientError):
    """404: no live job with that id."""

    code = "not_found"


class Conflict(ClientError):
    """409: `add` with an id that is live, or touch/release/bury on a job that
    is not reserved."""

    code = "conflict"


class TooLarge(ClientError):
    """413: the job body or the whole request is over the server's limit."""

    code = "too_large"


class ServerError(DelayqError):
    """A 5xx answer, or no usable answer at all."""

    code = "internal"


class Unavailable(ServerError):
    """503: Redis (or every delayq backend) is unreachable; the request had
    no effect and may be sent again."""

    code = "unavailable"


class Timeout(ServerError):
    """504: the server did not learn in time whether the request took
    effect. An `add` with an explicit id may be sent again (409 means the
    first one took); other writes need a check (`get`) first."""

    code = "timeout"


class ConnectFailed(Unavailable):
    """The client could not connect to delayq: the request was never sent."""


class ConnectionLost(Timeout):
    """The connection failed (closed, reset, timed out) after the request may
    have reached the server: its outcome is unknown, as with a 504."""


_BY_CODE: Dict[str, Type[DelayqError]] = {
    "bad_request": BadRequest,
    "unauthorized": Unauthorized,
    "not_found": NotFound,
    "conflict": Conflict,
    "too_large": TooLarge,
    "unavailable": Unavailable,
    "timeout": Timeout,
    "internal": ServerError,
}

_CODE_BY_STATUS: Dict[int, str] = {
    400: "bad_request", 401: "unauthorized", 404: "not_found", 409: "conflict",
    413: "too_large", 503: "unavailable", 504: "timeout", 500: "internal",
}


def error_for(status: Optional[int], code: Optional[str], message: str,
              response: Optional[Dict[str, Any]] = None) -> DelayqError:
    """The exception for an error answer: by its `code` when known, else by
    the HTTP status (5xx -> ServerError, anything else -> ClientError)."""
    if not code and status is not None:
        code = _CODE_BY_STATUS.get(status)
    cls = _BY_CODE.get(code or "")
    if cls is None:
        cls = ServerError if status is None or status >= 500 else ClientError
        code = code or ("http_%d" % status if status is not None else "error")
    return cls(message, code=code, status=status, response=response)
