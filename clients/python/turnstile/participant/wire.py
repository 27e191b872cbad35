"""The wire format of the participant protocol: JSON encoded the way the Go
side encodes it, strict request decoding, the error envelope, and the
canonical form that request digests are taken over.

Go's encoding/json differs from Python's json in a few visible ways: it
escapes <, >, & and U+2028/U+2029 inside strings, writes integral floats
without a fraction (1, not 1.0) and uses no spaces in compact output. A
checkpoint written here must validate on the Go side byte for byte, so
every JSON this participant writes goes through dumps/dumps_indent.
"""

import hashlib
import json
import re

# Limits the Go envserver applies too.
MAX_BODY_BYTES = 16 << 20
INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1

# HTTP status of every protocol error code (docs/protocol/openapi.json,
# components.x-error-codes). Environment refusals are 422.
STATUS = {
    "malformed_request": 400,
    "unauthorized": 401,
    "not_found": 404,
    "unknown_env": 404,
    "unknown_session": 404,
    "control_disabled": 404,
    "session_retired": 409,
    "revision_mismatch": 409,
    "request_id_conflict": 409,
    "stale_attempt": 409,
    "attempt_not_installed": 409,
    "checkpoint_conflict": 409,
    "stale_checkpoint": 409,
    "invalid_phase": 409,
    "prepare_timeout": 409,
    "prepare_aborted": 409,
    "location_conflict": 409,
    "invalid_checkpoint": 422,
    "internal": 500,
    "parked": 503,
}


class ProtocolError(Exception):
    """A refusal: the code the client receives and a message saying why.

    status is the code's HTTP status; an environment's own codes (its
    refusals) are 422."""

    def __init__(self, code, message, status=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.status = status or STATUS.get(code, 422)

    def body(self):
        return dumps({"error": {"code": self.code, "message": self.message}})


def refuse(code, message):
    return ProtocolError(code, message)


# --- encoding -------------------------------------------------------------

_GO_ESCAPES = (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
               ("\u2028", "\\u2028"), ("\u2029", "\\u2029"))


def _go_numbers(v):
    """Integral floats become ints, as Go prints them (1, not 1.0)."""
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError("NaN and infinities are not JSON")
        if v == int(v) and abs(v) < 1e21:
            return int(v)
        return v
    if isinstance(v, dict):
        return {k: _go_numbers(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_go_numbers(x) for x in v]
    return v


def _go_escape(text):
    # <, >, &, U+2028 and U+2029 only ever occur inside JSON strings, so a
    # plain replace on the encoded text escapes exactly what Go escapes.
    for raw, esc in _GO_ESCAPES:
        text = text.replace(raw, esc)
    return text


def dumps(v):
    """Compact JSON bytes as Go's json.Marshal writes them. Dict keys keep
    their insertion order (build dicts in the Go struct's field order)."""
    text = json.dumps(_go_numbers(v), ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return _go_escape(text).encode("utf-8")


def dumps_indent(v):
    """JSON bytes as Go's json.MarshalIndent(v, "", "  ") writes them."""
    text = json.dumps(_go_numbers(v), ensure_ascii=False, indent=2, allow_nan=False)
    return _go_escape(text).encode("utf-8")


def loads(data):
    """Decodes JSON bytes, keeping the key order of objects."""
    return json.loads(data, object_pairs_hook=dict)


# --- canonical form of free-form JSON (task, arguments) ------------------

class Number(str):
    """A JSON number kept as written: 1 and 1.0 are different values."""


def _bad_constant(name):
    raise ValueError(f"{name} is not JSON")


def parse_exact(text):
    """Parses JSON keeping every number as written (a Number)."""
    return json.loads(text, parse_int=Number, parse_float=Number, parse_constant=_bad_constant,
                      object_pairs_hook=dict)


def canonical(v):
    """Canonical text of a value parsed by parse_exact: keys sorted, no
    spaces, strings re-escaped, numbers as written; None is null."""
    if isinstance(v, Number):
        return str(v)
    if isinstance(v, dict):
        items = sorted(v.items())
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical(x) for k, x in items) + "}"
    if isinstance(v, list):
        return "[" + ",".join(canonical(x) for x in v) + "]"
    return json.dumps(v, ensure_ascii=False)


def plain(v):
    """A value parsed by parse_exact as ordinary Python values."""
    return json.loads(canonical(v))


def digest(kind, fields):
    """SHA-256 (hex) of a request's kind and fields (values as parsed by
    parse_exact): the key a stored response is replayed under. fields
    must not hold the attempt, so a higher attempt re-sending the same
    request matches."""
    h = hashlib.sha256()
    h.update(kind.encode() + b"\n")
    h.update(canonical(fields).encode("utf-8"))
    return h.hexdigest()


# --- strict request decoding ---------------------------------------------

RAW = "raw"  # the type of a free-form JSON field (task, arguments)
_INT = re.compile(r"-?[0-9]+")


def decode_request(data, fields, required):
    """Decodes a request body strictly: one JSON object, no unknown field,
    no trailing data, each required field present and not null, each value
    of its declared type (int, str, or RAW: free-form JSON kept as parsed
    by parse_exact). Absent and null optional fields are None. Raises
    malformed_request naming the problem."""
    try:
        obj = parse_exact(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise refuse("malformed_request", f"decode request: {e}")
    if not isinstance(obj, dict):
        raise refuse("malformed_request", "decode request: the body is not a JSON object")
    for k in obj:
        if k not in fields:
            raise refuse("malformed_request", f'decode request: unknown field "{k}"')
    for k in required:
        if obj.get(k) is None:
            raise refuse("malformed_request", f"missing field {k}")
    return {k: _field(k, kind, obj.get(k)) for k, kind in fields.items()}


def _field(name, kind, v):
    if v is None or kind == RAW:
        return v
    if kind is int:
        if not isinstance(v, Number) or not _INT.fullmatch(v) or not INT64_MIN <= int(v) <= INT64_MAX:
            raise refuse("malformed_request", f"decode request: field {name} must be a 64-bit integer, not {canonical(v)[:40]}")
        return int(v)
    if kind is str and (not isinstance(v, str) or isinstance(v, Number)):
        raise refuse("malformed_request", f"decode request: field {name} must be a string")
    if kind is dict and not isinstance(v, dict):
        raise refuse("malformed_request", f"decode request: field {name} must be an object")
    return v
