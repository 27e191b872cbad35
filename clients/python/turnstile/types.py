"""Typed shapes of the gateway's JSON (gateway/openapi.json).

Responses are plain dicts typed with TypedDicts, so a field the gateway adds
later reaches the caller unchanged. Requests are built from keyword
arguments by the Client; Receipt and DatasetRow are the two request shapes a
caller builds itself.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, TypedDict


class Receipt(TypedDict):
    """Identifies one accepted result: acknowledging it releases the result."""

    rollout_id: str
    attempt: int
    sha256: str


class Usage(TypedDict, total=False):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    calls: int


class Sampling(TypedDict, total=False):
    temperature: float
    top_p: float
    max_tokens: int
    stop: List[str]
    seed: int
    extra_body: Dict[str, Any]
    capture_tokens: bool


class PolicyRef(TypedDict, total=False):
    model: str
    base_url: str
    version: str


class DatasetRow(TypedDict, total=False):
    """One dataset row, rolled out `repeats` times as one group; env and task
    are required."""

    id: str
    env: str
    task: Any
    seed: int
    policy: PolicyRef
    sampling: Sampling
    max_turns: int


class Limits(TypedDict, total=False):
    """A set's budgets; durations are Go duration strings ("90s", "5m")."""

    model_call_timeout: str
    env_call_timeout: str
    model_call_retries: int
    deadline: str


class Health(TypedDict):
    """What a trainer needs to decide whether to keep waiting."""

    state: str  # "ok", "degraded" or "stalled"
    rollouts: int
    completed: int
    failed: int
    running: int
    held: int
    queued: int  # not started yet: waiting in the set's admission
    admitting: int  # started by the admission, not yet heard finish (may not show in running yet)
    progress_per_min: float
    consecutive_failures: int
    model_error_rate: float
    model_errors: List[str]
    stuck: List[str]
    server_recoveries: List[str]  # servers the watchdog declared dead, and what came of it
    reason: str
    window_ms: int


class ExportLine(TypedDict, total=False):
    """One finished rollout (docs/trajectory.schema.json): a completed result
    (held for acknowledgement, with its receipt) or a failed rollout (with
    its failure)."""

    schema_version: int
    rollout_id: str
    set: str
    group: Optional[str]
    repeat: Optional[int]
    env: str
    status: str  # completed, failed, terminated, timed_out, canceled
    failure: str
    held: bool
    receipt: Receipt
    attempt: int
    attempts: List[Dict[str, Any]]
    reward: Optional[float]
    usage: Optional[Usage]
    num_turns: int
    terminated: bool
    truncated: bool
    head: str
    tokens: str
    prefix_breaks: int
    messages: List[Dict[str, Any]]
    turns: List[Dict[str, Any]]


class FeedResponse(TypedDict):
    items: List[ExportLine]
    cursor: str  # opaque: pass it back unchanged
    health: Health
    done: bool  # nothing runs and nothing is left to deliver after the cursor


class SubmitResponse(TypedDict):
    set: str
    request_id: str
    rollouts: int
    started: int  # started by this call
    existing: int  # started before by a call with the same request_id
    max_in_flight: int  # the set's limit of rollouts running at once


class AdmissionResponse(TypedDict):
    set: str
    max_in_flight: int
    running: int
    queued: int
    total: int


class Summary(TypedDict):
    rollouts: int
    completed: int
    failed: int
    running: int
    queued: int
    mean_reward: float
    mean_turns: float
    p50_ms: int
    p95_ms: int


class SetResponse(TypedDict):
    set: str
    overall: Summary
    by_env: List[Dict[str, Any]]
    health: Health


class ResultRecord(TypedDict, total=False):
    rollout_id: str
    status: str
    held: bool
    attempt: int
    env: str
    result: Dict[str, Any]
    failure: str


class ResultsResponse(TypedDict):
    results: List[ResultRecord]
    next_page_token: str


class AckResponse(TypedDict):
    receipts: int  # results now accepted (the same on a repeat)
    acknowledged: int  # sent by this call
    already: int
    closed: int


class PolicyVersionResponse(TypedDict):
    version: int
    checked: int
    stale: int
    cancelled: int
    flagged: int
    rollouts: List[Dict[str, Any]]


class StartedResponse(TypedDict):
    id: str
    workflow_id: str
    run_id: str
    existing: bool


class RunStatus(TypedDict, total=False):
    """GET /v1/checkpoints/{id} and /v1/restores/{id}."""

    id: str
    workflow_id: str
    run_id: str
    status: str  # running, completed, failed
    result: Dict[str, Any]
    error: str


class ResumeResponse(TypedDict):
    participants: int
    rollouts: int
    closed: int


class WatchdogResponse(TypedDict):
    """GET /v1/sets/{set}/watchdog: the set's automatic recovery."""

    set: str
    phase: str  # watching, waiting, recovering, stopped, done
    watched: List[str]
    standby_used: int
    declarations: List[Dict[str, Any]]
    schedule_held: bool
    rounds: int


class ScheduledRun(TypedDict):
    checkpoint_id: str
    workflow_id: str


class ScheduleResponse(TypedDict):
    """A set's checkpoint schedule."""

    id: str
    set: str
    every: str
    tag: str
    keep: int
    paused: bool
    note: str
    fired: int
    skipped: int
    recent: List[ScheduledRun]
    next: List[str]
    existing: bool


class StoppedResponse(TypedDict):
    set: str
    stopped: bool


class PinResponse(TypedDict):
    set: str
    tag: str
    pinned: List[str]


def receipt_of(item: ExportLine) -> Optional[Receipt]:
    """The receipt of a feed item, or None for a failed rollout."""
    r = item.get("receipt")
    if not r:
        return None
    return Receipt(rollout_id=r["rollout_id"], attempt=int(r["attempt"]), sha256=r["sha256"])
