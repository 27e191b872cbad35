"""HTTP client of the turnstile gateway (standard library only).

    from turnstile import Client
    tc = Client("http://127.0.0.1:8088", token="...", operator_token="...")
    tc.submit("s1", envs=["counter"], count=64)
    page = tc.feed("s1", max_items=32, wait_ms=10_000)
    tc.acknowledge("s1", [receipt_of(i) for i in page["items"] if i.get("held")])

The gateway has two roles: the trainer token opens submit, results, export,
the feed, acknowledgements and the policy version; checkpoints, restores
and resumes need the operator token (a trainer token there raises
Forbidden). A client given an operator token sends it on those routes.

Every state-changing call carries a request id (generated once per call
unless the caller passes one, and reused by every retry of that call), so a
retry, or a caller that repeats a call with the same id after it crashed,
applies nothing twice. Only failures that cannot have been answered by the
gateway's logic are retried: connection errors, timeouts and 503.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, TypeVar, cast

from .errors import APIError, TransportError, api_error
from .types import (
    AckResponse,
    AdmissionResponse,
    DatasetRow,
    ExportLine,
    FeedResponse,
    Limits,
    PinResponse,
    PolicyVersionResponse,
    Receipt,
    ResultRecord,
    ResultsResponse,
    ResumeResponse,
    RunStatus,
    Sampling,
    ScheduleResponse,
    SetResponse,
    StartedResponse,
    StoppedResponse,
    SubmitResponse,
    WatchdogResponse,
)

# Errors that mean the request may not have reached the gateway's logic, or
# its answer was lost: safe to retry, since every POST carries a request id.
_TRANSIENT = (ConnectionError, TimeoutError, socket.timeout, http.client.HTTPException, urllib.error.URLError)


_T = TypeVar("_T")


def new_request_id(prefix: str = "py") -> str:
    """A fresh request id (the gateway accepts 1..128 of [A-Za-z0-9._:-])."""
    return f"{prefix}-{uuid.uuid4().hex}"


@dataclass(frozen=True)
class RetryPolicy:
    """How a call is retried on connection errors, timeouts and 503:
    attempts in all, with exponential backoff from initial to maximum
    seconds, each delay varied by +-jitter (a fraction) so many trainers do
    not retry in step."""

    attempts: int = 8
    initial: float = 0.2
    maximum: float = 5.0
    multiplier: float = 2.0
    jitter: float = 0.2

    def delay(self, retry: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before retry number retry (1 for the first)."""
        base = min(self.maximum, self.initial * self.multiplier ** (retry - 1))
        return max(0.0, base * (1 + self.jitter * (2 * rand() - 1)))


class Client:
    """A client of one gateway. It holds no state but its settings; one
    Client may be shared by threads."""

    def __init__(self, base_url: str, token: Optional[str] = None, *, operator_token: Optional[str] = None,
                 timeout: float = 30.0, retry: RetryPolicy = RetryPolicy(), sleep: Callable[[float], None] = time.sleep,
                 log: Optional[Callable[[str], None]] = None) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"gateway URL {base_url!r}: want http://host:port or https://...")
        self.base_url = base_url.rstrip("/")
        self.token = token
        # The operator role's token, sent on checkpoints, restores and
        # resumes (without it those send token, which the gateway refuses
        # unless it is the operator token).
        self.operator_token = operator_token
        self.timeout = timeout
        self.retry = retry
        self._sleep = sleep
        self._log = log

    @classmethod
    def from_env(cls, **kwargs: Any) -> "Client":
        """A client of $TURNSTILE_GATEWAY_URL (default http://127.0.0.1:8088)
        with the token $TURNSTILE_GATEWAY_TOKEN and, when set, the operator
        token $TURNSTILE_GATEWAY_OPERATOR_TOKEN."""
        url = os.environ.get("TURNSTILE_GATEWAY_URL", "http://127.0.0.1:8088")
        kwargs.setdefault("operator_token", os.environ.get("TURNSTILE_GATEWAY_OPERATOR_TOKEN") or None)
        return cls(url, os.environ.get("TURNSTILE_GATEWAY_TOKEN") or None, **kwargs)

    # -- routes ---------------------------------------------------------

    def healthz(self) -> Dict[str, Any]:
        """GET /healthz (no token needed)."""
        return self._json("GET", "/healthz")

    def openapi(self) -> Dict[str, Any]:
        """GET /v1/openapi.json: the gateway's OpenAPI 3 document."""
        return self._json("GET", "/v1/openapi.json")

    def submit(self, set_name: str, *, envs: Optional[Sequence[str]] = None, count: Optional[int] = None,
               rows: Optional[Sequence[DatasetRow]] = None, dataset_path: Optional[str] = None,
               repeats: Optional[int] = None, seed: Optional[int] = None, policy: Optional[str] = None,
               model_url: Optional[str] = None, env_url: Optional[str] = None, max_turns: Optional[int] = None,
               sampling: Optional[Sampling] = None, limits: Optional[Limits] = None,
               require_ack: Optional[bool] = None, request_id: Optional[str] = None,
               env_server: Optional[str] = None, policy_endpoint: Optional[str] = None,
               max_in_flight: Optional[int] = None) -> SubmitResponse:
        """POST /v1/sets: count rollouts over envs, or a dataset (rows inline
        or dataset_path under the gateway's dataset root), each row repeats
        times as one group. env_server and policy_endpoint pick a server and
        an endpoint the workers' operator configured, by name (env_url and
        model_url name one by URL, admitted only when configured or
        allowlisted). Results are held for acknowledgement unless
        require_ack is False. At most max_in_flight rollouts run at once
        (default: the gateway's); the set's admission starts the others in
        order. A repeat with the same request_id starts nothing new."""
        body = {
            "set": set_name, "envs": list(envs) if envs is not None else None, "count": count,
            "rows": list(rows) if rows is not None else None, "dataset_path": dataset_path,
            "repeats": repeats, "seed": seed, "policy": policy, "policy_endpoint": policy_endpoint,
            "model_url": model_url, "env_server": env_server, "env_url": env_url,
            "max_turns": max_turns, "sampling": sampling, "limits": limits, "require_ack": require_ack,
            "max_in_flight": max_in_flight,
        }
        return cast(SubmitResponse, self._post("/v1/sets", body, request_id))

    def get_set(self, set_name: str) -> SetResponse:
        """GET /v1/sets/{set}: summary and health."""
        return cast(SetResponse, self._json("GET", f"/v1/sets/{_seg(set_name)}"))

    def results(self, set_name: str, page_token: Optional[str] = None,
                page_size: Optional[int] = None) -> ResultsResponse:
        """GET /v1/sets/{set}/results: one page of finished rollouts."""
        query = {"page_token": page_token, "page_size": page_size}
        return cast(ResultsResponse, self._json("GET", f"/v1/sets/{_seg(set_name)}/results", query))

    def iter_results(self, set_name: str, page_size: Optional[int] = None) -> Iterator[ResultRecord]:
        """Every finished rollout of a set, page by page."""
        token: Optional[str] = None
        while True:
            page = self.results(set_name, token, page_size)
            yield from page["results"]
            token = page["next_page_token"]
            if not token:
                return

    def export(self, set_name: str) -> Iterator[ExportLine]:
        """GET /v1/sets/{set}/export: the trajectories of the finished
        rollouts, streamed one line at a time. Only opening the stream is
        retried; a stream cut in the middle raises TransportError."""
        resp = self._open("GET", f"/v1/sets/{_seg(set_name)}/export", None, None, self.timeout)
        path = f"{self.base_url}/v1/sets/{_seg(set_name)}/export"
        with resp:
            try:
                for raw in resp:
                    if raw.strip():
                        yield cast(ExportLine, json.loads(raw))
            except _TRANSIENT as e:
                raise TransportError("GET", path, 1, e) from e

    def feed(self, set_name: str, cursor: Optional[str] = None, max_items: Optional[int] = None,
             wait_ms: Optional[int] = None, complete_groups: bool = False) -> FeedResponse:
        """GET /v1/sets/{set}/feed: up to max_items finished rollouts after
        cursor (none: from the oldest unacknowledged), waiting up to wait_ms
        for one; with complete_groups, whole groups only (a failed group's
        members come with group_status "failed", to acknowledge, not train
        on). Raises SetStalled when the set's watchdog fired."""
        query = {"cursor": cursor, "max": max_items, "wait_ms": wait_ms,
                 "complete_groups": "true" if complete_groups else None}
        timeout = self.timeout + (wait_ms or 0) / 1000.0
        return cast(FeedResponse, self._json("GET", f"/v1/sets/{_seg(set_name)}/feed", query, timeout=timeout))

    def acknowledge(self, set_name: str, receipts: Sequence[Receipt],
                    request_id: Optional[str] = None) -> AckResponse:
        """POST /v1/sets/{set}/acks: release held results by their receipts,
        all or nothing."""
        body = {"receipts": [dict(r) for r in receipts]}
        return cast(AckResponse, self._post(f"/v1/sets/{_seg(set_name)}/acks", body, request_id))

    def set_max_in_flight(self, set_name: str, max_in_flight: int,
                          request_id: Optional[str] = None) -> AdmissionResponse:
        """POST /v1/sets/{set}/max_in_flight: change how many of the set's
        rollouts run at once, while it runs (a raise starts queued rollouts
        at once)."""
        body = {"max_in_flight": max_in_flight}
        return cast(AdmissionResponse, self._post(f"/v1/sets/{_seg(set_name)}/max_in_flight", body, request_id))

    def policy_version(self, set_name: str, version: int, max_lag: int, action: str = "flag",
                       request_id: Optional[str] = None) -> PolicyVersionResponse:
        """POST /v1/sets/{set}/policy_version: cancel ("cancel") or report
        ("flag") running rollouts sampled more than max_lag versions ago."""
        body = {"version": version, "max_lag": max_lag, "action": action}
        return cast(PolicyVersionResponse, self._post(f"/v1/sets/{_seg(set_name)}/policy_version", body, request_id))

    def checkpoint(self, checkpoint_id: str, set_name: str, participants: Optional[Sequence[str]] = None, *,
                   timeout: Optional[str] = None, deadline: Optional[str] = None, stay_paused: bool = False,
                   request_id: Optional[str] = None) -> StartedResponse:
        """POST /v1/checkpoints: start a coordinated checkpoint of a set.
        timeout is a Go duration ("60s"), deadline RFC 3339; not both."""
        body = {
            "checkpoint_id": checkpoint_id, "set": set_name,
            "participants": list(participants) if participants is not None else None,
            "timeout": timeout, "deadline": deadline, "stay_paused": stay_paused or None,
        }
        return cast(StartedResponse, self._post("/v1/checkpoints", body, request_id, operator=True))

    def checkpoint_status(self, checkpoint_id: str) -> RunStatus:
        """GET /v1/checkpoints/{id}."""
        return cast(RunStatus, self._json("GET", f"/v1/checkpoints/{_seg(checkpoint_id)}", operator=True))

    def restore(self, checkpoint_id: str, participants: Optional[Sequence[str]] = None, *,
                restore_id: Optional[str] = None, request_id: Optional[str] = None) -> StartedResponse:
        """POST /v1/restores: restore a committed checkpoint."""
        body = {
            "checkpoint_id": checkpoint_id, "restore_id": restore_id,
            "participants": list(participants) if participants is not None else None,
        }
        return cast(StartedResponse, self._post("/v1/restores", body, request_id, operator=True))

    def restore_status(self, restore_id: str) -> RunStatus:
        """GET /v1/restores/{id}."""
        return cast(RunStatus, self._json("GET", f"/v1/restores/{_seg(restore_id)}", operator=True))

    def resume(self, set_name: str, checkpoint_id: str, participants: Optional[Sequence[str]] = None,
               request_id: Optional[str] = None) -> ResumeResponse:
        """POST /v1/resumes: release a checkpoint taken with stay_paused."""
        body = {"set": set_name, "checkpoint_id": checkpoint_id,
                "participants": list(participants) if participants is not None else None}
        return cast(ResumeResponse, self._post("/v1/resumes", body, request_id, operator=True))

    # -- automatic recovery and checkpoint schedules ---------------------

    def start_watchdog(self, set_name: str, participants: Sequence[str], *, standby: Optional[Sequence[str]] = None,
                       every: Optional[str] = None, timeout: Optional[str] = None, misses: Optional[int] = None,
                       bound: Optional[str] = None, request_id: Optional[str] = None) -> StartedResponse:
        """POST /v1/sets/{set}/watchdog (operator): turn automatic recovery of
        the set's environment servers on. Durations are Go durations ("5s");
        None takes the defaults. A watchdog already running is joined
        (existing), its settings unchanged."""
        body = {"participants": list(participants), "standby": list(standby) if standby is not None else None,
                "every": every, "timeout": timeout, "misses": misses, "bound": bound}
        return cast(StartedResponse, self._post(f"/v1/sets/{_seg(set_name)}/watchdog", body, request_id,
                                                operator=True))

    def watchdog_status(self, set_name: str) -> WatchdogResponse:
        """GET /v1/sets/{set}/watchdog: phase, watched servers, declarations,
        and whether it holds the set's schedule paused for a recovery."""
        return cast(WatchdogResponse, self._json("GET", f"/v1/sets/{_seg(set_name)}/watchdog"))

    def stop_watchdog(self, set_name: str, request_id: Optional[str] = None) -> StoppedResponse:
        """DELETE /v1/sets/{set}/watchdog (operator): turn automatic recovery
        off (no error when none runs)."""
        return cast(StoppedResponse, self._post(f"/v1/sets/{_seg(set_name)}/watchdog", {}, request_id,
                                                operator=True, method="DELETE"))

    def create_schedule(self, set_name: str, every: str, participants: Sequence[str], *, tag: Optional[str] = None,
                        keep: Optional[int] = None, timeout: Optional[str] = None, paused: bool = False,
                        request_id: Optional[str] = None) -> ScheduleResponse:
        """POST /v1/sets/{set}/schedule (operator): a checkpoint of the set
        every `every` (a Go duration), tagged `tag`, keeping the `keep`
        newest and every pinned one. A repeat with the same every and keep
        answers the schedule (existing; its tag as moved since); another
        every or keep raises Conflict."""
        body = {"every": every, "participants": list(participants), "tag": tag, "keep": keep,
                "timeout": timeout, "paused": paused or None}
        return cast(ScheduleResponse, self._post(f"/v1/sets/{_seg(set_name)}/schedule", body, request_id,
                                                 operator=True))

    def schedule(self, set_name: str) -> ScheduleResponse:
        """GET /v1/sets/{set}/schedule."""
        return cast(ScheduleResponse, self._json("GET", f"/v1/sets/{_seg(set_name)}/schedule"))

    def tag_schedule(self, set_name: str, tag: str, request_id: Optional[str] = None) -> ScheduleResponse:
        """POST /v1/sets/{set}/schedule/tag: the tag (trainer step) the next
        scheduled checkpoints carry; "" clears it."""
        return cast(ScheduleResponse, self._post(f"/v1/sets/{_seg(set_name)}/schedule/tag", {"tag": tag}, request_id,
                                                 keep_empty=True))

    def pause_schedule(self, set_name: str, note: Optional[str] = None,
                       request_id: Optional[str] = None) -> ScheduleResponse:
        """POST /v1/sets/{set}/schedule/pause (operator)."""
        return cast(ScheduleResponse, self._post(f"/v1/sets/{_seg(set_name)}/schedule/pause", {"note": note},
                                                 request_id, operator=True))

    def unpause_schedule(self, set_name: str, note: Optional[str] = None,
                         request_id: Optional[str] = None) -> ScheduleResponse:
        """POST /v1/sets/{set}/schedule/unpause (operator)."""
        return cast(ScheduleResponse, self._post(f"/v1/sets/{_seg(set_name)}/schedule/unpause", {"note": note},
                                                 request_id, operator=True))

    def trigger_schedule(self, set_name: str, request_id: Optional[str] = None) -> ScheduleResponse:
        """POST /v1/sets/{set}/schedule/trigger (operator): a scheduled
        checkpoint now (skipped while the previous one runs)."""
        return cast(ScheduleResponse, self._post(f"/v1/sets/{_seg(set_name)}/schedule/trigger", {}, request_id,
                                                 operator=True))

    def delete_schedule(self, set_name: str, request_id: Optional[str] = None) -> StoppedResponse:
        """DELETE /v1/sets/{set}/schedule (operator): its checkpoints stay."""
        return cast(StoppedResponse, self._post(f"/v1/sets/{_seg(set_name)}/schedule", {}, request_id,
                                                operator=True, method="DELETE"))

    def pin(self, set_name: str, tag: str, request_id: Optional[str] = None) -> PinResponse:
        """POST /v1/sets/{set}/pins: keep the set's committed checkpoints of
        this tag (or id) whatever the retention."""
        return cast(PinResponse, self._post(f"/v1/sets/{_seg(set_name)}/pins", {"tag": tag}, request_id))

    # -- transport ------------------------------------------------------

    def _post(self, path: str, body: Mapping[str, Any], request_id: Optional[str],
              operator: bool = False, method: str = "POST", keep_empty: bool = False) -> Dict[str, Any]:
        doc = {"request_id": request_id or new_request_id()}
        doc.update({k: v for k, v in body.items() if v is not None or keep_empty})
        return self._json(method, path, body=doc, operator=operator)

    def _json(self, method: str, path: str, query: Optional[Mapping[str, Any]] = None,
              body: Optional[Mapping[str, Any]] = None, timeout: Optional[float] = None,
              operator: bool = False) -> Dict[str, Any]:
        """One call whose answer is a JSON document. Reading the answer is
        retried too: an answer lost after the gateway acted is asked for
        again with the same request id, which applies nothing twice."""

        def roundtrip(req: urllib.request.Request) -> bytes:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout) as resp:
                return cast(bytes, resp.read())

        data = self._with_retries(method, path, query, body, roundtrip, operator)
        try:
            return cast(Dict[str, Any], json.loads(data))
        except ValueError as e:
            raise APIError(200, "bad_response", f"{method} {self.base_url}{path}: answer is not JSON: {e}") from e

    def _open(self, method: str, path: str, query: Optional[Mapping[str, Any]],
              body: Optional[Mapping[str, Any]], timeout: float) -> http.client.HTTPResponse:
        """Opens a streamed answer; only opening it is retried."""

        def opener(req: urllib.request.Request) -> http.client.HTTPResponse:
            return cast(http.client.HTTPResponse, urllib.request.urlopen(req, timeout=timeout))

        return self._with_retries(method, path, query, body, opener)

    def _with_retries(self, method: str, path: str, query: Optional[Mapping[str, Any]],
                      body: Optional[Mapping[str, Any]], send: Callable[[urllib.request.Request], _T],
                      operator: bool = False) -> _T:
        """Sends one request, retrying connection errors, timeouts and 503
        with the same body (and so the same request id); any other non-2xx
        answer raises its APIError at once. An operator route carries the
        operator token when the client has one."""
        url = self.base_url + path + _query(query)
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        token = self.operator_token if operator and self.operator_token else self.token
        if token:
            headers["Authorization"] = f"Bearer {token}"
        attempt = 0
        while True:
            attempt += 1
            try:
                return send(urllib.request.Request(url, data=data, method=method, headers=headers))
            except urllib.error.HTTPError as e:
                err = api_error(e.code, _read_quietly(e))
                e.close()
                if e.code != 503 or attempt >= self.retry.attempts:
                    raise err from None
                why: BaseException = err
            except _TRANSIENT as e:
                if attempt >= self.retry.attempts:
                    raise TransportError(method, url, attempt, e) from e
                why = e
            delay = self.retry.delay(attempt)
            if self._log:
                self._log(f"{method} {url}: {why}; retry {attempt} in {delay:.2f}s")
            self._sleep(delay)


def _seg(name: str) -> str:
    """One path segment, escaped."""
    return urllib.parse.quote(name, safe="")


def _query(params: Optional[Mapping[str, Any]]) -> str:
    if not params:
        return ""
    kept = {k: v for k, v in params.items() if v is not None}
    return "?" + urllib.parse.urlencode(kept) if kept else ""


def _read_quietly(resp: urllib.error.HTTPError) -> bytes:
    try:
        return resp.read()
    except _TRANSIENT:
        return b""


__all__: List[str] = ["Client", "RetryPolicy", "new_request_id"]
