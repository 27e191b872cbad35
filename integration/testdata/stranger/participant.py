#!/usr/bin/env python3
"""A turnstile participant (environment server) written from the protocol documents alone.

Standard library only. Serves one environment, `counter` (export_restore, tools style), on both planes.

Usage:
    participant.py --listen 127.0.0.1:PORT [--name NAME] [--ready-file PATH]
                   [--data-token T] [--control-token C] [--insecure-no-data-auth] [--retired-sessions N]

Tokens: --data-token / --control-token, defaulting to $TURNSTILE_DATA_TOKEN and $TURNSTILE_CONTROL_TOKEN.
Without a data token it refuses to start (unless --insecure-no-data-auth); without a control token every
control route answers 404 control_disabled; equal tokens refuse to start. --ready-file receives the URL
once the server listens (port 0 picks a free port).

Concurrency: one lock serialises every request, so a mutation is never in flight while a control operation
runs (prepare freezes its cut at once; retire never meets a running mutation).
"""

import argparse
import collections
import datetime
import hashlib
import hmac
import json
import os
import re
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 16 * 1024 * 1024
LOCK = threading.Lock()


# ---------------------------------------------------------------- canonical JSON (Go encoding/json style)

def _go_escape(s):
    return (s.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def cjson(v):
    """Compact, Go-like: no whitespace, fields in insertion order, <>& escaped."""
    return _go_escape(json.dumps(v, ensure_ascii=False, separators=(",", ":")))


def cjson_indent(v):
    return _go_escape(json.dumps(v, ensure_ascii=False, indent=2)) + "\n"


class Num:
    """A JSON number kept as written (R24)."""
    def __init__(self, text):
        self.text = text


def _canon_raw(v):
    """Canonical text of a value parsed with numbers kept as written: keys sorted."""
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k) + ":" + _canon_raw(v[k]) for k in sorted(v)) + "}"
    if isinstance(v, list):
        return "[" + ",".join(_canon_raw(x) for x in v) + "]"
    if isinstance(v, Num):
        return "#" + v.text
    return json.dumps(v)


def _no_const(c):
    raise ValueError("not JSON: " + c)


def parse_raw(text):
    return json.loads(text, parse_int=Num, parse_float=Num, parse_constant=_no_const)


# ---------------------------------------------------------------- the checkpoint artifact (ARTIFACT.md)

def _sha(b):
    return hashlib.sha256(b).hexdigest()


def _tar_header(name, size):
    h = bytearray(512)
    def put(off, b):
        h[off:off + len(b)] = b
    put(0, name.encode())
    put(100, b"0000644\0")
    put(108, b"0000000\0")
    put(116, b"0000000\0")
    put(124, ("%011o" % size).encode() + b"\0")
    put(136, b"00000000000\0")
    put(148, b"        ")
    put(156, b"0")
    put(257, b"ustar\0")
    put(263, b"00")
    put(329, b"0000000\0")
    put(337, b"0000000\0")
    put(148, ("%06o" % sum(h)).encode() + b"\0 ")
    return bytes(h)


def build_artifact(checkpoint_id, labels, sections, max_records=512, cuts=None):
    """sections: {name: [(key str, data bytes)]}. Returns ({file name: bytes}, digest, record count).
    cuts, when given, is {section: [records per shard]} (a reader rebuilding what it read)."""
    files = {}
    msecs = []
    total = 0
    for name in sorted(sections):
        recs = sorted(sections[name], key=lambda r: r[0].encode())
        total += len(recs)
        if cuts is not None:
            sizes = list(cuts[name])
        else:
            sizes = [min(max_records, len(recs) - i) for i in range(0, len(recs), max_records)]
        shards, index_lines, i = [], [], 0
        for n, count in enumerate(sizes):
            sname = "%s-%05d.tar" % (name, n)
            body = bytearray()
            for key, data in recs[i:i + count]:
                member = _sha(key.encode()) + ".rec"
                body += _tar_header(member, len(data)) + data
                if len(data) % 512:
                    body += b"\0" * (512 - len(data) % 512)
                index_lines.append(cjson({"key": key, "shard": sname, "member": member,
                                          "size": len(data), "sha256": _sha(data)}) + "\n")
            body += b"\0" * 1024
            i += count
            files[sname] = bytes(body)
            shards.append({"name": sname, "size": len(body), "sha256": _sha(bytes(body)), "records": count})
        if i != len(recs):
            raise ValueError("shard cut does not cover the records")
        idx = "".join(index_lines).encode()
        iname = name + ".index.jsonl"
        files[iname] = idx
        msecs.append({"name": name, "records": len(recs),
                      "index": {"name": iname, "size": len(idx), "sha256": _sha(idx)}, "shards": shards})
    m = {"schema": 1, "checkpoint_id": checkpoint_id}
    if labels:
        m["labels"] = {k: labels[k] for k in sorted(labels, key=lambda k: k.encode())}
    m["records"] = total
    m["sections"] = msecs
    m["digest"] = ""
    digest = _sha(cjson_indent(m).encode())
    m["digest"] = digest
    files["manifest.json"] = cjson_indent(m).encode()
    return files, digest, total


class BadArtifact(Exception):
    pass


def read_artifact(loc, checkpoint_id):
    """Validates the whole artifact at loc; returns ({section: {key: data}}, digest). Raises BadArtifact."""
    mpath = os.path.join(loc, "manifest.json")
    if not os.path.isfile(mpath) or os.path.islink(mpath):
        raise BadArtifact("no manifest.json at the location")
    if os.path.getsize(mpath) > 64 * 1024 * 1024:
        raise BadArtifact("manifest too large")
    raw = open(mpath, "rb").read()
    try:
        m = json.loads(raw.decode())
        secs = m["sections"]
        cuts = {s["name"]: [sh["records"] for sh in s["shards"]] for s in secs}
    except Exception as e:
        raise BadArtifact("manifest unreadable: %s" % e)
    if m.get("schema") != 1 or m.get("checkpoint_id") != checkpoint_id:
        raise BadArtifact("manifest of another schema or checkpoint id")
    listed = {"manifest.json"}
    sections = {}
    for s in secs:
        name = s["name"]
        if not re.fullmatch(r"[a-z0-9][a-z0-9._-]{0,127}", name) or ".." in name:
            raise BadArtifact("bad section name")
        ipath = os.path.join(loc, s["index"]["name"])
        listed.add(s["index"]["name"])
        if not os.path.isfile(ipath) or os.path.getsize(ipath) != s["index"]["size"] or s["index"]["size"] > 256 << 20:
            raise BadArtifact("index %s missing or of another size" % s["index"]["name"])
        idx = open(ipath, "rb").read()
        if _sha(idx) != s["index"]["sha256"]:
            raise BadArtifact("index %s corrupt" % s["index"]["name"])
        shard_data = {}
        for sh in s["shards"]:
            listed.add(sh["name"])
            p = os.path.join(loc, sh["name"])
            if not os.path.isfile(p) or os.path.islink(p) or os.path.getsize(p) != sh["size"]:
                raise BadArtifact("shard %s missing or of another size" % sh["name"])
            b = open(p, "rb").read()
            if _sha(b) != sh["sha256"]:
                raise BadArtifact("shard %s corrupt" % sh["name"])
            shard_data[sh["name"]] = b
        recs = []
        offsets = {}
        for line in idx.decode().splitlines():
            e = json.loads(line)
            off = offsets.get(e["shard"], 0)
            b = shard_data.get(e["shard"])
            if b is None or e["size"] > 256 << 20:
                raise BadArtifact("index names an unknown shard")
            data = b[off + 512:off + 512 + e["size"]]
            offsets[e["shard"]] = off + 512 + (e["size"] + 511) // 512 * 512
            recs.append((e["key"], data))
        sections[name] = recs
    try:
        entries = set(os.listdir(loc))
    except OSError as e:
        raise BadArtifact(str(e))
    if entries != listed:
        raise BadArtifact("the location holds files the manifest does not list: %s" % sorted(entries - listed))
    try:
        files, digest, _ = build_artifact(checkpoint_id, m.get("labels") or {}, sections, cuts=cuts)
    except Exception as e:
        raise BadArtifact("records do not rebuild: %s" % e)
    for fname, b in files.items():
        if open(os.path.join(loc, fname), "rb").read() != b:
            raise BadArtifact("%s is not canonical" % fname)
    if digest != m.get("digest"):
        raise BadArtifact("digest mismatch")
    return {n: {k: d for k, d in r} for n, r in sections.items()}, digest


def _fsync_dir(d):
    try:
        fd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def write_files(loc, files):
    order = sorted(f for f in files if f != "manifest.json") + ["manifest.json"]
    for f in order:
        tmp = os.path.join(loc, ".tmp-" + f)
        with open(tmp, "wb") as fh:
            fh.write(files[f])
            fh.flush()
            os.fsync(fh.fileno())
        os.rename(tmp, os.path.join(loc, f))
        _fsync_dir(loc)


# ---------------------------------------------------------------- the counter environment

class EnvError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


COUNTER_SPEC = {
    "name": "counter", "mode": "export_restore", "style": "tools",
    "tools": [{"name": "increment", "description": "Add amount (1 to 10) to the counter and observe its new value.",
               "parameters": {"type": "object", "properties": {"amount": {
                   "type": "integer", "minimum": 1, "maximum": 10, "description": "how much to add to the counter"}},
                   "required": ["amount"], "additionalProperties": False}}],
    "task_format": {"description": "increment the counter from start (default 0) to target",
                    "schema": {"type": "object", "properties": {
                        "target": {"type": "integer", "minimum": 0}, "start": {"type": "integer", "minimum": 0},
                        "padding": {"type": "integer", "minimum": 0, "maximum": 1048576},
                        "refuse_verify": {"type": "string", "enum": ["first", "always"]}},
                        "required": ["target"], "additionalProperties": False},
                    "example": {"target": 5}},
}
INSTRUCTIONS = "You control a counter. Call the increment tool until the counter reaches the target, then answer done."


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def counter_start(task):
    if not isinstance(task, dict) or set(task) - {"target", "start", "padding", "refuse_verify"}:
        raise EnvError("bad_task", 'a counter task is {"target", "start", "padding", "refuse_verify"}')
    t, s, p = task.get("target"), task.get("start", 0), task.get("padding", 0)
    if not _is_int(t) or t < 0 or not _is_int(s) or s < 0 or not _is_int(p) or not 0 <= p <= 1048576:
        raise EnvError("bad_task", "target and start are integers >= 0, padding 0..1048576")
    rv = task.get("refuse_verify")
    if rv is not None and rv not in ("first", "always"):
        raise EnvError("bad_task", 'refuse_verify is "first" or "always"')
    state = {"start": s, "target": t, "padding": p, "value": s, "ops": 0}
    if rv is not None:
        state["refuse_verify"] = rv
        state["verify_refused"] = 0
    shown = {"start": s, "target": t}
    obs = "Increase the counter from %d to %d.\nTASK %s" % (s, t, cjson(shown)) + _pad(state)
    return state, {"instructions": INSTRUCTIONS, "observation": obs}


def _pad(state):
    return ("\n" + "." * state["padding"]) if state["padding"] else ""


def counter_operate(state, tool, args):
    """Returns (new state, outcome); raises EnvError without touching state."""
    if tool != "increment":
        raise EnvError("unknown_tool", "the counter has one tool, increment")
    if not isinstance(args, dict) or set(args) != {"amount"} or not _is_int(args["amount"]) or not 1 <= args["amount"] <= 10:
        raise EnvError("bad_arguments", "amount must be an integer from 1 to 10")
    st = dict(state)
    st["value"] += args["amount"]
    st["ops"] += 1
    return st, {"observation": "counter=%d" % st["value"] + _pad(st), "reward": 0}


def counter_verify(state):
    rv = state.get("refuse_verify")
    if rv == "always" or (rv == "first" and state.get("verify_refused", 0) == 0):
        state["verify_refused"] = state.get("verify_refused", 0) + 1  # the one refusal that records something
        raise EnvError("illegal_action", "this episode refuses its verify (refuse_verify)")
    ok = state["value"] == state["target"]
    return {"reward": 1 if ok else 0, "details": {"value": state["value"], "target": state["target"]}}


def counter_restore(state):
    keys = {"start", "target", "padding", "value", "ops"}
    if not isinstance(state, dict) or not keys <= set(state) <= keys | {"refuse_verify", "verify_refused"} \
            or not all(_is_int(state[k]) for k in keys):
        raise EnvError("bad_state", "a counter state holds start, target, padding, value and ops")
    return dict(state)


ENVS = {"counter": COUNTER_SPEC}


# ---------------------------------------------------------------- participant state

class HTTPErr(Exception):
    def __init__(self, status, code, message):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


def err(status, code, msg):
    return HTTPErr(status, code, msg)


class Participant:
    def __init__(self, name, data_token, control_token, retired_sessions=4096):
        self.name, self.data_token, self.control_token = name, data_token, control_token
        self.retired_bound = retired_sessions
        self.verified = collections.OrderedDict()  # rollout -> None, least recently used first
        self.sessions = {}   # rollout -> {env, attempt, revision, retired, state, receipts: {req: rec}}
        self.fences = {}     # rollout -> fence
        self.stats = {"applied": 0, "replayed": 0, "refused": 0, "parked": 0}
        self.phase = "idle"
        self.cur = None      # active control session: {id, kind, checkpoint_id, done: {op: (args, answer)}}
        self.retired_ids = {}  # id -> resume answer
        self.rollback_ok = set()  # checkpoint ids this process prepared and resumed (R18 live rollback)

    # ---- helpers
    def admission_open(self):
        return self.phase == "idle"

    def live_count(self):
        return sum(1 for s in self.sessions.values() if not s["retired"])

    def summary(self, rid, s, attempt=None):
        return {"rollout_id": rid, "attempt": s["attempt"] if attempt is None else attempt,
                "revision": s["revision"], "env": s["env"], "mode": ENVS[s["env"]]["mode"], "retired": s["retired"]}

    # ---- data plane
    def mutation(self, kind, body, path_rid):
        req = parse_body(body, {
            "start": ({"rollout_id", "attempt", "request_id", "env"}, {"seed", "task"}),
            "operate": ({"rollout_id", "attempt", "request_id", "expected_revision", "tool"}, {"arguments"}),
            "verify": ({"rollout_id", "attempt", "request_id", "expected_revision"}, set()),
        }[kind])
        rid, att, reqid = req["rollout_id"], req["attempt"], req["request_id"]
        if not isinstance(rid, str) or not rid or not isinstance(reqid, str) or not reqid:
            raise err(400, "malformed_request", "rollout_id and request_id are non-empty strings")
        if not _is_int(att) or att < 0:
            raise err(400, "malformed_request", "attempt is an integer >= 0")
        for f in ("expected_revision", "seed"):
            if f in req and not _is_int(req[f]):
                raise err(400, "malformed_request", f + " is an integer")
        if kind == "start" and not isinstance(req["env"], str):
            raise err(400, "malformed_request", "env is a string")
        if kind == "operate" and (not isinstance(req["tool"], str) or not req["tool"]):
            raise err(400, "malformed_request", "tool is a non-empty string")
        if path_rid is not None and path_rid != rid:
            raise err(400, "malformed_request", "rollout_id differs from the path")
        if kind == "start" and req["env"] not in ENVS:
            raise err(404, "unknown_env", "no environment %r" % req["env"])
        fence = self.fences.get(rid, 0)
        if att < fence:
            raise err(409, "stale_attempt", "attempt %d is below the fence %d" % (att, fence))
        if att > fence:
            raise err(409, "attempt_not_installed", "attempt %d is above the fence %d" % (att, fence))
        raw = parse_raw(body)
        raw.pop("attempt", None)
        digest = _sha((kind + "\n" + _canon_raw(raw)).encode())
        sess = self.sessions.get(rid)
        if sess is not None and reqid in sess["receipts"]:
            rec = sess["receipts"][reqid]
            if rid in self.verified:
                self.verified.move_to_end(rid)
            if rec["digest"] != digest or rec["kind"] != kind:
                raise err(409, "request_id_conflict", "request id %r was used with another body" % reqid)
            self.stats["replayed"] += 1
            ans = dict(rec["response"])
            ans["replayed"] = True
            return ans
        if kind == "start":
            if sess is not None:
                if sess["retired"]:
                    raise err(409, "session_retired", "the session of this attempt was verified")
                raise err(409, "request_id_conflict", "this attempt already has a session")
            state, start = counter_start(req.get("task"))
            sess = {"env": req["env"], "attempt": att, "revision": 0, "retired": False, "state": state, "receipts": {}}
            resp = {"revision": 0, "spec": ENVS[req["env"]], "start": start}
            self.sessions[rid] = sess
            self.fences[rid] = att
        else:
            if sess is None:
                raise err(404, "unknown_session", "no session for rollout %r" % rid)
            if sess["retired"]:
                raise err(409, "session_retired", "the session was verified")
            if req["expected_revision"] != sess["revision"]:
                raise err(409, "revision_mismatch", "the session is at revision %d" % sess["revision"])
            if kind == "operate":
                st, outcome = counter_operate(sess["state"], req["tool"], req.get("arguments"))
                sess["state"] = st
                sess["revision"] += 1
                resp = {"revision": sess["revision"], "outcome": outcome}
            else:
                verdict = counter_verify(sess["state"])
                sess["retired"] = True
                sess["state"] = None
                self.verified[rid] = None
                while len(self.verified) > self.retired_bound:
                    old, _ = self.verified.popitem(last=False)
                    if old in self.sessions and self.sessions[old]["retired"]:
                        self.sessions[old]["receipts"] = {}  # its requests are now session_retired
                resp = {"revision": sess["revision"], "verdict": verdict}
        sess["receipts"][reqid] = {"kind": kind, "digest": digest, "response": resp}
        self.stats["applied"] += 1
        return resp

    # ---- control plane
    def ctl_args_check(self, op, sid, args):
        """R19 steps 2-5; returns a recorded answer to replay, or None to run."""
        if sid in self.retired_ids:
            if op == "resume":
                return self.retired_ids[sid]
            if not (op == "restore" and sid in self.rollback_ok and args[0] == sid):
                raise err(409, "stale_checkpoint", "control session %r was resumed" % sid)
        if self.cur is not None and self.cur["id"] != sid:
            raise err(409, "checkpoint_conflict", "control session %r is active" % self.cur["id"])
        if self.cur is not None and op in self.cur["done"]:
            a, ans = self.cur["done"][op]
            if a == args:
                return ans
            raise err(409, "checkpoint_conflict", "%s was done with other arguments" % op)
        return None

    def prepare(self, body):
        req = parse_body(body, ({"checkpoint_id", "deadline"}, set()))
        cid = _id(req, "checkpoint_id")
        dl = req["deadline"]
        if not isinstance(dl, str) or _parse_time(dl) is None:
            raise err(400, "malformed_request", "deadline is an RFC 3339 time, not the zero time")
        rep = self.ctl_args_check("prepare", cid, ())
        if rep is not None:
            return rep
        if self.cur is not None or self.phase != "idle":
            raise err(409, "invalid_phase", "prepare in phase %s" % self.phase)
        self.phase = "prepared"
        ans = {"phase": "prepared", "checkpoint_id": cid,
               "sessions": [self.summary(r, s) for r, s in sorted(self.sessions.items())]}
        self.cur = {"id": cid, "kind": "checkpoint", "checkpoint_id": cid, "done": {"prepare": ((), ans)}}
        return ans

    def commit(self, body):
        req = parse_body(body, ({"checkpoint_id", "location"}, set()))
        cid = _id(req, "checkpoint_id")
        loc = req["location"]
        if not isinstance(loc, str) or not os.path.isabs(loc):
            raise err(400, "malformed_request", "location is an absolute path")
        loc = os.path.normpath(loc)
        rep = self.ctl_args_check("commit", cid, (loc,))
        if rep is not None:
            return rep
        if self.cur is None or self.cur["kind"] != "checkpoint" or self.phase != "prepared":
            raise err(409, "invalid_phase", "commit in phase %s" % self.phase)
        files, digest, records = self.export(cid)
        os.makedirs(loc, exist_ok=True)
        mpath = os.path.join(loc, "manifest.json")
        if os.path.exists(mpath):
            if open(mpath, "rb").read() != files["manifest.json"]:
                raise err(409, "location_conflict", "the location holds another checkpoint")
            try:
                read_artifact(loc, cid)
            except BadArtifact as e:
                raise err(422, "invalid_checkpoint", "files changed since the commit: %s" % e)
        else:
            entries = os.listdir(loc)
            ours = lambda f: f.startswith(".tmp-") or f in files or re.fullmatch(
                r"(server|sessions|receipts|fences)(-\d{5}\.tar|\.index\.jsonl)", f)
            strange = [f for f in entries if not ours(f) or os.path.isdir(os.path.join(loc, f))]
            if strange:
                raise err(409, "location_conflict", "the location holds other files: %s" % strange)
            for f in entries:
                os.remove(os.path.join(loc, f))
            write_files(loc, files)
        self.phase = "committed"
        ans = {"phase": "committed", "checkpoint_id": cid, "location": loc, "manifest_digest": digest,
               "sessions": len(self.sessions), "records": records, "bytes": sum(len(b) for b in files.values())}
        self.cur["done"]["commit"] = ((loc,), ans)
        return ans

    def export(self, cid):
        server = {"schema": 1, "component": "environment_server", "name": self.name,
                  "envs": [{"name": n, "mode": ENVS[n]["mode"], "style": ENVS[n]["style"]} for n in sorted(ENVS)]}
        sess, rec, fen = [], [], []
        for rid, s in self.sessions.items():
            d = {"rollout_id": rid, "env": s["env"], "attempt": s["attempt"], "revision": s["revision"],
                 "retired": s["retired"]}
            if not s["retired"]:
                d["state"] = s["state"]
            sess.append((rid, cjson(d).encode()))
            for reqid, r in s["receipts"].items():
                rec.append((cjson([rid, reqid]), cjson({"rollout_id": rid, "request_id": reqid, "kind": r["kind"],
                                                        "digest": r["digest"], "response": r["response"]}).encode()))
        for rid, f in self.fences.items():
            fen.append((rid, cjson({"rollout_id": rid, "fence": f}).encode()))
        return build_artifact(cid, {"component": "environment_server", "name": self.name},
                              {"server": [("server", cjson(server).encode())], "sessions": sess,
                               "receipts": rec, "fences": fen})

    def restore(self, body):
        req = parse_body(body, ({"checkpoint_id", "location", "attempts"}, {"restore_id", "deadline"}))
        cid = _id(req, "checkpoint_id")
        sid = req.get("restore_id") or cid
        if not isinstance(sid, str):
            raise err(400, "malformed_request", "restore_id is a string")
        loc = req["location"]
        if not isinstance(loc, str) or not os.path.isabs(loc):
            raise err(400, "malformed_request", "location is an absolute path")
        loc = os.path.normpath(loc)
        amap = req["attempts"]
        if not isinstance(amap, dict) or not amap or not all(k and _is_int(v) and v >= 0 for k, v in amap.items()):
            raise err(400, "malformed_request", "attempts maps rollout ids to integers >= 0, at least one")
        dl = req.get("deadline")
        if dl is not None and (not isinstance(dl, str) or _parse_time(dl, allow_zero=True) is None):
            raise err(400, "malformed_request", "deadline is an RFC 3339 time")
        args = (cid, loc, tuple(sorted(amap.items())))
        rep = self.ctl_args_check("restore", sid, args)
        if rep is not None:
            return rep
        if self.cur is not None or self.phase != "idle":
            raise err(409, "invalid_phase", "restore in phase %s" % self.phase)
        try:
            secs, digest = read_artifact(loc, cid)
            srv = json.loads(secs["server"]["server"])
            if set(secs) != {"server", "sessions", "receipts", "fences"} or srv.get("component") != "environment_server":
                raise BadArtifact("not an environment server's checkpoint")
            saved = {k: json.loads(v) for k, v in secs["sessions"].items()}
            sfences = {k: json.loads(v)["fence"] for k, v in secs["fences"].items()}
            receipts = {}
            for v in secs["receipts"].values():
                r = json.loads(v)
                receipts.setdefault(r["rollout_id"], {})[r["request_id"]] = {
                    "kind": r["kind"], "digest": r["digest"], "response": r["response"]}
            for rid, s in saved.items():
                if s["env"] not in ENVS:
                    raise BadArtifact("session of an unknown environment")
                if not s["retired"]:
                    s["state"] = counter_restore(s.get("state"))
        except BadArtifact as e:
            raise err(422, "invalid_checkpoint", str(e))
        except (EnvError, ValueError, KeyError, TypeError) as e:
            raise err(422, "invalid_checkpoint", "unreadable records: %s" % e)
        for rid, new in amap.items():
            seen = [self.fences[rid]] if rid in self.fences else []
            if rid in saved:
                seen.append(saved[rid]["attempt"])
            if rid in sfences:
                seen.append(sfences[rid])
            if seen and new <= max(seen):
                raise err(409, "stale_attempt", "attempt %d of %s is not above %d" % (new, rid, max(seen)))
        restored, fenced, untouched = [], [], []
        for rid in sorted(amap):
            new = amap[rid]
            if rid in saved:
                s = saved[rid]
                self.sessions[rid] = {"env": s["env"], "attempt": new, "revision": s["revision"],
                                      "retired": s["retired"], "state": s.get("state"),
                                      "receipts": receipts.get(rid, {})}
                self.fences[rid] = new
                restored.append(self.summary(rid, self.sessions[rid]))
            else:
                dropped = rid in self.sessions
                self.sessions.pop(rid, None)
                self.fences[rid] = new
                fenced.append({"rollout_id": rid, "attempt": new, "dropped": dropped})
        for rid in sorted(saved):
            if rid in amap:
                continue
            s = saved[rid]
            if s["retired"] and rid not in self.fences and rid not in self.sessions:
                self.sessions[rid] = {"env": s["env"], "attempt": s["attempt"], "revision": s["revision"],
                                      "retired": True, "state": None, "receipts": receipts.get(rid, {})}
                self.fences[rid] = s["attempt"]
                restored.append(self.summary(rid, self.sessions[rid]))
            else:
                untouched.append(rid)
        self.phase = "restored"
        ans = {"phase": "restored", "checkpoint_id": cid, "restore_id": sid, "manifest_digest": digest,
               "restored": restored, "restarted": [], "fenced": fenced, "untouched": untouched}
        self.cur = {"id": sid, "kind": "restore", "checkpoint_id": cid, "done": {"restore": (args, ans)}}
        if sid in self.retired_ids:  # R18's live rollback: the id names this restore session until its resume
            del self.retired_ids[sid]
        self.rollback_ok.discard(sid)
        return ans

    def resume(self, body):
        req = parse_body(body, ({"checkpoint_id"}, {"restore_id"}))
        cid = _id(req, "checkpoint_id")
        rs = req.get("restore_id")
        if rs is not None and not isinstance(rs, str):
            raise err(400, "malformed_request", "restore_id is a string")
        sid = rs or cid
        rep = self.ctl_args_check("resume", sid, ())
        if rep is not None:
            return rep
        ans = {"phase": "idle", "checkpoint_id": cid}
        if rs:
            ans["restore_id"] = rs
        if self.cur is not None:
            if rs and self.cur["checkpoint_id"] != cid:
                raise err(409, "checkpoint_conflict", "restore %r restores another checkpoint" % rs)
            if self.cur["kind"] == "checkpoint":
                self.rollback_ok.add(sid)
        self.cur = None
        self.phase = "idle"
        self.retired_ids[sid] = ans
        return ans

    def retire(self, body):
        req = parse_body(body, ({"rollout_id", "attempt"}, set()))
        rid, n = _id(req, "rollout_id"), req["attempt"]
        if not _is_int(n) or n < 0:
            raise err(400, "malformed_request", "attempt is an integer >= 0")
        if self.phase not in ("idle", "preparing", "prepared"):
            raise err(409, "invalid_phase", "retire in phase %s" % self.phase)
        discarded = False
        s = self.sessions.get(rid)
        if s is not None and s["attempt"] <= n:
            del self.sessions[rid]
            discarded = True
        self.fences[rid] = max(self.fences.get(rid, 0), n + 1)
        return {"rollout_id": rid, "fence": self.fences[rid], "discarded": discarded, "pending": False}

    def authorise(self, body, rid):
        req = parse_body(body, ({"attempt"}, set()))
        n = req["attempt"]
        if not _is_int(n) or n < 0:
            raise err(400, "malformed_request", "attempt is an integer >= 0")
        fence = self.fences.get(rid, 0)
        if n == fence:
            return {"rollout_id": rid, "attempt": n, "fence": fence, "changed": False, "dropped": False, "pending": False}
        if n < fence:
            raise err(409, "stale_attempt", "attempt %d is below the fence %d" % (n, fence))
        if self.phase not in ("idle", "preparing", "prepared"):
            raise err(409, "invalid_phase", "authorise in phase %s" % self.phase)
        dropped = rid in self.sessions and self.sessions[rid]["attempt"] < n
        if dropped:
            del self.sessions[rid]
        self.fences[rid] = n
        return {"rollout_id": rid, "attempt": n, "fence": n, "changed": True, "dropped": dropped, "pending": False}

    def status(self):
        d = {"phase": self.phase}
        if self.cur is not None:
            d["checkpoint_id"] = self.cur["checkpoint_id"]
            if self.cur["kind"] == "restore":
                d["restore_id"] = self.cur["id"]
        d.update({"admission": "open" if self.admission_open() else "closed", "sessions": self.live_count(),
                  "in_flight": []})
        return d


def _id(req, f):
    v = req[f]
    if not isinstance(v, str) or not v:
        raise err(400, "malformed_request", f + " is a non-empty string")
    return v


def _parse_time(s, allow_zero=False):
    try:
        t = datetime.datetime.fromisoformat(s.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None or "T" not in s.upper():
        return None
    if t.year == 1 and t.month == 1 and t.day == 1 and not allow_zero:
        return None
    return t


def _pairs_last_wins(pairs):
    return dict(pairs)


def parse_body(body, fields):
    required, optional = fields
    try:
        v = json.loads(body.decode("utf-8"), parse_constant=_no_const, object_pairs_hook=_pairs_last_wins)
    except (ValueError, UnicodeDecodeError) as e:
        raise err(400, "malformed_request", "the body is not one JSON object: %s" % e)
    if not isinstance(v, dict):
        raise err(400, "malformed_request", "the body is not a JSON object")
    unknown = set(v) - required - optional
    if unknown:
        raise err(400, "malformed_request", "unknown fields %s" % sorted(unknown))
    missing = required - set(v)
    if missing:
        raise err(400, "malformed_request", "missing fields %s" % sorted(missing))
    return v


# ---------------------------------------------------------------- HTTP

class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    P = None  # the Participant

    def log_message(self, *a):
        pass

    def send_json(self, status, obj, headers=()):
        b = cjson(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(b)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(b)

    def send_err(self, e, headers=()):
        self.send_json(e.status, {"error": {"code": e.code, "message": e.message}}, headers)

    def authorised(self, token):
        h = self.headers.get("Authorization", "")
        if not h.startswith("Bearer "):
            return False
        return hmac.compare_digest(h[7:].encode(), token.encode())

    def read_body(self):
        self.body_read = True
        te = self.headers.get("Transfer-Encoding", "")
        if te.lower() == "chunked":
            out = bytearray()
            while True:
                n = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    while self.rfile.readline().strip():
                        pass
                    break
                if len(out) + n > MAX_BODY:
                    self.close_connection = True
                    raise err(400, "malformed_request", "the body is over 16 MiB")
                out += self.rfile.read(n)
                self.rfile.readline()
            return bytes(out)
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            left = n
            while left > 0:  # drain, so the client reads the answer rather than a reset
                chunk = self.rfile.read(min(left, 1 << 20))
                if not chunk:
                    break
                left -= len(chunk)
            raise err(400, "malformed_request", "the body is over 16 MiB")
        return self.rfile.read(n)

    def do_GET(self):
        self.route("GET")

    def do_POST(self):
        self.route("POST")

    def do_PUT(self):
        self.route("PUT")

    def do_DELETE(self):
        self.route("DELETE")

    def route(self, method):
        P = self.P
        self.body_read = False
        try:
            self.route2(method)
        finally:
            if not self.body_read and (self.headers.get("Content-Length", "0") not in ("", "0")
                                       or self.headers.get("Transfer-Encoding")):
                try:  # drain the unread body (after the answer), so it is not taken for the next request
                    self.read_body()
                except Exception:
                    self.close_connection = True

    def route2(self, method):
        P = self.P
        path = self.path.split("?", 1)[0]
        if path == "/healthz" and method == "GET":
            return self.send_json(200, {"ok": True})
        if path.startswith("/v1/control/"):
            return self.control(method, path)
        if P.data_token is not None and not self.authorised(P.data_token):
            return self.send_err(err(401, "unauthorized", "a data token is required"),
                                 [("WWW-Authenticate", 'Bearer realm="turnstile-data"')])
        try:
            with LOCK:
                try:
                    ans = self.data(method, path)
                except HTTPErr as e:
                    if e.status == 503:
                        P.stats["parked"] += 1
                    elif 400 <= e.status < 500:
                        P.stats["refused"] += 1
                    raise
                except EnvError as e:
                    P.stats["refused"] += 1
                    raise err(422, e.code, e.message)
            self.send_json(200, ans)
        except HTTPErr as e:
            self.send_err(e)
        except Exception as e:  # the participant itself failed
            self.send_err(err(500, "internal", "%s: %s" % (type(e).__name__, e)))

    def data(self, method, path):
        P = self.P
        m = re.fullmatch(r"/v1/sessions/([^/]+)(/operate|/verify)?", path)
        mutation = (method == "POST" and (path == "/v1/sessions" or (m and m.group(2))))
        if mutation:
            if not P.admission_open():
                try:
                    self.read_body()
                except HTTPErr:
                    pass
                raise err(503, "parked", "admission is closed (phase %s); retry later" % P.phase)
            body = self.read_body()
            if path == "/v1/sessions":
                return P.mutation("start", body, None)
            return P.mutation(m.group(2)[1:], body, _unquote(m.group(1)))
        if method == "GET" and path == "/v1/envs":
            return [ENVS[n] for n in sorted(ENVS)]
        if method == "GET" and path == "/v1/stats":
            return dict(P.stats, sessions=P.live_count())
        if method == "GET" and m and not m.group(2):
            rid = _unquote(m.group(1))
            s = P.sessions.get(rid)
            if s is None:
                raise err(404, "unknown_session", "no session for rollout %r" % rid)
            return {"rollout_id": rid, "env": s["env"], "attempt": s["attempt"], "revision": s["revision"],
                    "retired": s["retired"]}
        raise err(404, "not_found", "no route %s %s" % (method, path))

    def control(self, method, path):
        P = self.P
        try:
            if P.control_token is None:
                raise err(404, "control_disabled", "this participant has no control token")
            if not self.authorised(P.control_token):
                return self.send_err(err(401, "unauthorized", "a control token is required"),
                                     [("WWW-Authenticate", 'Bearer realm="turnstile-control"')])
            body = self.read_body() if method == "POST" else b""
            with LOCK:
                if method == "GET" and path == "/v1/control/capabilities":
                    st = P.status()
                    ans = {"component": "environment_server", "name": P.name, "schema_version": 1,
                           "envs": [{"name": n, "mode": ENVS[n]["mode"], "style": ENVS[n]["style"]} for n in sorted(ENVS)],
                           "features": ["absolute_deadline_v1", "receipts_in_checkpoint_v1", "restart_only_discard_v1",
                                        "restore_sessions_v1", "authorise_start_over_v1"],
                           "phase": st["phase"]}
                    for k in ("checkpoint_id", "restore_id"):
                        if k in st:
                            ans[k] = st[k]
                elif method == "GET" and path == "/v1/control/status":
                    ans = P.status()
                elif method == "POST" and path in ("/v1/control/prepare", "/v1/control/commit", "/v1/control/restore",
                                                   "/v1/control/resume", "/v1/control/retire"):
                    ans = getattr(P, path.rsplit("/", 1)[1])(body)
                else:
                    m = re.fullmatch(r"/v1/control/sessions/([^/]+)/authorise", path)
                    if method == "POST" and m:
                        ans = P.authorise(body, _unquote(m.group(1)))
                    else:
                        raise err(404, "not_found", "no route %s %s" % (method, path))
            self.send_json(200, ans)
        except HTTPErr as e:
            self.send_err(e)
        except Exception as e:
            self.send_err(err(500, "internal", "%s: %s" % (type(e).__name__, e)))


def _unquote(s):
    from urllib.parse import unquote
    return unquote(s)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--listen", default="127.0.0.1:8097")
    ap.add_argument("--name", default="stranger-0")
    ap.add_argument("--ready-file", default="")
    ap.add_argument("--data-token", default=os.environ.get("TURNSTILE_DATA_TOKEN", ""))
    ap.add_argument("--control-token", default=os.environ.get("TURNSTILE_CONTROL_TOKEN", ""))
    ap.add_argument("--insecure-no-data-auth", action="store_true")
    ap.add_argument("--retired-sessions", type=int, default=4096,
                    help="verified sessions whose receipts are kept (least recently used dropped first)")
    a = ap.parse_args(argv)
    if not a.data_token and not a.insecure_no_data_auth:
        print("refusing to start without a data token (--data-token or TURNSTILE_DATA_TOKEN)", file=sys.stderr)
        return 2
    if a.data_token and a.data_token == a.control_token:
        print("refusing to start: the data and control tokens are equal", file=sys.stderr)
        return 2
    host, port = a.listen.rsplit(":", 1)
    Handler.P = Participant(a.name, a.data_token or None, a.control_token or None, a.retired_sessions)
    srv = ThreadingHTTPServer((host, int(port)), Handler)
    srv.daemon_threads = True
    url = "http://%s:%d" % (host, srv.server_address[1])
    if a.ready_file:
        tmp = a.ready_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(url + "\n")
        os.rename(tmp, a.ready_file)
    print("listening on " + url, file=sys.stderr, flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
