"""The data plane: sessions keyed by rollout id, each mutation applied at most
once per request id, the attempt fence, the revision check and admission.

Rules (docs/protocol/RULES.md), in the order a mutation is checked:
admission (503 parked) -> body and identity (400) -> unknown env (404, start)
-> attempt fence (409 stale_attempt / attempt_not_installed) -> stored
receipt (replay, or 409 request_id_conflict) -> session exists / retired
(404 / 409) -> revision (409) -> apply (200, or 422 from the environment).

One lock serialises every mutation and every control operation that reads
or installs sessions: the environments here answer in microseconds, so a
cut taken under the lock is consistent without a per-rollout lock.
"""

import collections
import threading

from . import wire
from .environment import EnvError
from .wire import refuse

START, OPERATE, VERIFY = "start", "operate", "verify"
DEFAULT_RETIRED_SESSIONS = 4096

_IDENTITY = {"rollout_id": str, "attempt": int, "request_id": str}
START_FIELDS = dict(_IDENTITY, env=str, seed=int, task=wire.RAW)
OPERATE_FIELDS = dict(_IDENTITY, expected_revision=int, tool=str, arguments=wire.RAW)
VERIFY_FIELDS = dict(_IDENTITY, expected_revision=int)


class Session:
    """One rollout's episode. receipts: request id -> {kind, digest,
    response} with response the exact bytes first answered."""

    def __init__(self, env, attempt, revision=0, retired=False, receipts=None, live=None):
        self.env, self.attempt, self.revision, self.retired = env, attempt, revision, retired
        self.receipts = receipts if receipts is not None else {}
        self.live = live  # the environment's session; None once retired or when only receipts remain

    def info(self, rollout_id):
        return {"rollout_id": rollout_id, "env": self.env, "attempt": self.attempt,
                "revision": self.revision, "retired": self.retired}


class Slot:
    """Everything known of one rollout id. Slots are never deleted: the
    fence must outlive the session."""

    def __init__(self, rollout_id):
        self.id = rollout_id
        self.fence = 0
        self.session = None  # live or retired (with its receipts)
        self.evicted = None  # info of a retired session whose receipts were dropped


class Gate:
    """Admission: closed during a checkpoint, so mutations are parked; counts
    the admitted mutations by (rollout, attempt) for the control status."""

    def __init__(self):
        self.mu = threading.Lock()
        self.closed = False
        self.holds = collections.Counter()

    def enter(self):
        with self.mu:
            return not self.closed

    def hold(self, key):
        with self.mu:
            self.holds[key] += 1

    def release(self, key):
        with self.mu:
            self.holds[key] -= 1
            if self.holds[key] <= 0:
                del self.holds[key]

    def in_flight(self):
        with self.mu:
            return [{"rollout_id": r, "attempt": a, "count": n} for (r, a), n in sorted(self.holds.items())]


class DataPlane:
    def __init__(self, envs, retired_cap=DEFAULT_RETIRED_SESSIONS):
        self.envs = {e.name: e for e in envs}
        self.specs = [self.envs[n].spec() for n in sorted(self.envs)]
        self.lock = threading.Lock()
        self.gate = Gate()
        self.slots = {}
        self.retired = collections.OrderedDict()  # rollout ids of retired sessions, oldest first
        self.retired_cap = retired_cap
        self.live_count = 0
        self.counts = {"applied": 0, "replayed": 0, "refused": 0, "parked": 0}

    # --- reads -----------------------------------------------------------

    def stats(self):
        with self.lock:
            return dict(self.counts, sessions=self.live_count)

    def session_info(self, rollout_id):
        with self.lock:
            sl = self.slots.get(rollout_id)
            if sl is not None and sl.session is not None:
                return sl.session.info(rollout_id)
            if sl is not None and sl.evicted is not None:
                return sl.evicted
        raise refuse("unknown_session", f"no session for rollout {rollout_id!r}")

    def mode_of(self, env):
        e = self.envs.get(env)
        mode = e.spec().get("mode") if e else None
        return mode if mode in ("export_restore", "restart_only", "stateless") else "restart_only"

    def count(self, err):
        """Counts a data-plane refusal in the stats (401s are not counted)."""
        with self.lock:
            if err.code == "parked":
                self.counts["parked"] += 1
            elif 400 <= err.status < 500 and err.code != "unauthorized":
                self.counts["refused"] += 1

    # --- mutations ---------------------------------------------------------

    def mutate(self, kind, path_id, read_body):
        """Runs one mutation and returns the answer's bytes, or raises a
        ProtocolError (already counted in the stats). read_body is called
        once admission let the request in."""
        try:
            if not self.gate.enter():
                raise refuse("parked", "admission is closed for a checkpoint; retry the same request later")
            req, dg = self._decode(kind, path_id, read_body())
            key = (req["rollout_id"], req["attempt"])
            self.gate.hold(key)
            try:
                with self.lock:
                    if self.gate.closed:
                        raise refuse("parked", "admission closed for a checkpoint while the request waited; retry the same request later")
                    return self._start(req, dg) if kind == START else self._mutate_session(kind, req, dg)
            finally:
                self.gate.release(key)
        except wire.ProtocolError as e:
            self.count(e)
            raise

    def _decode(self, kind, path_id, body):
        if kind == START:
            req = wire.decode_request(body, START_FIELDS, ["rollout_id", "attempt", "request_id", "env"])
        elif kind == OPERATE:
            req = wire.decode_request(body, OPERATE_FIELDS, ["rollout_id", "attempt", "request_id", "expected_revision", "tool"])
        else:
            req = wire.decode_request(body, VERIFY_FIELDS, ["rollout_id", "attempt", "request_id", "expected_revision"])
        if not req["rollout_id"]:
            raise refuse("malformed_request", "missing field rollout_id")
        if not req["request_id"]:
            raise refuse("malformed_request", "missing field request_id")
        if req["attempt"] < 0:
            raise refuse("malformed_request", f"attempt {req['attempt']} is negative")
        if path_id is not None and path_id != req["rollout_id"]:
            raise refuse("malformed_request", f"rollout_id {req['rollout_id']!r} in the body differs from {path_id!r} in the path")
        if kind == OPERATE and not req["tool"]:
            raise refuse("malformed_request", "missing field tool")
        if kind == START and req["env"] not in self.envs:
            raise refuse("unknown_env", f"no environment {req['env']!r} on this participant")
        fields = {k: v for k, v in req.items() if k != "attempt"}
        return req, wire.digest(kind, fields)

    def _check_fence(self, sl, rollout_id, attempt):
        """R6/R7: below the fence is stale; above it was never installed by
        the control plane (attempt 0 of an unseen rollout is a new one)."""
        fence = sl.fence if sl is not None else 0
        if attempt < fence:
            raise refuse("stale_attempt", f"rollout {rollout_id!r}: attempt {attempt} is below attempt {fence} already accepted")
        if attempt > fence:
            raise refuse("attempt_not_installed",
                         f"rollout {rollout_id!r}: attempt {attempt} is above the installed attempt {fence}; "
                         "only the control plane installs a new attempt (restore, authorise)")

    def _replay(self, sess, req, dg):
        """The stored answer of req's request id, or None when it has none."""
        r = sess.receipts.get(req["request_id"])
        if r is None:
            return None
        if r["digest"] != dg:
            raise refuse("request_id_conflict", f"request id {req['request_id']!r} was already used for a different {r['kind']} request")
        v = wire.loads(r["response"])
        v["replayed"] = True
        self.counts["replayed"] += 1
        return wire.dumps(v)

    def _start(self, req, dg):
        rid, attempt = req["rollout_id"], req["attempt"]
        sl = self.slots.get(rid)
        self._check_fence(sl, rid, attempt)
        sess = sl.session if sl else None
        if sess is not None and attempt <= sess.attempt:
            out = self._replay(sess, req, dg)
            if out is not None:
                return out
            if sess.retired:
                raise refuse("session_retired", f"rollout {rid!r}: the session of attempt {sess.attempt} was verified and retired")
            raise refuse("request_id_conflict", f"rollout {rid!r}: attempt {sess.attempt} already started its session with another request id")
        if sess is None and sl is not None and sl.evicted is not None and attempt <= sl.evicted["attempt"]:
            raise refuse("session_retired", f"rollout {rid!r}: the session of attempt {sl.evicted['attempt']} was retired and its receipts dropped")
        env = self.envs[req["env"]]
        task = wire.plain(req["task"]) if req["task"] is not None else None
        try:
            live, start = env.start(req["seed"] or 0, task)
        except EnvError as e:
            raise wire.ProtocolError(e.code, f"start {req['env']}: {e.message}", 422)
        out = wire.dumps({"revision": 0, "spec": env.spec(), "start": start})
        sl = sl or self.slots.setdefault(rid, Slot(rid))
        self.install_session(sl, Session(req["env"], attempt, receipts={req["request_id"]: _receipt(START, dg, out)}, live=live))
        self.counts["applied"] += 1
        return out

    def _mutate_session(self, kind, req, dg):
        rid = req["rollout_id"]
        sl = self.slots.get(rid)
        self._check_fence(sl, rid, req["attempt"])
        sess = sl.session if sl else None
        if sess is None:
            if sl is not None and sl.evicted is not None:
                raise refuse("session_retired", f"rollout {rid!r}: the session was retired and its receipts dropped")
            raise refuse("unknown_session", f"no session for rollout {rid!r}")
        out = self._replay(sess, req, dg)
        if out is not None:
            return out
        if sess.retired:
            raise refuse("session_retired", f"rollout {rid!r}: the session was verified and retired")
        if req["expected_revision"] != sess.revision:
            raise refuse("revision_mismatch",
                         f"rollout {rid!r}: expected revision {req['expected_revision']}, the session is at revision {sess.revision}")
        out = self._apply(sess, req, dg) if kind == OPERATE else self._verify(sl, sess, req, dg)
        self.counts["applied"] += 1
        return out

    def _apply(self, sess, req, dg):
        args = wire.plain(req["arguments"]) if req["arguments"] is not None else None
        try:
            outcome = sess.live.apply(req["tool"], args)
        except EnvError as e:
            raise wire.ProtocolError(e.code, f"apply {req['tool']}: {e.message}", 422)
        out = wire.dumps({"revision": sess.revision + 1, "outcome": outcome})
        sess.revision += 1
        sess.receipts[req["request_id"]] = _receipt(OPERATE, dg, out)
        return out

    def _verify(self, sl, sess, req, dg):
        try:
            verdict = sess.live.verify()
        except EnvError as e:
            raise wire.ProtocolError(e.code, f"verify: {e.message}", 422)
        out = wire.dumps({"revision": sess.revision, "verdict": verdict})
        sess.receipts[req["request_id"]] = _receipt(VERIFY, dg, out)
        sess.live.close()
        sess.live, sess.retired = None, True
        self.live_count -= 1
        self._push_retired(sl)
        return out

    # --- installing and dropping sessions (also the control plane's) -------

    def install_session(self, sl, sess):
        """Makes sess the rollout's session, closing any previous one.
        Callers hold the lock."""
        self._drop(sl)
        sl.fence = max(sl.fence, sess.attempt)
        sl.session = sess
        if sess.retired:
            self._push_retired(sl)
        else:
            self.live_count += 1

    def _drop(self, sl):
        old = sl.session
        if old is not None and not old.retired:
            old.live.close()
            self.live_count -= 1
        self.retired.pop(sl.id, None)
        sl.session, sl.evicted = None, None

    def _push_retired(self, sl):
        self.retired.pop(sl.id, None)
        self.retired[sl.id] = None
        while len(self.retired) > self.retired_cap:
            oldest, _ = self.retired.popitem(last=False)
            old = self.slots[oldest]
            old.evicted = old.session.info(oldest)
            old.session = None

    def drop_below(self, rollout_id, floor):
        """Raises the fence of rollout_id to floor and drops a session of an
        older attempt (live, verified or evicted). Returns whether one was
        dropped. Callers hold the lock."""
        sl = self.slots.setdefault(rollout_id, Slot(rollout_id))
        sl.fence = max(sl.fence, floor)
        held = sl.session.attempt if sl.session else sl.evicted["attempt"] if sl.evicted else None
        if held is not None and held < floor:
            self._drop(sl)
            return True
        return False

    def fence_of(self, rollout_id):
        """The fence of rollout_id, or None when it was never seen."""
        sl = self.slots.get(rollout_id)
        return sl.fence if sl else None


def _receipt(kind, dg, out):
    return {"kind": kind, "digest": dg, "response": out}
