"""Unit tests of the gateway client against the in-process fake gateway."""

from __future__ import annotations

import re
import socket
import unittest
from typing import List

from fakegateway import DROP, FakeGateway, FakeSet
from turnstile import (
    APIError,
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    NotFound,
    RetryPolicy,
    SetStalled,
    TransportError,
    Unauthorized,
    Unavailable,
    receipt_of,
)

REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class ClientTest(unittest.TestCase):
    def setUp(self) -> None:
        self.gw = FakeGateway(token="secret")
        self.addCleanup(self.gw.close)
        self.sleeps: List[float] = []
        self.client = Client(self.gw.url, "secret", timeout=5, retry=RetryPolicy(attempts=4),
                             sleep=self.sleeps.append)

    def test_submit_sends_token_request_id_and_only_given_fields(self) -> None:
        res = self.client.submit("s1", envs=["counter"], count=3, max_turns=8)
        self.assertEqual(res["started"], 3)
        (call,) = self.gw.calls("POST", "/v1/sets")
        self.assertEqual(call.headers.get("Authorization"), "Bearer secret")
        self.assertEqual(call.headers.get("Content-Type"), "application/json")
        self.assertRegex(call.body["request_id"], REQUEST_ID)
        self.assertEqual(call.body, {"request_id": call.body["request_id"], "set": "s1", "envs": ["counter"],
                                     "count": 3, "max_turns": 8}, "unset fields are left to the gateway's defaults")

    def test_repeated_request_id_applies_nothing_twice(self) -> None:
        first = self.client.submit("s1", envs=["counter"], count=3, request_id="sub-1")
        again = self.client.submit("s1", envs=["counter"], count=3, request_id="sub-1")
        self.assertEqual(first, again)
        with self.assertRaises(Conflict) as cm:
            self.client.submit("s1", envs=["counter"], count=4, request_id="sub-1")
        self.assertEqual(cm.exception.field, "request_id")

    def test_errors_carry_code_message_and_field(self) -> None:
        cases = [
            (400, {"error": {"code": "bad_request", "message": "count: want > 0", "field": "count"}}, BadRequest,
             "bad_request", "count"),
            (401, {"error": {"code": "unauthorized", "message": "no token", "field": ""}}, Unauthorized,
             "unauthorized", ""),
            (404, {"error": {"code": "not_found", "message": "no rollout of set x", "field": ""}}, NotFound,
             "not_found", ""),
            (409, {"error": {"code": "conflict", "message": "receipt does not match", "field": "receipts[2].sha256"}},
             Conflict, "conflict", "receipts[2].sha256"),
            (500, {"error": {"code": "internal", "message": "boom", "field": ""}}, APIError, "internal", ""),
            (502, b"<html>bad gateway</html>", APIError, "http_502", ""),
            (401, b"", Unauthorized, "unauthorized", ""),
        ]
        for status, body, cls, code, field in cases:
            with self.subTest(status=status, code=code):
                self.gw.fail("GET", "/v1/sets/s1", status, body)
                before = len(self.gw.requests)
                with self.assertRaises(cls) as cm:
                    self.client.get_set("s1")
                err = cm.exception
                self.assertIs(type(err), cls)
                self.assertEqual((err.status, err.code, err.field), (status, code, field))
                self.assertIn(code, str(err))
                self.assertEqual(len(self.gw.requests) - before, 1, "a 4xx or 500 is not retried")
        self.assertEqual(self.sleeps, [])

    def test_wrong_token_is_unauthorized(self) -> None:
        bad = Client(self.gw.url, "wrong", retry=RetryPolicy(attempts=2), sleep=self.sleeps.append)
        with self.assertRaises(Unauthorized):
            bad.submit("s1", envs=["counter"], count=1)
        self.assertNotIn("s1", self.gw.sets, "an unauthenticated call changes nothing")
        self.assertEqual(self.client.healthz(), {"ok": True}, "healthz needs no token")

    def test_retries_503_and_dropped_connections_with_the_same_request_id(self) -> None:
        for fault in (503, DROP):
            with self.subTest(fault=fault):
                self.sleeps.clear()
                name = f"s-{fault}"
                self.gw.fail("POST", "/v1/sets", fault, {"error": {"code": "unavailable", "message": "no worker",
                                                                    "field": ""}}, times=2)
                res = self.client.submit(name, envs=["counter"], count=2)
                self.assertEqual(res["set"], name)
                calls = [c for c in self.gw.calls("POST", "/v1/sets") if c.body["set"] == name]
                self.assertEqual(len(calls), 3)
                self.assertEqual(len({c.body["request_id"] for c in calls}), 1, "every retry reuses the request id")
                self.assertEqual(len(self.sleeps), 2)
                self.assertLess(self.sleeps[0], self.sleeps[1], "the backoff grows")

    def test_gives_up_after_the_policy_attempts(self) -> None:
        self.gw.fail("GET", "/v1/sets/s1", 503, {"error": {"code": "unavailable", "message": "no Temporal",
                                                           "field": ""}}, times=4)
        with self.assertRaises(Unavailable) as cm:
            self.client.get_set("s1")
        self.assertIn("no Temporal", str(cm.exception))
        self.assertEqual(len(self.sleeps), 3)

        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        gone = Client(f"http://127.0.0.1:{port}", "secret", retry=RetryPolicy(attempts=3), sleep=self.sleeps.append)
        with self.assertRaises(TransportError) as te:
            gone.feed("s1")
        self.assertEqual(te.exception.attempts, 3)
        self.assertIn("unreachable", str(te.exception))

    def test_set_stalled_carries_reason_and_health(self) -> None:
        self.client.submit("s1", envs=["counter"], count=4)
        self.gw.sets["s1"].stalled = "model endpoint: connection refused"
        with self.assertRaises(SetStalled) as cm:
            self.client.feed("s1", wait_ms=10)
        err = cm.exception
        self.assertEqual((err.status, err.code), (409, "set_stalled"))
        self.assertEqual(err.reason, "model endpoint: connection refused")
        self.assertEqual(err.health["state"], "stalled")
        self.assertEqual(self.sleeps, [], "a stalled set is not retried")

    def test_feed_query_and_escaped_path(self) -> None:
        self.gw.sets["a.b_c-1"] = FakeSet("a.b_c-1", 2)
        self.client.feed("a.b_c-1", cursor="0", max_items=5, wait_ms=250)
        (call,) = self.gw.calls("GET", "/v1/sets/a.b_c-1/feed")
        self.assertEqual(call.query, {"cursor": ["0"], "max": ["5"], "wait_ms": ["250"]})
        self.client.feed("a.b_c-1", complete_groups=True)
        self.assertEqual(self.gw.calls("GET", "/v1/sets/a.b_c-1/feed")[-1].query, {"complete_groups": ["true"]})
        with self.assertRaises(NotFound):
            self.client.feed("no/such set")
        self.assertTrue(self.gw.calls("GET", "/v1/sets/no%2Fsuch%20set/feed"), "a set name is one path segment")

    def test_feed_acknowledge_round_trip(self) -> None:
        self.client.submit("s1", envs=["counter"], count=3)
        page = self.client.feed("s1", max_items=10)
        receipts = [receipt_of(i) for i in page["items"]]
        self.assertEqual(len(receipts), 3)
        ack = self.client.acknowledge("s1", [r for r in receipts if r], request_id="ack-1")
        self.assertEqual((ack["receipts"], ack["acknowledged"]), (3, 3))
        self.assertEqual(self.client.acknowledge("s1", [r for r in receipts if r], request_id="ack-1"), ack)
        self.assertEqual(self.client.feed("s1")["items"], [], "an acknowledged result never comes back")

    def test_export_streams_lines(self) -> None:
        self.client.submit("s1", envs=["counter"], count=3)
        self.client.feed("s1")
        lines = list(self.client.export("s1"))
        self.assertEqual([line["rollout_id"] for line in lines], ["s1-0000", "s1-0001", "s1-0002"])

    def test_checkpoint_body(self) -> None:
        self.client.submit("s1", envs=["counter"], count=3)
        res = self.client.checkpoint("k1", "s1", ["http://env:1"], timeout="30s", request_id="cp-k1")
        self.assertEqual(res["workflow_id"], "checkpoint/k1")
        (call,) = self.gw.calls("POST", "/v1/checkpoints")
        self.assertEqual(call.body, {"request_id": "cp-k1", "checkpoint_id": "k1", "set": "s1",
                                     "participants": ["http://env:1"], "timeout": "30s"})
        self.assertEqual(self.client.checkpoint_status("k1")["status"], "completed")

    def test_operator_routes_send_the_operator_token(self) -> None:
        gw = FakeGateway(token="secret", operator_token="op-secret")
        self.addCleanup(gw.close)
        trainer_only = Client(gw.url, "secret", retry=RetryPolicy(attempts=2), sleep=self.sleeps.append)
        with self.assertRaises(Forbidden) as ctx:
            trainer_only.checkpoint("k1", "s1", ["http://env:1"], timeout="30s")
        self.assertEqual(ctx.exception.status, 403)
        self.assertEqual(self.sleeps, [], "a 403 is not retried")
        both = Client(gw.url, "secret", operator_token="op-secret", retry=RetryPolicy(attempts=2), sleep=self.sleeps.append)
        both.checkpoint("k1", "s1", ["http://env:1"], timeout="30s", request_id="cp-op")
        both.submit("s2", envs=["counter"], count=2)
        (call,) = gw.calls("POST", "/v1/checkpoints")[1:]
        self.assertEqual(call.headers.get("Authorization"), "Bearer op-secret")
        (sub,) = gw.calls("POST", "/v1/sets")
        self.assertEqual(sub.headers.get("Authorization"), "Bearer secret", "trainer routes keep the trainer token")

    def test_submit_names_configured_servers(self) -> None:
        self.client.submit("s1", envs=["counter"], count=1, env_server="b", policy_endpoint="vllm", request_id="sub-n")
        (call,) = self.gw.calls("POST", "/v1/sets")
        self.assertEqual(call.body["env_server"], "b")
        self.assertEqual(call.body["policy_endpoint"], "vllm")

    def test_rejects_a_url_without_scheme(self) -> None:
        with self.assertRaises(ValueError):
            Client("127.0.0.1:8088")


class RetryPolicyTest(unittest.TestCase):
    def test_delay_grows_to_the_maximum_within_jitter(self) -> None:
        p = RetryPolicy(initial=0.5, maximum=4.0, multiplier=2.0, jitter=0.25)
        cases = [(1, 0.5), (2, 1.0), (3, 2.0), (4, 4.0), (9, 4.0)]
        for retry, base in cases:
            with self.subTest(retry=retry):
                self.assertAlmostEqual(p.delay(retry, lambda: 0.5), base)
                self.assertAlmostEqual(p.delay(retry, lambda: 0.0), base * 0.75)
                self.assertAlmostEqual(p.delay(retry, lambda: 1.0), base * 1.25)


if __name__ == "__main__":
    unittest.main()
