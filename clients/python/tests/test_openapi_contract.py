"""The client against the gateway's OpenAPI document (gateway/openapi.json):
every route the document has is a client method, and every request a
method sends (path, query parameters, body fields) is one the document
describes, with the fields it requires. A route or field added or renamed on
either side fails here."""

from __future__ import annotations

import json
import os
import re
import unittest
from typing import Any, Dict, List, Mapping, Optional, Set, Tuple

from turnstile import Client

OPENAPI = os.path.join(os.path.dirname(__file__), "..", "..", "..", "gateway", "openapi.json")


class _Recorder(Client):
    """A client that records each request instead of sending it."""

    def __init__(self) -> None:
        super().__init__("http://gateway.invalid", "token")
        self.sent: List[Tuple[str, str, Dict[str, Any], Optional[Dict[str, Any]]]] = []

    def _with_retries(self, method: str, path: str, query: Optional[Mapping[str, Any]],
                      body: Optional[Mapping[str, Any]], send: Any, operator: bool = False) -> Any:
        kept = {k: v for k, v in (query or {}).items() if v is not None}
        self.sent.append((method, path, kept, dict(body) if body is not None else None))
        return _Answer()


class _Answer(bytes):
    """What a recorded request answers: an empty page as a JSON document,
    and an empty stream as an export."""

    def __new__(cls) -> "_Answer":
        return super().__new__(cls, b'{"results": [], "next_page_token": ""}')

    def __iter__(self) -> Any:
        return iter([])

    def __enter__(self) -> "_Answer":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def _every_call(c: Client) -> None:
    """Calls every route method with every optional argument set."""
    receipt = {"rollout_id": "s1-0000", "attempt": 0, "sha256": "0" * 64}
    c.healthz()
    c.openapi()
    c.submit("s1", envs=["counter"], count=2, rows=[{"env": "counter", "task": {"target": 1}}],
             dataset_path="/d.jsonl", repeats=2, seed=1, policy="p", model_url="http://m", env_url="http://e",
             max_turns=4, sampling={"temperature": 1.0}, limits={"deadline": "5m"}, require_ack=True,
             request_id="r1", env_server="b", policy_endpoint="vllm", max_in_flight=16)
    c.set_max_in_flight("s1", 32, request_id="r7")
    c.get_set("s1")
    c.results("s1", page_token="t", page_size=10)
    list(c.iter_results("s1", page_size=10))
    list(c.export("s1"))
    c.feed("s1", cursor="c", max_items=5, wait_ms=10)
    c.acknowledge("s1", [receipt], request_id="r2")  # type: ignore[list-item]
    c.policy_version("s1", 3, 1, "cancel", request_id="r3")
    c.checkpoint("k1", "s1", ["http://e"], timeout="60s", deadline="2030-01-01T00:00:00Z", stay_paused=True,
                 request_id="r4")
    c.checkpoint_status("k1")
    c.restore("k1", ["http://e"], restore_id="x1", request_id="r5")
    c.restore_status("x1")
    c.resume("s1", "k1", ["http://e"], request_id="r6")
    c.start_watchdog("s1", ["http://e"], standby=["http://f"], every="5s", timeout="2s", misses=3, bound="30s",
                     request_id="r8")
    c.watchdog_status("s1")
    c.stop_watchdog("s1", request_id="r9")
    c.create_schedule("s1", "10m", ["http://e"], tag="step-1", keep=3, timeout="60s", paused=True, request_id="r10")
    c.schedule("s1")
    c.tag_schedule("s1", "step-2", request_id="r11")
    c.pause_schedule("s1", "evaluating", request_id="r12")
    c.unpause_schedule("s1", "done", request_id="r13")
    c.trigger_schedule("s1", request_id="r14")
    c.delete_schedule("s1", request_id="r15")
    c.pin("s1", "step-2", request_id="r16")


@unittest.skipUnless(os.path.exists(OPENAPI), "gateway/openapi.json is not beside this client")
class OpenAPIContractTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls) -> None:
        with open(OPENAPI, encoding="utf-8") as f:
            cls.doc = json.load(f)
        cls.rec = _Recorder()
        _every_call(cls.rec)

    def operation(self, method: str, path: str) -> Tuple[str, Dict[str, Any]]:
        """The document's operation of a concrete request path."""
        for template, ops in self.doc["paths"].items():
            pattern = "^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"
            if re.match(pattern, path) and method.lower() in ops:
                return template, ops[method.lower()]
        self.fail(f"{method} {path}: the OpenAPI document has no such route")

    def schema(self, ref_or_schema: Dict[str, Any]) -> Dict[str, Any]:
        ref = ref_or_schema.get("$ref")
        if not ref:
            return ref_or_schema
        return self.doc["components"]["schemas"][ref.rsplit("/", 1)[1]]

    def test_every_route_has_a_client_method(self) -> None:
        used: Set[Tuple[str, str]] = {(m, self.operation(m, p)[0]) for m, p, _, _ in self.rec.sent}
        documented = {(m.upper(), p) for p, ops in self.doc["paths"].items() for m in ops
                      if m in ("get", "post", "put", "patch", "delete")}
        self.assertEqual(documented - used, set(), "routes the Python client cannot call")

    def test_every_request_is_documented(self) -> None:
        for method, path, query, body in self.rec.sent:
            with self.subTest(method=method, path=path):
                _, op = self.operation(method, path)
                params = {p["name"] for p in op.get("parameters", []) if p.get("in") == "query"}
                self.assertEqual(set(query) - params, set(), "query parameters the document lacks")
                if body is None:
                    self.assertNotIn("requestBody", op, "the route wants a body the client does not send")
                    continue
                schema = self.schema(op["requestBody"]["content"]["application/json"]["schema"])
                props = set(schema.get("properties", {}))
                self.assertEqual(set(body) - props, set(), "body fields the document lacks")
                self.assertEqual(set(schema.get("required", [])) - set(body), set(),
                                 "required fields the client does not send")
                self.assertRegex(body["request_id"], schema["properties"]["request_id"]["pattern"])

    def test_error_codes_are_the_clients(self) -> None:
        from turnstile.errors import ERRORS_BY_CODE

        codes = set()
        for ops in self.doc["paths"].values():
            for op in ops.values():
                for status, resp in op.get("responses", {}).items():
                    m = re.match(r"^([a-z_]+):", resp.get("description", ""))
                    if m and not status.startswith("2"):
                        codes.add(m.group(1))
        self.assertTrue(codes, "the document names its error codes in each response's description")
        self.assertEqual(codes - set(ERRORS_BY_CODE), set(), "error codes without an exception class")


if __name__ == "__main__":
    unittest.main()
