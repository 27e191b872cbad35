"""Exceptions of the turnstile gateway client.

Every failure the client raises is a TurnstileError. An answer of the
gateway that is not 2xx becomes an APIError (or the subclass named by its
error code) carrying the gateway's code, message and the JSON path of the
request field at fault; a gateway that could not be reached, after every
retry, becomes a TransportError.
"""

from __future__ import annotations

import json
from typing import Any, Dict, Optional, Type


class TurnstileError(Exception):
    """Base of every error the client raises."""


class TransportError(TurnstileError):
    """The gateway could not be reached (connection refused or reset, a
    timeout) on every attempt the retry policy allowed."""

    def __init__(self, method: str, url: str, attempts: int, cause: BaseException) -> None:
        super().__init__(f"{method} {url}: gateway unreachable after {attempts} attempt(s): {cause}")
        self.method = method
        self.url = url
        self.attempts = attempts
        self.cause = cause


class APIError(TurnstileError):
    """A non-2xx answer of the gateway.

    code is the gateway's snake_case error code ("bad_request", ...), field
    the JSON path of the request field at fault ("count",
    "receipts[2].sha256") or "", status the HTTP status.
    """

    code = "error"

    def __init__(self, status: int, code: str, message: str, field: str = "",
                 health: Optional[Dict[str, Any]] = None) -> None:
        where = f" (field {field})" if field else ""
        super().__init__(f"{code} ({status}){where}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.health = health


class Unauthorized(APIError):
    """401: the bearer token is missing or wrong."""

    code = "unauthorized"


class Forbidden(APIError):
    """403: the token's role may not use the route: checkpoints, restores
    and resumes need the operator token. Nothing was changed."""

    code = "forbidden"


class BadRequest(APIError):
    """400: the request is malformed; field names what was wrong. Nothing
    was changed."""

    code = "bad_request"


class NotFound(APIError):
    """404: no such set, checkpoint or restore."""

    code = "not_found"


class Conflict(APIError):
    """409: the request conflicts with what exists (a request id reused
    with another body, a receipt that does not match). Nothing was
    changed."""

    code = "conflict"


class SetStalled(APIError):
    """409 set_stalled: the feed's watchdog saw no progress within its
    window while rollouts run. message says why; health is what the
    gateway saw (model errors, stuck rollouts)."""

    code = "set_stalled"

    @property
    def reason(self) -> str:
        """The gateway's reason, preferring the health report's."""
        if self.health and self.health.get("reason"):
            return str(self.health["reason"])
        return self.message


class Unavailable(APIError):
    """503: Temporal, a worker or a directory the call needs is not there
    (retried by the client before it is raised)."""

    code = "unavailable"


ERRORS_BY_CODE: Dict[str, Type[APIError]] = {
    cls.code: cls for cls in (Unauthorized, Forbidden, BadRequest, NotFound, Conflict, SetStalled, Unavailable)
}

# The code of an error body that lacks one, by HTTP status.
_CODE_BY_STATUS = {401: "unauthorized", 403: "forbidden", 400: "bad_request", 404: "not_found", 409: "conflict", 503: "unavailable"}


def api_error(status: int, body: bytes) -> APIError:
    """Builds the APIError of a non-2xx answer from its body
    ({"error": {"code", "message", "field"}, "health"?}). A body that is not
    such JSON (a proxy's HTML page) still gives an error naming the status."""

    code, message, field, health = _CODE_BY_STATUS.get(status, f"http_{status}"), "", "", None
    try:
        doc = json.loads(body.decode("utf-8"))
        detail = doc["error"]
        code = str(detail.get("code") or code)
        message = str(detail.get("message") or "")
        field = str(detail.get("field") or "")
        health = doc.get("health")
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
        message = body[:200].decode("utf-8", "replace").strip() or "no error body"
    cls = ERRORS_BY_CODE.get(code, APIError)
    return cls(status, code, message, field, health)
