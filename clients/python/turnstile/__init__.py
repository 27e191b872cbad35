"""Python client of the turnstile gateway: submit sets of agent rollouts,
consume their results exactly once through the feed, acknowledge them,
checkpoint, restore and resume, turn automatic recovery on and run a set's
checkpoint schedule. Standard library only.

See examples/trainer_loop.py for a complete trainer loop, and the
gateway's OpenAPI document (GET /v1/openapi.json) for every field.

turnstile.participant is the other side: a library to serve environments
written in Python behind the participant protocol (examples/participant).
"""

from .client import Client, RetryPolicy, new_request_id
from .errors import (
    APIError,
    BadRequest,
    Conflict,
    Forbidden,
    NotFound,
    SetStalled,
    TransportError,
    TurnstileError,
    Unauthorized,
    Unavailable,
)
from .types import (
    AckResponse,
    DatasetRow,
    ExportLine,
    FeedResponse,
    Health,
    PinResponse,
    Receipt,
    ScheduleResponse,
    SetResponse,
    StoppedResponse,
    SubmitResponse,
    WatchdogResponse,
    receipt_of,
)

__all__ = [
    "Client", "RetryPolicy", "new_request_id",
    "TurnstileError", "TransportError", "APIError", "Unauthorized", "Forbidden", "BadRequest", "NotFound", "Conflict",
    "SetStalled", "Unavailable",
    "AckResponse", "DatasetRow", "ExportLine", "FeedResponse", "Health", "Receipt", "SetResponse",
    "SubmitResponse", "receipt_of", "WatchdogResponse", "ScheduleResponse", "StoppedResponse", "PinResponse",
]
