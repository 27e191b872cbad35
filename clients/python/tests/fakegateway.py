"""A tiny in-process fake of the turnstile gateway (standard library only).

It speaks the routes the client and the trainer loop use, with the
gateway's semantics where they matter to a trainer: bearer auth, request-id
idempotency, a feed that holds each result until its receipt is
acknowledged and starts at the oldest unacknowledged result without a
cursor, failed rollouts in the feed, the set_stalled watchdog error, and
checkpoints. Tests script faults on top: an answer (status and body) or a
dropped connection for the next requests of a route.
"""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Tuple

DROP = "drop"  # a fault that closes the connection without an answer

# The operator role's routes.
OPERATOR_ROUTES = ("/v1/checkpoints", "/v1/restores", "/v1/resumes")


def operator_route(method: str, path: str) -> bool:
    """Whether method and path need the operator role: the checkpoint
    routes, and changes to a set's watchdog and schedule but its tag."""
    if path.startswith(OPERATOR_ROUTES):
        return True
    parts = path.strip("/").split("/")
    if method == "GET" or len(parts) < 4 or parts[:2] != ["v1", "sets"]:
        return False
    return parts[3] in ("watchdog", "schedule") and parts[4:] != ["tag"]


@dataclass
class Recorded:
    method: str
    path: str
    query: Dict[str, List[str]]
    headers: Dict[str, str]
    body: Any


@dataclass
class FakeSet:
    """A set whose rollouts finish `per_poll` at a time, one batch per feed
    poll, in index order; the ids in `failing` fail instead of completing."""

    name: str
    count: int
    per_poll: int = 4
    failing: Tuple[int, ...] = ()
    finished: List[str] = field(default_factory=list)
    acked: Dict[str, str] = field(default_factory=dict)  # rollout id -> sha256
    stalled: str = ""  # non-empty: the feed answers set_stalled with this reason
    skip_once: Optional[int] = None  # a cursor bug: the first cursor past this index skips one item
    stall_after_polls: int = 0  # the watchdog fires at this feed poll (with stall_reason)
    stall_reason: str = "model endpoint unreachable: connection refused"
    polls: int = 0

    def rid(self, i: int) -> str:
        return f"{self.name}-{i:04d}"

    def item(self, rid: str) -> Dict[str, Any]:
        i = int(rid.rsplit("-", 1)[1])
        base: Dict[str, Any] = {"schema_version": 1, "rollout_id": rid, "set": self.name, "env": "counter",
                                "attempt": 0, "group": None, "repeat": None}
        if i in self.failing:
            return {**base, "status": "failed", "held": False, "failure": f"model endpoint down ({rid})",
                    "reward": None, "usage": None, "messages": []}
        sha = hashlib.sha256(rid.encode()).hexdigest()
        return {**base, "status": "completed", "held": True,
                "receipt": {"rollout_id": rid, "attempt": 0, "sha256": sha}, "reward": 1.0 if i % 2 else 0.5,
                "usage": {"prompt_tokens": 10 + i, "completion_tokens": 3, "total_tokens": 13 + i, "calls": 1},
                "messages": [{"role": "user", "content": "go"},
                             {"role": "assistant", "content": "ok", "generation_token_ids": [1, 2, 3]}]}

    def advance(self) -> None:
        for i in range(len(self.finished), min(self.count, len(self.finished) + self.per_poll)):
            self.finished.append(self.rid(i))

    def deliverable(self, rid: str) -> bool:
        return rid not in self.acked

    def health(self) -> Dict[str, Any]:
        failed = sum(1 for r in self.finished if self.item(r)["status"] == "failed")
        return {"state": "stalled" if self.stalled else "ok", "rollouts": self.count,
                "completed": len(self.finished) - failed, "failed": failed,
                "running": self.count - len(self.finished), "held": sum(1 for r in self.finished
                                                                        if self.deliverable(r)),
                "progress_per_min": 0.0, "consecutive_failures": 0, "model_error_rate": 1.0 if self.stalled else 0.0,
                "model_errors": [self.stalled] if self.stalled else [], "stuck": [], "server_recoveries": [], "reason": self.stalled,
                "window_ms": 5000}


class FakeGateway:
    """Serves on a free loopback port until close()."""

    def __init__(self, token: str = "secret", operator_token: Optional[str] = None) -> None:
        self.token = token
        # With an operator token, checkpoints, restores and resumes need it
        # (the trainer token is answered 403, as the gateway does).
        self.operator_token = operator_token
        self.sets: Dict[str, FakeSet] = {}
        self.requests: List[Recorded] = []
        self.faults: List[Tuple[str, str, Any, Any]] = []  # (method, path prefix, status or DROP, body)
        self.idempotent: Dict[str, Tuple[str, int, Any]] = {}  # request_id -> (body digest, status, answer)
        self.checkpoints: Dict[str, Dict[str, Any]] = {}
        self.checkpoint_polls_to_complete = 1
        self.watchdogs: Dict[str, Dict[str, Any]] = {}  # set -> its watchdog status
        self.schedules: Dict[str, Dict[str, Any]] = {}  # set -> its schedule
        self.set_options: Dict[str, Any] = {}  # FakeSet fields of the sets submitted from now on
        self.lock = threading.Lock()
        handler = type("Handler", (_Handler,), {"gw": self})
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fail(self, method: str, prefix: str, status: Any, body: Any = None, times: int = 1) -> None:
        """Answers the next `times` requests of method on paths starting
        with prefix with status and body (DROP: close the connection)."""
        with self.lock:
            self.faults.extend([(method, prefix, status, body)] * times)

    def calls(self, method: str, path: str) -> List[Recorded]:
        """The requests made of method on path (as sent, percent-escaped)."""
        with self.lock:
            return [r for r in self.requests if r.method == method and r.path == path]

    # -- routes ---------------------------------------------------------

    def route(self, method: str, path: str, query: Dict[str, List[str]], body: Any) -> Tuple[int, Any]:
        parts = path.strip("/").split("/")
        if method == "POST" and path == "/v1/sets":
            return self._idempotent(body, self._submit)
        if len(parts) >= 4 and parts[:2] == ["v1", "sets"] and parts[3] in ("watchdog", "schedule", "pins"):
            return self._automation(method, urllib.parse.unquote(parts[2]), parts[3:], body)
        if len(parts) >= 3 and parts[:2] == ["v1", "sets"]:
            fs = self.sets.get(urllib.parse.unquote(parts[2]))
            if fs is None:
                return 404, error("not_found", f"no rollout of set {parts[2]}", "set")
            if method == "GET" and len(parts) == 4 and parts[3] == "feed":
                return self._feed(fs, query)
            if method == "POST" and len(parts) == 4 and parts[3] == "acks":
                return self._idempotent(body, lambda b: self._ack(fs, b))
            if method == "GET" and len(parts) == 3:
                return 200, {"set": fs.name, "health": fs.health()}
        if method == "POST" and path == "/v1/checkpoints":
            return self._idempotent(body, self._checkpoint)
        if method == "GET" and len(parts) == 3 and parts[:2] == ["v1", "checkpoints"]:
            cp = self.checkpoints.get(parts[2])
            if cp is None:
                return 404, error("not_found", f"no checkpoint {parts[2]}", "id")
            cp["polls"] += 1
            if cp["polls"] >= self.checkpoint_polls_to_complete:
                cp["status"] = "completed"
            return 200, {"id": cp["id"], "workflow_id": "checkpoint/" + cp["id"], "run_id": "r1",
                         "status": cp["status"], "result": {"members": 3}}
        return 404, error("not_found", f"no route {method} {path}", "")

    def _idempotent(self, body: Any, handle: Any) -> Tuple[int, Any]:
        rid = body.get("request_id") if isinstance(body, dict) else None
        if not rid:
            return 400, error("bad_request", "request_id is required", "request_id")
        digest = json.dumps(body, sort_keys=True)
        seen = self.idempotent.get(rid)
        if seen is not None:
            if seen[0] != digest:
                return 409, error("conflict", f"request_id {rid} was used with another body", "request_id")
            return seen[1], seen[2]
        status, answer = handle(body)
        if status < 500:
            self.idempotent[rid] = (digest, status, answer)
        return status, answer

    def _submit(self, body: Dict[str, Any]) -> Tuple[int, Any]:
        name = body.get("set", "")
        if not name:
            return 400, error("bad_request", "set is required", "set")
        if name in self.sets:
            return 409, error("conflict", f"set {name} exists under another request_id", "set")
        count = int(body.get("count") or len(body.get("rows") or []) * int(body.get("repeats") or 1))
        if count <= 0:
            return 400, error("bad_request", "count must be positive", "count")
        self.sets[name] = FakeSet(name, count, **self.set_options)
        return 200, {"set": name, "request_id": body["request_id"], "rollouts": count, "started": count,
                     "existing": 0}

    def _feed(self, fs: FakeSet, query: Dict[str, List[str]]) -> Tuple[int, Any]:
        fs.polls += 1
        if fs.stall_after_polls and fs.polls >= fs.stall_after_polls:
            fs.stalled = fs.stall_reason
        if fs.stalled:
            return 409, {**error("set_stalled", f"no progress in 5s: {fs.stalled}", ""), "health": fs.health()}
        fs.advance()
        cursor = query.get("cursor", [""])[0]
        limit = int(query.get("max", ["100"])[0])
        if cursor:
            idx = int(cursor)
        else:
            idx = next((i for i, r in enumerate(fs.finished) if fs.deliverable(r)), len(fs.finished))
        items = []
        while idx < len(fs.finished) and len(items) < limit:
            rid = fs.finished[idx]
            idx += 1
            if fs.skip_once is not None and idx - 1 == fs.skip_once and cursor:
                fs.skip_once = None  # the bug: this item is passed over once
                continue
            if fs.deliverable(rid):
                items.append(fs.item(rid))
        done = len(fs.finished) == fs.count and idx >= len(fs.finished)
        return 200, {"items": items, "cursor": str(idx), "health": fs.health(), "done": done}

    def _ack(self, fs: FakeSet, body: Dict[str, Any]) -> Tuple[int, Any]:
        receipts = body.get("receipts") or []
        if not receipts:
            return 400, error("bad_request", "receipts: want at least one", "receipts")
        for n, r in enumerate(receipts):
            want = fs.item(r.get("rollout_id", "x-0")).get("receipt") if r.get("rollout_id") in fs.finished else None
            if want is None or want["sha256"] != r.get("sha256"):
                return 409, error("conflict", f"receipt of {r.get('rollout_id')} does not match", f"receipts[{n}]")
        already = sum(1 for r in receipts if r["rollout_id"] in fs.acked)
        for r in receipts:
            fs.acked[r["rollout_id"]] = r["sha256"]
        return 200, {"receipts": len(receipts), "acknowledged": len(receipts) - already, "already": already,
                     "closed": 0}

    def _checkpoint(self, body: Dict[str, Any]) -> Tuple[int, Any]:
        cp_id = body.get("checkpoint_id", "")
        if cp_id in self.checkpoints:
            return 409, error("conflict", f"checkpoint {cp_id} is taken", "checkpoint_id")
        self.checkpoints[cp_id] = {"id": cp_id, "set": body.get("set"), "status": "running", "polls": 0,
                                   "participants": body.get("participants")}
        return 202, {"id": cp_id, "workflow_id": "checkpoint/" + cp_id, "run_id": "r1", "existing": False}


    def _automation(self, method: str, name: str, rest: List[str], body: Any) -> Tuple[int, Any]:
        """A set's watchdog, schedule and pins, as the gateway answers them."""
        if method != "GET" and not (isinstance(body, dict) and body.get("request_id")):
            return 400, error("bad_request", "request_id is required", "request_id")
        if rest == ["watchdog"]:
            wd = self.watchdogs.get(name)
            if method == "POST":
                existing = wd is not None and wd["phase"] == "watching"
                if not existing:
                    self.watchdogs[name] = {"set": name, "phase": "watching", "watched": body["participants"],
                                            "standby_used": 0, "declarations": [], "schedule_held": False,
                                            "rounds": 0}
                return 202, {"id": name, "workflow_id": "watchdog/" + name, "run_id": "r1", "existing": existing}
            if method == "DELETE":
                if wd is not None:
                    wd["phase"] = "stopped"
                return 200, {"set": name, "stopped": True}
            if wd is None:
                return 404, error("not_found", f"set {name} has no watchdog", "")
            return 200, wd
        if rest == ["pins"]:
            hits = [r["checkpoint_id"] for r in self.schedules.get(name, {}).get("recent", [])
                    if r.get("tag") == body.get("tag")]
            if not hits:
                return 404, error("not_found", f"set {name} has no committed checkpoint tagged {body.get('tag')!r}",
                                  "tag")
            return 200, {"set": name, "tag": body["tag"], "pinned": hits}
        sch = self.schedules.get(name)
        if rest == ["schedule"] and method == "POST":
            if sch is not None:
                return 200, {**sch, "existing": True}
            sch = {"id": "checkpoints/" + name, "set": name, "every": body["every"], "tag": body.get("tag", ""),
                   "keep": body.get("keep", 0), "paused": bool(body.get("paused")), "note": "", "fired": 0,
                   "skipped": 0, "recent": [], "next": [], "existing": False}
            self.schedules[name] = sch
            return 200, sch
        if rest == ["schedule"] and method == "DELETE":
            self.schedules.pop(name, None)
            return 200, {"set": name, "stopped": True}
        if sch is None:
            return 404, error("not_found", f"set {name} has no checkpoint schedule", "")
        if rest == ["schedule", "tag"]:
            sch["tag"] = body["tag"]
        elif rest in (["schedule", "pause"], ["schedule", "unpause"]):
            sch["paused"], sch["note"] = rest[1] == "pause", body.get("note", "")
        elif rest == ["schedule", "trigger"]:
            sch["fired"] += 1
            cp = f"every-{name}-{sch['fired']}"
            sch["recent"].append({"checkpoint_id": cp, "workflow_id": "checkpoint/" + cp, "tag": sch["tag"]})
        return 200, sch


def error(code: str, message: str, field_path: str) -> Dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field_path}}


class _Handler(BaseHTTPRequestHandler):
    gw: FakeGateway
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base class's name)
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        gw = self.gw
        with gw.lock:
            gw.requests.append(Recorded(method, url.path, urllib.parse.parse_qs(url.query),
                                        dict(self.headers.items()), body))
            fault = next((f for f in gw.faults if f[0] == method and url.path.startswith(f[1])), None)
            if fault is not None:
                gw.faults.remove(fault)
        if fault is not None:
            if fault[2] == DROP:
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True
                return
            self._answer(fault[2], fault[3])
            return
        if url.path == "/healthz":
            self._answer(200, {"ok": True})
            return
        auth = self.headers.get("Authorization")
        operator = gw.operator_token is not None and auth == f"Bearer {gw.operator_token}"
        if auth != f"Bearer {gw.token}" and not operator:
            self._answer(401, error("unauthorized", "missing or wrong bearer token", ""))
            return
        if gw.operator_token is not None and not operator and operator_route(method, url.path):
            self._answer(403, error("forbidden", "this route needs the operator role: send the operator token", ""))
            return
        if url.path.endswith("/export") and method == "GET":
            self._ndjson(url.path)
            return
        with gw.lock:
            status, answer = gw.route(method, url.path, urllib.parse.parse_qs(url.query), body)
        self._answer(status, answer)

    def _ndjson(self, path: str) -> None:
        fs = self.gw.sets.get(path.split("/")[3])
        if fs is None:
            self._answer(404, error("not_found", "no such set", "set"))
            return
        data = b"".join(json.dumps(fs.item(r)).encode() + b"\n" for r in fs.finished)
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _answer(self, status: int, body: Any) -> None:
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
