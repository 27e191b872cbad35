"""Unit tests of the participant library (turnstile.participant), standard
library only: the protocol of both planes through HTTP against a participant
in this process, hosting two small environments written on the library's
base classes. clients/python's Go test runs them on the installed package;
the Go tests of examples/participant drive the library with the Go clients
and the conformance kit."""

import json
import os
import shutil
import ssl
import tempfile
import unittest
import urllib.error
import urllib.request

from turnstile.participant import (
    EXPORT_RESTORE,
    GYM,
    RESTART_ONLY,
    Environment,
    EnvError,
    Session,
    TLS,
    artifact,
    check_environment,
    script_line,
    start,
    task_format,
    tool,
)
from turnstile.participant import wire

DATA, CONTROL = "data-token", "control-token"


class Counter(Environment):
    """export_restore: a counter raised by increment until the target."""

    name, mode = "counter", EXPORT_RESTORE
    tools = [tool("increment", "Add amount to the counter.", {"amount": {"type": "integer", "minimum": 1}}, ["amount"]),
             tool("read", "Show the counter.")]
    task_format = task_format("Raise the counter from 0 to target.",
                              {"type": "object", "properties": {"target": {"type": "integer"}}, "required": ["target"]},
                              {"target": 3})

    def start(self, seed, task):
        if not isinstance(task, dict) or set(task) != {"target"} or type(task["target"]) is not int:
            raise EnvError("bad_task", 'task must be {"target": N}')
        return CounterSession({"value": 0, "target": task["target"], "seed": seed}), {
            "instructions": "Raise the counter to the target.", "observation": f"Reach {task['target']}."}

    def restore(self, state):
        if not isinstance(state, dict) or set(state) != {"value", "target", "seed"}:
            raise EnvError("bad_state", "state must hold value, target and seed")
        return CounterSession(dict(state))


class CounterSession(Session):
    def __init__(self, state):
        self.state = state

    def tool_increment(self, args):
        if not isinstance(args, dict) or set(args) != {"amount"} or type(args["amount"]) is not int or args["amount"] < 1:
            raise EnvError("bad_arguments", "increment takes {\"amount\": N} with N >= 1")
        self.state["value"] += args["amount"]
        return f"The counter is at {self.state['value']}."

    def tool_read(self, args):
        return {"observation": f"The counter is at {self.state['value']}.", "reward": 0}

    def verify(self):
        return {"reward": 1.0 if self.state["value"] == self.state["target"] else 0.0, "details": {"value": self.state["value"]}}

    def export(self):
        return {"value": self.state["value"], "target": self.state["target"], "seed": self.state["seed"]}


class Dice(Environment):
    """restart_only, gym style: its state is not exported."""

    name, mode, style = "dice", RESTART_ONLY, GYM
    tools = [tool("step", "Roll.", {"action": {"type": "string"}}, ["action"])]

    def start(self, seed, task):
        return DiceSession(), {"instructions": "Roll.", "observation": "Roll the dice."}


class DiceSession(Session):
    rolls = 0

    def step(self, args):
        self.rolls += 1
        return {"observation": f"roll {self.rolls}", "reward": 1, "terminated": self.rolls >= 3}

    def verify(self):
        return {"reward": float(self.rolls)}


class Server:
    """A participant on a free loopback port, in this process."""

    def __init__(self, name="py-test", **kwargs):
        self.running = start([Counter(), Dice()], name=name, **dict({"data_token": DATA, "control_token": CONTROL, "quiet": True}, **kwargs))
        self.url = self.running.url

    def close(self):
        self.running.shutdown()

    def call(self, method, path, body=None, token=DATA, raw=None, context=None):
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if token:
            req.add_header("Authorization", "Bearer " + token)
        try:
            with urllib.request.urlopen(req, context=context) as r:
                return r.status, json.loads(r.read()), r.headers
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read()), e.headers

    def ok(self, method, path, body=None, token=DATA):
        status, out, _ = self.call(method, path, body, token)
        if status != 200:
            raise AssertionError(f"{method} {path}: {status} {out}")
        return out

    def start(self, rid, attempt=0, target=3, seed=7, request_id=None):
        return self.call("POST", "/v1/sessions", {"rollout_id": rid, "attempt": attempt, "request_id": request_id or rid + "/seed",
                                                   "env": "counter", "seed": seed, "task": {"target": target}})

    def operate(self, rid, rev, tool="read", args=None, attempt=0, request_id=None):
        return self.call("POST", f"/v1/sessions/{rid}/operate", {
            "rollout_id": rid, "attempt": attempt, "request_id": request_id or f"{rid}/t{rev}/c0",
            "expected_revision": rev, "tool": tool, "arguments": {} if args is None else args})

    def stats(self):
        return self.ok("GET", "/v1/stats")


class ParticipantTest(unittest.TestCase):
    def setUp(self):
        self.s = Server()
        self.dir = tempfile.mkdtemp()

    def tearDown(self):
        self.s.close()
        shutil.rmtree(self.dir)

    def code(self, answer):
        return answer[0], answer[1]["error"]["code"]

    def test_tokens_guard_both_planes_and_change_nothing(self):
        s = self.s
        self.assertEqual(s.call("GET", "/healthz", token=None)[:2], (200, {"ok": True}))
        for path, token, realm in [("/v1/stats", None, "data"), ("/v1/stats", CONTROL, "data"),
                                   ("/v1/control/status", DATA, "control"), ("/v1/control/status", "x", "control")]:
            status, body, headers = s.call("GET", path, token=token)
            self.assertEqual((status, body["error"]["code"]), (401, "unauthorized"), path)
            self.assertEqual(headers["WWW-Authenticate"], f'Bearer realm="turnstile-{realm}"')
        self.assertEqual(self.code(s.call("POST", "/v1/sessions", {"rollout_id": "r"}, token="wrong")), (401, "unauthorized"))
        self.assertEqual(s.stats(), {"applied": 0, "replayed": 0, "refused": 0, "parked": 0, "sessions": 0})

    def test_replay_conflict_revision_and_fence(self):
        s = self.s
        first = s.start("r")[1]
        self.assertEqual(first["revision"], 0)
        op = s.operate("r", 0, "increment", {"amount": 1})[1]
        # Key order and spacing do not matter; the stored answer comes back.
        raw = b'{ "tool":"increment","arguments":{ "amount":1},"expected_revision":0,' \
              b'"request_id":"r/t0/c0","attempt":0,"rollout_id":"r"}'
        again = s.call("POST", "/v1/sessions/r/operate", raw=raw)[1]
        self.assertEqual(again, dict(op, replayed=True))
        self.assertEqual(s.stats()["applied"], 2)
        self.assertEqual(s.stats()["replayed"], 1)
        self.assertEqual(self.code(s.operate("r", 0, "increment", {"amount": 2})), (409, "request_id_conflict"))
        self.assertEqual(self.code(s.operate("r", 0, request_id="r/other")), (409, "revision_mismatch"))
        self.assertEqual(self.code(s.operate("r", 1, attempt=1)), (409, "attempt_not_installed"))
        self.assertEqual(self.code(s.start("fresh", attempt=2)), (409, "attempt_not_installed"))
        self.assertEqual(self.code(s.call("GET", "/v1/sessions/fresh")), (404, "unknown_session"))
        self.assertEqual(s.ok("GET", "/v1/sessions/r")["revision"], 1)

    def test_malformed_requests_are_refused_400(self):
        base = {"rollout_id": "m", "attempt": 0, "request_id": "m/seed", "env": "counter", "seed": 1, "task": {"target": 1}}
        cases = {
            "unknown field": dict(base, extra=1),
            "missing attempt": {k: v for k, v in base.items() if k != "attempt"},
            "null attempt": dict(base, attempt=None),
            "negative attempt": dict(base, attempt=-1),
            "float attempt": dict(base, attempt=1.5),
            "string attempt": dict(base, attempt="0"),
            "empty rollout": dict(base, rollout_id=""),
            "empty request id": dict(base, request_id=""),
        }
        for name, body in cases.items():
            with self.subTest(name):
                self.assertEqual(self.code(self.s.call("POST", "/v1/sessions", body)), (400, "malformed_request"))
        deep = b'{"rollout_id":"m","attempt":0,"request_id":"d","env":"counter","task":' + b"[" * 100000 + b"]" * 100000 + b"}"
        for name, raw in {"trailing data": json.dumps(base).encode() + b" {}", "not an object": b"[1]", "not JSON": b"{",
                          "NaN": b'{"rollout_id":"m","attempt":NaN}', "too deep": deep}.items():
            with self.subTest(name):
                self.assertEqual(self.code(self.s.call("POST", "/v1/sessions", raw=raw)), (400, "malformed_request"))
        self.s.start("m")
        body = {"rollout_id": "other", "attempt": 0, "request_id": "x", "expected_revision": 0, "tool": "read"}
        self.assertEqual(self.code(self.s.call("POST", "/v1/sessions/m/operate", body)), (400, "malformed_request"))
        self.assertEqual(self.s.stats()["applied"], 1)

    def test_environment_refusal_is_422_and_changes_nothing(self):
        s = self.s
        s.start("e")
        self.assertEqual(self.code(s.operate("e", 0, "increment", {"amount": 0})), (422, "bad_arguments"))
        self.assertEqual(self.code(s.operate("e", 0, "fly", request_id="e/x")), (422, "unknown_tool"))
        self.assertEqual(s.ok("GET", "/v1/sessions/e")["revision"], 0)

    def test_verify_is_terminal(self):
        s = self.s
        s.start("v")
        body = {"rollout_id": "v", "attempt": 0, "request_id": "v/verify", "expected_revision": 0}
        verdict = s.ok("POST", "/v1/sessions/v/verify", body)
        self.assertEqual(s.ok("POST", "/v1/sessions/v/verify", body), dict(verdict, replayed=True))
        self.assertEqual(self.code(s.operate("v", 0, request_id="v/late")), (409, "session_retired"))
        self.assertTrue(s.ok("GET", "/v1/sessions/v")["retired"])
        self.assertEqual(s.stats()["sessions"], 0)

    def checkpoint(self, s, cid, loc):
        s.ok("POST", "/v1/control/prepare", {"checkpoint_id": cid, "deadline": "2099-01-01T00:00:00Z"}, CONTROL)
        out = s.ok("POST", "/v1/control/commit", {"checkpoint_id": cid, "location": loc}, CONTROL)
        s.ok("POST", "/v1/control/resume", {"checkpoint_id": cid}, CONTROL)
        return out

    def test_checkpoint_restore_continues_identically(self):
        s = self.s
        s.start("c")
        s.operate("c", 0, "increment", {"amount": 1})
        loc = os.path.join(self.dir, "k1")
        commit = self.checkpoint(s, "k1", loc)
        # Later operations of the original, and of a restore elsewhere.
        want = [s.operate("c", 1, "increment", {"amount": 3})[1],
                s.operate("c", 2, "read")[1]]
        fresh = Server()
        try:
            restored = fresh.ok("POST", "/v1/control/restore", {"checkpoint_id": "k1", "location": loc, "attempts": {"c": 1}}, CONTROL)
            self.assertEqual(restored["restored"][0]["revision"], 1)
            self.assertEqual(self.code(fresh.operate("c", 1, attempt=1)), (503, "parked"))
            fresh.ok("POST", "/v1/control/resume", {"checkpoint_id": "k1"}, CONTROL)
            # The request applied before the cut replays under the new attempt.
            self.assertTrue(fresh.operate("c", 0, "increment", {"amount": 1}, attempt=1, request_id="c/t0/c0")[1]["replayed"])
            got = [fresh.operate("c", 1, "increment", {"amount": 3}, attempt=1)[1],
                   fresh.operate("c", 2, "read", attempt=1)[1]]
            self.assertEqual(got, want)
            self.assertEqual(self.code(fresh.operate("c", 3, attempt=0)), (409, "stale_attempt"))
            # The same state exports to the same bytes.
            again = self.checkpoint(fresh, "k2", os.path.join(self.dir, "k2"))
            self.checkpoint(s, "k3", os.path.join(self.dir, "k3"))
            self.assertNotEqual(again["manifest_digest"], commit["manifest_digest"])  # other checkpoint id
        finally:
            fresh.close()
        a = artifact.open_checkpoint(os.path.join(self.dir, "k2"), "k2")[1]["sessions"]
        b = artifact.open_checkpoint(os.path.join(self.dir, "k3"), "k3")[1]["sessions"]
        self.assertEqual(a[0][1].replace(b'"attempt":1', b'"attempt":0'), b[0][1])

    def test_phase_fence(self):
        s = self.s
        prep = {"checkpoint_id": "p1", "deadline": "2099-01-01T00:00:00Z"}
        first = s.ok("POST", "/v1/control/prepare", prep, CONTROL)
        self.assertEqual(s.ok("POST", "/v1/control/prepare", prep, CONTROL), first)
        self.assertEqual(self.code(s.call("POST", "/v1/control/prepare", dict(prep, checkpoint_id="p2"), CONTROL)), (409, "checkpoint_conflict"))
        self.assertEqual(self.code(s.start("during")), (503, "parked"))
        self.assertEqual(self.code(s.call("POST", "/v1/control/restore", {"checkpoint_id": "p1", "location": "/x", "attempts": {"a": 1}}, CONTROL)),
                         (409, "invalid_phase"))
        s.ok("POST", "/v1/control/resume", {"checkpoint_id": "p1"}, CONTROL)
        self.assertEqual(self.code(s.call("POST", "/v1/control/prepare", prep, CONTROL)), (409, "stale_checkpoint"))
        self.assertEqual(s.stats()["parked"], 1)
        self.assertEqual(self.code(s.call("POST", "/v1/control/prepare", {"checkpoint_id": "p3", "deadline": "0001-01-01T00:00:00Z"}, CONTROL)),
                         (400, "malformed_request"))

    def test_authorise_retire_and_restart_only(self):
        s = self.s
        task = {"rollout_id": "w", "attempt": 0, "request_id": "w/seed", "env": "dice", "seed": 0, "task": None}
        s.ok("POST", "/v1/sessions", task)
        ans = s.ok("POST", "/v1/control/sessions/w/authorise", {"attempt": 1}, CONTROL)
        self.assertEqual(ans, {"rollout_id": "w", "attempt": 1, "fence": 1, "changed": True, "dropped": True, "pending": False})
        self.assertEqual(s.ok("POST", "/v1/control/sessions/w/authorise", {"attempt": 1}, CONTROL)["changed"], False)
        self.assertEqual(self.code(s.call("POST", "/v1/control/sessions/w/authorise", {"attempt": 0}, CONTROL)), (409, "stale_attempt"))
        self.assertEqual(s.ok("POST", "/v1/sessions", dict(task, attempt=1))["revision"], 0)
        ret = s.ok("POST", "/v1/control/retire", {"rollout_id": "w", "attempt": 1}, CONTROL)
        self.assertEqual((ret["fence"], ret["discarded"]), (2, True))
        # A restart-only session is committed without state and restarts.
        s.ok("POST", "/v1/control/sessions/w/authorise", {"attempt": 2}, CONTROL)
        s.ok("POST", "/v1/sessions", dict(task, attempt=2))
        loc = os.path.join(self.dir, "k")
        self.checkpoint(s, "k", loc)
        out = s.ok("POST", "/v1/control/restore", {"checkpoint_id": "k", "location": loc, "attempts": {"w": 3}}, CONTROL)
        self.assertEqual([r["rollout_id"] for r in out["restarted"]], ["w"])
        s.ok("POST", "/v1/control/resume", {"checkpoint_id": "k"}, CONTROL)
        self.assertEqual(self.code(s.call("GET", "/v1/sessions/w")), (404, "unknown_session"))
        self.assertEqual(s.ok("POST", "/v1/sessions", dict(task, attempt=3))["revision"], 0)

    def test_corrupt_checkpoint_installs_nothing(self):
        s = self.s
        s.start("x")
        loc = os.path.join(self.dir, "k")
        self.checkpoint(s, "k", loc)
        shard = os.path.join(loc, "sessions-00000.tar")
        with open(shard, "r+b") as f:
            f.seek(600)
            b = f.read(1)
            f.seek(600)
            f.write(bytes([b[0] ^ 1]))
        fresh = Server()
        try:
            out = fresh.call("POST", "/v1/control/restore", {"checkpoint_id": "k", "location": loc, "attempts": {"x": 1}}, CONTROL)
            self.assertEqual(self.code(out), (422, "invalid_checkpoint"))
            self.assertEqual(fresh.ok("GET", "/v1/control/status", token=CONTROL)["phase"], "idle")
            self.assertEqual(self.code(fresh.start("x", attempt=1)), (409, "attempt_not_installed"))
        finally:
            fresh.close()


class ArtifactTest(unittest.TestCase):
    def test_round_trip_and_corruption(self):
        d = tempfile.mkdtemp()
        try:
            loc = os.path.join(d, "c")
            m = artifact.write(loc, "c1", {"name": "n"}, {"s": [("b", b"2"), ("a", b"1")], "empty": []})
            self.assertEqual(artifact.write(loc, "c1", {"name": "n"}, {"empty": [], "s": [("a", b"1"), ("b", b"2")]}), m)
            with self.assertRaises(artifact.Conflict):
                artifact.write(loc, "c1", {"name": "n"}, {"s": [("a", b"other")]})
            self.assertEqual(artifact.open_checkpoint(loc, "c1")[1]["s"], [("a", b"1"), ("b", b"2")])
            with self.assertRaises(artifact.InvalidCheckpoint):
                artifact.open_checkpoint(loc, "other-id")
            open(os.path.join(loc, "stray"), "w").close()
            with self.assertRaises(artifact.InvalidCheckpoint):
                artifact.open_checkpoint(loc, "c1")
        finally:
            shutil.rmtree(d)


class LibraryTest(unittest.TestCase):
    """What the library adds around the protocol: configuration checked
    before anything listens, capabilities, the base classes."""

    def test_bad_configuration_is_refused_before_listening(self):
        class NoName(Counter):
            name = ""

        class BadMode(Counter):
            mode = "sometimes"

        class BadTool(Counter):
            tools = [{"name": "x", "description": "", "parameters": {"type": "string"}}]

        cases = {
            "no data token": ([Counter()], {"data_token": None}, "no data token"),
            "equal tokens": ([Counter()], {"data_token": "t", "control_token": "t"}, "must differ"),
            "whitespace": ([Counter()], {"data_token": " t"}, "whitespace"),
            "no environment": ([], {}, "at least one environment"),
            "duplicate names": ([Counter(), Counter()], {}, "unique"),
            "no name": ([NoName()], {}, "non-empty name"),
            "unknown mode": ([BadMode()], {}, "mode 'sometimes'"),
            "tool schema": ([BadTool()], {}, "type object"),
            "retired sessions": ([Counter()], {"retired_sessions": 0}, "retired_sessions"),
        }
        for what, (envs, kwargs, want) in cases.items():
            with self.subTest(what):
                args = dict({"data_token": DATA, "control_token": CONTROL, "quiet": True}, **kwargs)
                with self.assertRaises(ValueError) as cm:
                    start(envs, **args).shutdown()
                self.assertIn(want, str(cm.exception))
        with self.assertRaises(ValueError):
            TLS("cert.pem", "")

    def test_script_line_shows_the_task_script(self):
        self.assertEqual(script_line({"target": 3}), "")
        self.assertEqual(script_line({"script": {"turns": [[{"name": "pop", "arguments": {}}]], "answer": "x"}}),
                         'SCRIPT {"answer":"x","turns":[[{"arguments":{},"name":"pop"}]]}')

    def test_capabilities_name_what_the_coordinator_requires(self):
        s = Server(name="caps")
        try:
            caps = s.ok("GET", "/v1/control/capabilities", token=CONTROL)
            self.assertEqual((caps["component"], caps["schema_version"], caps["name"]), ("environment_server", 1, "caps"))
            self.assertIn("absolute_deadline_v1", caps["features"])
            self.assertEqual(caps["envs"], [{"name": "counter", "mode": "export_restore", "style": "tools"},
                                            {"name": "dice", "mode": "restart_only", "style": "gym"}])
            self.assertEqual([e["name"] for e in s.ok("GET", "/v1/envs")], ["counter", "dice"])
            self.assertEqual(s.ok("GET", "/v1/envs")[0]["tools"], [t for t in Counter.tools])
            self.assertEqual(s.ok("GET", "/v1/envs")[0]["task_format"],
                             {"description": "Raise the counter from 0 to target.", "example": {"target": 3},
                              "schema": {"type": "object", "properties": {"target": {"type": "integer"}}, "required": ["target"]}})
            self.assertNotIn("task_format", s.ok("GET", "/v1/envs")[1])
        finally:
            s.close()

    def test_control_plane_off_without_a_control_token(self):
        s = Server(control_token=None)
        try:
            status, body, _ = s.call("GET", "/v1/control/status", token=CONTROL)
            self.assertEqual((status, body["error"]["code"]), (404, "control_disabled"))
            self.assertEqual(s.start("r")[0], 200)
        finally:
            s.close()

    def test_base_session_dispatches_tools_and_gym_steps(self):
        s = Server()
        try:
            body = {"rollout_id": "g", "attempt": 0, "request_id": "g/seed", "env": "dice", "seed": 0}
            self.assertEqual(s.ok("POST", "/v1/sessions", body)["spec"]["style"], "gym")
            out = s.operate("g", 0, "step", {"action": "roll"})[1]
            self.assertEqual(out["outcome"], {"observation": "roll 1", "reward": 1, "terminated": False})
            s.start("c")
            self.assertEqual(s.operate("c", 0, "increment", {"amount": 2})[1]["outcome"],
                             {"observation": "The counter is at 2.", "reward": 0})
            status, body, _ = s.operate("c", 1, "__init__", request_id="c/x")
            self.assertEqual((status, body["error"]["code"]), (422, "unknown_tool"))
        finally:
            s.close()
        with self.assertRaises(EnvError):
            Counter().restore({"value": 1})
        self.assertEqual(check_environment(Counter())["mode"], "export_restore")

    def test_go_json_encoding(self):
        self.assertEqual(wire.dumps({"a": "<&>\u2028", "f": 1.0, "g": 0.5}), b'{"a":"\\u003c\\u0026\\u003e\\u2028","f":1,"g":0.5}')
        self.assertEqual(wire.digest("operate", wire.parse_exact('{"b":1,"a":[1.0]}')),
                         wire.digest("operate", wire.parse_exact('{ "a":[1.0], "b":1}')))
        self.assertNotEqual(wire.digest("operate", wire.parse_exact('{"a":1}')), wire.digest("operate", wire.parse_exact('{"a":1.0}')))


# The protocol's artifact test vectors (docs/protocol/testdata: a vector.json
# of sections and the checkpoint the Go artifact package wrote from them),
# found from this file in a checkout; TURNSTILE_PROTOCOL_TESTDATA overrides.
TESTDATA = os.environ.get("TURNSTILE_PROTOCOL_TESTDATA") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "docs", "protocol", "testdata")


def vectors():
    if not os.path.isdir(TESTDATA):
        return []
    return sorted(d for d in os.listdir(TESTDATA) if os.path.isfile(os.path.join(TESTDATA, d, "vector.json")))


class ArtifactVectorsTest(unittest.TestCase):
    """The library writes each vector's checkpoint byte for byte from its
    sections, with its manifest digest, and opens the checked-in one."""

    @unittest.skipUnless(vectors(), f"no artifact test vectors under {TESTDATA}")
    def test_vectors_are_reproduced_and_open(self):
        for name in vectors():
            with self.subTest(name):
                base = os.path.join(TESTDATA, name)
                with open(os.path.join(base, "vector.json"), "rb") as f:
                    v = json.load(f)
                sections = {s["name"]: [(r["key"], r["data"].encode("utf-8")) for r in s["records"]] for s in v["sections"]}
                want_dir = os.path.join(base, "checkpoint")
                d = tempfile.mkdtemp()
                try:
                    out = os.path.join(d, "c")
                    m = artifact.write(out, v["checkpoint_id"], v.get("labels") or {}, sections,
                                       v.get("max_shard_records") or artifact.MAX_SHARD_RECORDS)
                    self.assertEqual(m["digest"], v["manifest_digest"])
                    self.assertEqual(sorted(os.listdir(out)), sorted(os.listdir(want_dir)))
                    for f in sorted(os.listdir(want_dir)):
                        with open(os.path.join(out, f), "rb") as a, open(os.path.join(want_dir, f), "rb") as b:
                            self.assertEqual(a.read(), b.read(), f"{name}: {f} differs")
                finally:
                    shutil.rmtree(d)
                m, got = artifact.open_checkpoint(want_dir, v["checkpoint_id"])
                self.assertEqual(m["digest"], v["manifest_digest"])
                self.assertEqual({k: sorted(recs) for k, recs in got.items()}, {k: sorted(recs) for k, recs in sections.items()})


if __name__ == "__main__":
    unittest.main()
