"""The checkpoint control plane: the phase fence and prepare, commit, restore,
resume, retire and authorise (docs/protocol/RULES.md R8, R9, R11-R14).

A control session is named by its checkpoint id, or for a restore by its
restore id (default: the checkpoint id). The same (session, operation) with
the same arguments replays its recorded answer; another session while one
is active is a checkpoint_conflict; resume retires the id (stale_checkpoint
from then on, except resume itself, which replays); an operation the phase
does not allow is invalid_phase; a failed operation records nothing and
returns to the phase it started from. Control operations run one at a time.
"""

import datetime
import json
import os
import re
import threading
import time

from . import artifact, wire
from .environment import EnvError
from .sessions import OPERATE, START, VERIFY, Session, Slot
from .wire import refuse

SCHEMA_VERSION = 1
COMPONENT = "environment_server"
FEATURES = ["absolute_deadline_v1", "retire_straggler_v1", "receipts_in_checkpoint_v1",
            "restart_only_discard_v1", "restore_sessions_v1", "authorise_start_over_v1"]
IDLE, PREPARING, PREPARED, COMMITTING, COMMITTED, RESTORING, RESTORED = (
    "idle", "preparing", "prepared", "committing", "committed", "restoring", "restored")
SECTIONS = ["fences", "receipts", "server", "sessions"]


class PhaseFence:
    """The checkpoint state machine every control operation passes."""

    def __init__(self):
        self.phase = IDLE
        self.active = ""  # the control session in progress
        self.kind = ""  # "checkpoint" once a prepare ran in it, "restore" once a restore did
        self.checkpoint = ""  # the checkpoint the active session is about
        self.results = {}  # op -> (key, answer) of the active session
        self.retired = {}  # session id -> (resume answer, kind), for the life of the process
        self.frozen = None  # the cut, prepare -> resume

    def begin(self, op, sid, checkpoint, key="", allowed=None, during=None):
        """Lets an operation start (returns its entry state), or returns
        ("replay", answer), or raises the refusal."""
        if not sid:
            raise refuse("malformed_request", "missing field checkpoint_id")
        if sid in self.retired:
            answer, kind = self.retired[sid]
            reusing = self.active == sid and self.kind == "restore"
            if reusing and op in ("restore", "resume"):
                pass
            elif not reusing and op == "resume":
                return "replay", answer
            elif not reusing and op == "restore" and kind == "checkpoint" and checkpoint == sid:
                pass  # the first restore of a checkpoint this process took, under its own id
            else:
                raise refuse("stale_checkpoint", f"{kind or 'control'} session {sid!r} was resumed and is retired; this {op} is from a "
                                                 "stale coordinator or a re-run (restore a checkpoint again under a new restore_id)")
        if self.active and self.active != sid:
            raise refuse("checkpoint_conflict", f"checkpoint {self.active!r} is active (phase {self.phase}); {op} of checkpoint {sid!r} refused")
        if op in self.results:
            rkey, answer = self.results[op]
            if rkey != key:
                raise refuse("checkpoint_conflict", f"{op} of checkpoint {sid!r} already succeeded with other arguments ({rkey})")
            return "replay", answer
        if allowed is not None and self.phase not in allowed:
            raise refuse("invalid_phase", f"{op} of checkpoint {sid!r} is not allowed in phase {self.phase} (allowed: {allowed})")
        if op == "resume" and self.active == sid and self.kind == "restore" and checkpoint and checkpoint != self.checkpoint:
            raise refuse("checkpoint_conflict", f"restore session {sid!r} restores checkpoint {self.checkpoint!r}; resume names {checkpoint!r}")
        entry = (self.phase, self.active, self.kind, self.checkpoint)
        if self.active != sid:
            self.checkpoint = checkpoint
        self.active = sid
        self.kind = {"prepare": "checkpoint", "restore": "restore"}.get(op, self.kind)
        self.phase = during or self.phase
        return "run", entry

    def fail(self, entry):
        self.phase, self.active, self.kind, self.checkpoint = entry
        if self.phase == IDLE:
            self.active = self.kind = self.checkpoint = ""
            self.frozen = None

    def succeed(self, op, after, key, answer):
        self.phase = after
        if op == "resume":
            self.retired[self.active] = (answer, self.kind)
            self.active = self.kind = self.checkpoint = ""
            self.results = {}
            self.frozen = None
        else:
            self.results[op] = (key, answer)


class ControlPlane:
    def __init__(self, data, name):
        self.data = data
        self.name = name
        self.fence = PhaseFence()
        self.mu = threading.Lock()  # one control operation at a time

    # --- reads ---------------------------------------------------------------

    def env_capabilities(self):
        return [{"name": s["name"], "mode": self.data.mode_of(s["name"]), "style": s.get("style") or ""} for s in self.data.specs]

    # Capabilities and status take no control lock: a participant that is
    # draining for a prepare stays observable (R11).

    def capabilities(self, _body):
        f = self.fence
        out = {"component": COMPONENT, "name": self.name, "schema_version": SCHEMA_VERSION,
               "envs": self.env_capabilities(), "features": FEATURES, "phase": f.phase}
        return _with_ids(out, f)

    def status(self, _body):
        f = self.fence
        out = _with_ids({"phase": f.phase}, f)
        out["admission"] = "closed" if self.data.gate.closed else "open"
        out["sessions"] = self.data.live_count
        frozen = f.frozen
        if frozen is not None and frozen["sessions"]:
            out["cut_sessions"] = len(frozen["sessions"])
        out["in_flight"] = self.data.gate.in_flight()
        return out

    # --- prepare ----------------------------------------------------------------

    def prepare(self, body):
        req = wire.decode_request(body, {"checkpoint_id": str, "deadline": str}, ["checkpoint_id", "deadline"])
        deadline = parse_time(req["deadline"], "deadline")
        with self.mu:
            what, v = self.fence.begin("prepare", req["checkpoint_id"], req["checkpoint_id"], allowed=[IDLE], during=PREPARING)
            if what == "replay":
                return v
            was_closed = self._close_admission()
            if not self.data.lock.acquire(timeout=max(0.0, deadline - time.time())):
                self._reopen(was_closed)
                self.fence.fail(v)
                raise refuse("prepare_timeout", f"prepare of checkpoint {req['checkpoint_id']!r}: mutations still running at the deadline: "
                                                f"{_describe(self.data.gate.in_flight())}; retire them or retry; admission is open again")
            try:
                cut = self._export_cut()
            except Exception:
                self._reopen(was_closed)
                self.fence.fail(v)
                raise
            finally:
                self.data.lock.release()
            self.fence.frozen = cut
            ans = {"phase": PREPARED, "checkpoint_id": req["checkpoint_id"], "sessions": self._summaries(cut["sessions"])}
            self.fence.succeed("prepare", PREPARED, "", ans)
            return ans

    def _close_admission(self):
        with self.data.gate.mu:
            was = self.data.gate.closed
            self.data.gate.closed = True
        return was

    def _reopen(self, was_closed):
        if not was_closed:
            with self.data.gate.mu:
                self.data.gate.closed = False

    def _export_cut(self):
        """Every session (live, and verified with its receipts), its
        environment state (export_restore only) and every fence. Callers
        hold the data lock with admission closed."""
        cut = {"sessions": [], "fences": {}}
        for rid in sorted(self.data.slots):
            sl = self.data.slots[rid]
            cut["fences"][rid] = sl.fence
            s = sl.session
            if s is None:
                continue
            rec = {"rollout_id": rid, "env": s.env, "attempt": s.attempt, "revision": s.revision, "retired": s.retired,
                   "receipts": {k: dict(r) for k, r in s.receipts.items()}}
            if s.live is not None and self.data.mode_of(s.env) == "export_restore":
                rec["state"] = s.live.export()
            cut["sessions"].append(rec)
        return cut

    def _summaries(self, records):
        return [{"rollout_id": r["rollout_id"], "attempt": r["attempt"], "revision": r["revision"], "env": r["env"],
                 "mode": self.data.mode_of(r["env"]), "retired": r["retired"]} for r in records]

    # --- commit -----------------------------------------------------------------

    def commit(self, body):
        req = wire.decode_request(body, {"checkpoint_id": str, "location": str}, ["checkpoint_id", "location"])
        loc = clean_location(req["location"])
        cid = req["checkpoint_id"]
        with self.mu:
            what, v = self.fence.begin("commit", cid, cid, key="location " + loc, allowed=[PREPARED], during=COMMITTING)
            if what == "replay":
                return self._recheck_commit(v, loc, cid)
            try:
                m = artifact.write(loc, cid, {"component": COMPONENT, "name": self.name}, self._sections(self.fence.frozen))
                size = artifact.size_of(loc, m)
            except (artifact.Conflict, artifact.InvalidCheckpoint) as e:
                self.fence.fail(v)
                raise refuse("location_conflict", f"commit of checkpoint {cid!r}: {e}")
            except Exception:
                self.fence.fail(v)
                raise
            ans = {"phase": COMMITTED, "checkpoint_id": cid, "location": loc, "manifest_digest": m["digest"],
                   "sessions": len(self.fence.frozen["sessions"]), "records": m["records"], "bytes": size}
            self.fence.succeed("commit", COMMITTED, "location " + loc, ans)
            return ans

    def _recheck_commit(self, ans, loc, cid):
        """A retried commit validates what is on disk before it answers."""
        try:
            m, _ = artifact.open_checkpoint(loc, cid)
        except (artifact.InvalidCheckpoint, OSError) as e:
            raise refuse("invalid_checkpoint", f"committed checkpoint no longer validates: {e}")
        if m["digest"] != ans["manifest_digest"]:
            raise refuse("invalid_checkpoint", f"checkpoint at {loc} has manifest digest {m['digest']}, the commit wrote {ans['manifest_digest']}")
        return ans

    def _sections(self, cut):
        server = {"schema": SCHEMA_VERSION, "component": COMPONENT, "name": self.name, "envs": self.env_capabilities()}
        sessions, receipts = [], []
        for r in cut["sessions"]:
            rec = {k: r[k] for k in ("rollout_id", "env", "attempt", "revision", "retired")}
            if "state" in r:
                rec["state"] = r["state"]
            sessions.append((r["rollout_id"], wire.dumps(rec)))
            for req_id, rc in r["receipts"].items():
                receipts.append((receipt_key(r["rollout_id"], req_id), wire.dumps({
                    "rollout_id": r["rollout_id"], "request_id": req_id, "kind": rc["kind"], "digest": rc["digest"],
                    "response": wire.loads(rc["response"])})))
        fences = [(rid, wire.dumps({"rollout_id": rid, "fence": f})) for rid, f in cut["fences"].items()]
        return {"server": [("server", wire.dumps(server))], "sessions": sessions, "receipts": receipts, "fences": fences}

    # --- restore ----------------------------------------------------------------

    def restore(self, body):
        req = wire.decode_request(body, {"checkpoint_id": str, "restore_id": str, "location": str, "attempts": dict, "deadline": str},
                                  ["checkpoint_id", "location", "attempts"])
        loc = clean_location(req["location"])
        cid = req["checkpoint_id"]
        if not cid:
            raise refuse("malformed_request", "missing field checkpoint_id")
        rid = req["restore_id"] or cid
        attempts = check_attempts(req["attempts"])
        deadline = parse_time(req["deadline"], "deadline") if req["deadline"] is not None else None
        key = f"checkpoint {cid} location {loc} attempts {wire.dumps({k: attempts[k] for k in sorted(attempts)}).decode()}"
        with self.mu:
            what, v = self.fence.begin("restore", rid, cid, key=key, allowed=[IDLE], during=RESTORING)
            if what == "replay":
                return v
            was_closed = self._close_admission()
            try:
                ans = self._restore(cid, rid, loc, attempts, deadline)
            except Exception:
                self._reopen(was_closed)
                self.fence.fail(v)
                raise
            # Admission stays closed: the coordinator resumes once every
            # participant is installed.
            self.fence.succeed("restore", RESTORED, key, ans)
            return ans

    def _restore(self, cid, rid, loc, attempts, deadline):
        if not self.data.lock.acquire(timeout=-1 if deadline is None else max(0.0, deadline - time.time())):
            raise refuse("prepare_timeout", f"restore of checkpoint {cid!r}: mutations still running: {_describe(self.data.gate.in_flight())}")
        try:
            try:
                m, secs = artifact.open_checkpoint(loc, cid)
            except (artifact.InvalidCheckpoint, OSError) as e:
                raise refuse("invalid_checkpoint", f"restore of checkpoint {cid!r}: {e}")
            cut = read_cut(cid, secs)
            self._check_new_attempts(cid, cut, attempts)
            install, ans = self._map_onto_attempts(cut, attempts)
            self._install(cid, install)
            for s in ans["restarted"]:
                self.data.drop_below(s["rollout_id"], s["attempt"])
            for f in ans.get("fenced", []):
                f["dropped"] = self.data.drop_below(f["rollout_id"], f["attempt"])
                if not f["dropped"]:
                    del f["dropped"]
        finally:
            self.data.lock.release()
        out = {"phase": RESTORED, "checkpoint_id": cid, "restore_id": rid, "manifest_digest": m["digest"],
               "restored": ans["restored"], "restarted": ans["restarted"]}
        for k in ("fenced", "untouched"):
            if ans.get(k):
                out[k] = ans[k]
        return out

    def _check_new_attempts(self, cid, cut, attempts):
        """Each new attempt must be above everything the checkpoint and this
        participant have seen of the rollout, so no attempt runs twice."""
        for rid in sorted(attempts):
            seen = [cut["fences"][rid]] if rid in cut["fences"] else []
            if rid in cut["sessions"]:
                seen.append(cut["sessions"][rid]["attempt"])
            cur = self.data.fence_of(rid)
            if cur is not None:
                seen.append(cur)
            if seen and attempts[rid] <= max(seen):
                raise refuse("stale_attempt", f"restore of checkpoint {cid!r}: new attempt {attempts[rid]} of rollout {rid!r} "
                                              f"is not above attempt {max(seen)} already saved or seen")

    def _map_onto_attempts(self, cut, attempts):
        """What a restore installs, and the answer naming what it does with
        each rollout; only the named rollouts are touched, except a verdict
        a participant that never saw the rollout lost with its process."""
        ans = {"restored": [], "restarted": [], "fenced": [], "untouched": []}
        install = {"sessions": [], "fences": {rid: attempts[rid] for rid in attempts}}
        for rid, rec in cut["sessions"].items():
            rec = dict(rec)
            if rid in attempts:
                rec["attempt"] = attempts[rid]
            elif rec["retired"] and self.data.fence_of(rid) is None:
                if rid in cut["fences"]:
                    install["fences"][rid] = cut["fences"][rid]
            else:
                ans["untouched"].append(rid)
                continue
            s = {"rollout_id": rid, "attempt": rec["attempt"], "revision": rec["revision"], "env": rec["env"],
                 "mode": self.data.mode_of(rec["env"]), "retired": rec["retired"]}
            (ans["restarted"] if not rec["retired"] and "state" not in rec else ans["restored"]).append(s)
            install["sessions"].append(rec)
        ans["fenced"] = [{"rollout_id": rid, "attempt": attempts[rid]} for rid in sorted(attempts) if rid not in cut["sessions"]]
        return install, ans

    def _install(self, cid, st):
        """Installs sessions and fences all or nothing: every record is
        validated and every environment session restored first."""
        todo = []
        try:
            for rec in st["sessions"]:
                todo.append((rec, self._prepare_record(rec)))
        except (EnvError, ValueError, KeyError, TypeError) as e:
            for _, sess in todo:
                if sess is not None and sess.live is not None:
                    sess.live.close()
            raise refuse("invalid_checkpoint", f"restore of checkpoint {cid!r}: nothing installed: {e}")
        for rec, sess in todo:
            sl = self.data.slots.setdefault(rec["rollout_id"], Slot(rec["rollout_id"]))
            sl.fence = max(sl.fence, rec["attempt"], st["fences"].get(rec["rollout_id"], 0))
            if sess is not None:
                self.data.install_session(sl, sess)
        for rid, f in st["fences"].items():
            sl = self.data.slots.setdefault(rid, Slot(rid))
            sl.fence = max(sl.fence, f)

    def _prepare_record(self, rec):
        env = self.data.envs.get(rec["env"])
        if env is None:
            raise ValueError(f"rollout {rec['rollout_id']!r}: unknown env {rec['env']!r}")
        sess = Session(rec["env"], rec["attempt"], rec["revision"], rec["retired"], receipts=dict(rec["receipts"]))
        if rec["retired"]:
            return sess
        if "state" not in rec:
            return None  # restart-only or stateless: only the fence is installed
        try:
            sess.live = env.restore(rec["state"])
        except EnvError as e:
            raise ValueError(f"rollout {rec['rollout_id']!r}: restore env {rec['env']}: {e}")
        return sess

    # --- resume, retire, authorise ----------------------------------------------

    def resume(self, body):
        req = wire.decode_request(body, {"checkpoint_id": str, "restore_id": str}, ["checkpoint_id"])
        sid, ckpt = req["checkpoint_id"], ""
        if req["restore_id"]:
            sid, ckpt = req["restore_id"], req["checkpoint_id"]
        with self.mu:
            what, v = self.fence.begin("resume", sid, ckpt)
            if what == "replay":
                return v
            self._reopen(False)
            ans = {"phase": IDLE, "checkpoint_id": req["checkpoint_id"]}
            if req["restore_id"]:
                ans["restore_id"] = req["restore_id"]
            self.fence.succeed("resume", IDLE, "", ans)
            return ans

    def retire(self, body):
        req = wire.decode_request(body, {"rollout_id": str, "attempt": int}, ["rollout_id", "attempt"])
        if not req["rollout_id"] or req["attempt"] < 0:
            raise refuse("malformed_request", "retire needs a rollout_id and an attempt >= 0")
        rid, floor = req["rollout_id"], req["attempt"] + 1
        with self.mu:
            self._check_raise_phase("retire", rid)
            with self.data.lock:
                discarded = self.data.drop_below(rid, floor)
                fence = self.data.fence_of(rid)
            self._retire_from_cut(rid, floor)
            return {"rollout_id": rid, "fence": fence, "discarded": discarded, "pending": False}

    def authorise(self, rid, body):
        req = wire.decode_request(body, {"attempt": int}, ["attempt"])
        if not rid or req["attempt"] < 0:
            raise refuse("malformed_request", "authorise needs a rollout id in the path and an attempt >= 0")
        n = req["attempt"]
        with self.mu:
            with self.data.lock:
                # An unseen rollout is at attempt 0: its fence is 0.
                fence = self.data.fence_of(rid) or 0
                if n == fence:
                    return {"rollout_id": rid, "attempt": n, "fence": fence, "changed": False, "dropped": False, "pending": False}
                if n < fence:
                    raise refuse("stale_attempt", f"rollout {rid!r}: attempt {n} is below attempt {fence} already installed")
                self._check_raise_phase("authorise", rid)
                dropped = self.data.drop_below(rid, n)
            self._retire_from_cut(rid, n)
            return {"rollout_id": rid, "attempt": n, "fence": n, "changed": True, "dropped": dropped, "pending": False}

    def _check_raise_phase(self, op, rid):
        if self.fence.phase not in (IDLE, PREPARING, PREPARED):
            # A committed cut is on disk: raising a fence now would make the
            # participant and the checkpoint disagree about the execution.
            raise refuse("invalid_phase", f"{op} of rollout {rid!r} is not allowed in phase {self.fence.phase} "
                                          "(allowed: idle, preparing, prepared)")

    def _retire_from_cut(self, rid, floor):
        """A frozen cut loses the sessions of attempts below floor and its
        fence of rid rises, and so does the recorded prepare answer."""
        f = self.fence
        if f.frozen is None:
            return
        f.frozen["sessions"] = [r for r in f.frozen["sessions"] if not (r["rollout_id"] == rid and r["attempt"] < floor)]
        f.frozen["fences"][rid] = max(f.frozen["fences"].get(rid, 0), floor)
        if "prepare" in f.results:
            key, ans = f.results["prepare"]
            ans = dict(ans, sessions=[s for s in ans["sessions"] if not (s["rollout_id"] == rid and s["attempt"] < floor)])
            f.results["prepare"] = (key, ans)


# --- reading a checkpoint -------------------------------------------------------

def read_cut(cid, secs):
    """Reads and checks every record of a validated checkpoint:
    {"sessions": {rid: record with receipts}, "fences": {rid: fence}}."""
    def bad(msg):
        return refuse("invalid_checkpoint", f"restore of checkpoint {cid!r}: {msg}")

    if sorted(secs) != SECTIONS:
        raise bad(f"sections {sorted(secs)}, want exactly {SECTIONS} (not an environment server checkpoint of schema {SCHEMA_VERSION})")
    server = secs["server"]
    srv = _decode_record(server[0][1], {"schema", "component", "name", "envs"}, bad) if len(server) == 1 and server[0][0] == "server" else None
    if srv is None or srv.get("schema") != SCHEMA_VERSION or srv.get("component") != COMPONENT:
        raise bad(f"the server record is not schema {SCHEMA_VERSION} of {COMPONENT}")
    cut = {"sessions": {}, "fences": {}}
    for key, data in secs["sessions"]:
        rec = _decode_record(data, {"rollout_id", "env", "attempt", "revision", "retired", "state", "idle_since"}, bad)
        if rec.get("rollout_id") != key or not _ints(rec, "attempt", "revision") or not isinstance(rec.get("env"), str) \
                or not isinstance(rec.get("retired"), bool):
            raise bad(f"session record {key!r} does not decode as its own")
        rec["receipts"] = {}
        cut["sessions"][key] = rec
    for key, data in secs["receipts"]:
        rc = _decode_record(data, {"rollout_id", "request_id", "kind", "digest", "response"}, bad)
        sess = cut["sessions"].get(rc.get("rollout_id"))
        if sess is None or key != receipt_key(rc.get("rollout_id"), rc.get("request_id")):
            raise bad(f"receipt record {key} belongs to no session")
        if rc.get("kind") not in (START, OPERATE, VERIFY) or not rc.get("digest") or "response" not in rc:
            raise bad(f"receipt {key}: bad kind, digest or response")
        sess["receipts"][rc["request_id"]] = {"kind": rc["kind"], "digest": rc["digest"], "response": wire.dumps(rc["response"])}
    for key, data in secs["fences"]:
        fr = _decode_record(data, {"rollout_id", "fence"}, bad)
        if fr.get("rollout_id") != key or not _ints(fr, "fence"):
            raise bad(f"fence record {key!r} does not decode as its own")
        cut["fences"][key] = fr["fence"]
    return cut


def _decode_record(data, fields, bad):
    try:
        v = wire.loads(data)
    except ValueError as e:
        raise bad(f"record is not JSON: {e}")
    if not isinstance(v, dict) or not set(v) <= fields:
        raise bad(f"record has unknown fields: {sorted(set(v) - fields) if isinstance(v, dict) else v!r}")
    return v


def _ints(rec, *names):
    return all(type(rec.get(n)) is int and rec[n] >= 0 for n in names)


def receipt_key(rollout_id, request_id):
    """The record key of a receipt: [rollout id, request id] as Go encodes it."""
    return wire.dumps([rollout_id, request_id]).decode("utf-8")


# --- request helpers ------------------------------------------------------------

_RFC3339 = re.compile(r"(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})")


def parse_time(text, field):
    """An RFC 3339 time (as Go's time.Time marshals it) as Unix seconds."""
    m = _RFC3339.fullmatch(text or "")
    if not m:
        raise refuse("malformed_request", f"{field} {text!r} is not an RFC 3339 time")
    frac = (m.group(2) or ".0")[:7]
    zone = "+00:00" if m.group(3) == "Z" else m.group(3)
    try:
        t = datetime.datetime.fromisoformat(m.group(1) + frac + zone)
    except ValueError as e:
        raise refuse("malformed_request", f"{field} {text!r}: {e}")
    if t.year == 1 and t.replace(tzinfo=None) == datetime.datetime(1, 1, 1):
        raise refuse("malformed_request", f"{field} is the zero time")
    return t.timestamp()


def clean_location(loc):
    if not loc:
        raise refuse("malformed_request", "missing field location")
    if not os.path.isabs(loc):
        raise refuse("malformed_request", f"location {loc!r} is not an absolute path")
    return os.path.normpath(loc)


def check_attempts(attempts):
    if not attempts:
        raise refuse("malformed_request", "attempts names no rollout: a restore touches only the rollouts it names")
    out = {}
    for rid, a in attempts.items():
        if not rid or not isinstance(a, wire.Number) or not re.fullmatch(r"[0-9]+", a):
            raise refuse("malformed_request", f"attempts: bad entry {rid!r}: {json.dumps(str(a))}")
        out[rid] = int(a)
    return out


def _with_ids(out, f):
    if f.checkpoint:
        out["checkpoint_id"] = f.checkpoint
    if f.kind == "restore" and f.active:
        out["restore_id"] = f.active
    return out


def _describe(in_flight):
    return ", ".join(f"{x['rollout_id']} (attempt {x['attempt']})" for x in in_flight) or "requests whose identity is not read yet"
