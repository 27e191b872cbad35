"""Unit tests of examples/trainer_loop.py against the in-process fake gateway."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile
import unittest
from typing import Any, Dict, List, Sequence, Tuple

from fakegateway import DROP, FakeGateway
from turnstile import Client, RetryPolicy, TransportError

_EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "examples", "trainer_loop.py")
_spec = importlib.util.spec_from_file_location("trainer_loop", _EXAMPLE)
assert _spec is not None and _spec.loader is not None
trainer_loop = importlib.util.module_from_spec(_spec)
sys.modules["trainer_loop"] = trainer_loop  # dataclasses look their module up while it loads
_spec.loader.exec_module(trainer_loop)


def expected_reward(count: int, failing: Sequence[int] = ()) -> float:
    """The reward sum the fake's completed rollouts give (see FakeSet.item)."""
    return sum(1.0 if i % 2 else 0.5 for i in range(count) if i not in failing)


class TrainerLoopTest(unittest.TestCase):
    def setUp(self) -> None:
        self.gw = FakeGateway(token="secret")
        self.addCleanup(self.gw.close)
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.state = os.path.join(self.dir, "trainer.json")

    def run_main(self, *extra: str, set_name: str = "s1") -> Tuple[int, Dict[str, Any], str]:
        # Explicit tokens: a shell that exported the gateway's tokens must not
        # reach the fake gateway through the flags' defaults.
        argv = ["--gateway", self.gw.url, "--token", "secret", "--operator-token", "", "--set", set_name,
                "--state", self.state, "--wait-ms", "0", *extra]
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = trainer_loop.main(argv)
        summary = json.loads(out.getvalue()) if out.getvalue().strip() else {}
        return code, summary, err.getvalue()

    def saved(self) -> Dict[str, Any]:
        with open(self.state, encoding="utf-8") as f:
            return json.load(f)

    def test_trains_each_result_once_acknowledges_and_checkpoints(self) -> None:
        self.gw.set_options = {"failing": (3, 7), "per_poll": 2}
        code, summary, err = self.run_main("--envs", "counter", "--count", "10", "--batch", "3",
                                           "--checkpoint-every", "4", "--participant", "http://env:1")
        self.assertEqual(code, 0, err)
        self.assertTrue(summary["done"])
        self.assertEqual((summary["trained"], summary["failed"], summary["acknowledged"]), (8, 2, 8))
        self.assertEqual(summary["reward_sum"], expected_reward(10, (3, 7)))
        self.assertEqual(summary["generated_token_ids"], 8 * 3)
        self.assertEqual((summary["redelivered"], summary["swept"]), (0, 0))
        self.assertEqual([c["id"] for c in summary["checkpoints"]], ["s1-k1", "s1-k2"])
        self.assertTrue(all(c["status"] == "completed" for c in summary["checkpoints"]))
        self.assertEqual(self.gw.checkpoints["s1-k1"]["participants"], ["http://env:1"])
        fs = self.gw.sets["s1"]
        self.assertEqual(sorted(fs.acked), sorted(fs.rid(i) for i in range(10) if i not in (3, 7)))
        self.assertEqual(set(self.saved()["deliveries"].values()), {1}, "each rollout delivered once")
        self.assertIn("rollout s1-0003 failed: model endpoint down", err)

    def test_a_restarted_trainer_continues_where_it_stopped(self) -> None:
        code, first, err = self.run_main("--envs", "counter", "--count", "10", "--batch", "3", "--stop-after", "4")
        self.assertEqual(code, 0, err)
        self.assertFalse(first["done"])
        self.assertGreaterEqual(first["trained"], 4)
        code, second, err = self.run_main("--envs", "counter", "--count", "10", "--batch", "3")
        self.assertEqual(code, 0, err)
        self.assertTrue(second["done"])
        self.assertEqual(second["trained"], 10)
        self.assertEqual(second["reward_sum"], expected_reward(10))
        self.assertEqual(len(self.gw.calls("POST", "/v1/sets")), 1, "the set is submitted once")
        self.assertEqual(set(self.saved()["deliveries"].values()), {1})

    def test_a_crash_between_training_and_acknowledging_trains_nothing_twice(self) -> None:
        self.gw.fail("POST", "/v1/sets/s1/acks", DROP, times=100)
        self.gw.set_options = {"per_poll": 5}
        opts = trainer_loop.Options(set="s1", state_path=self.state, batch=5, wait_ms=0, outage_timeout=0,
                                    submit={"envs": ["counter"], "count": 6})
        logs: List[str] = []
        client = Client(self.gw.url, "secret", retry=RetryPolicy(attempts=2), sleep=lambda s: None)
        with self.assertRaises(TransportError):
            trainer_loop.Trainer(client, opts, logs.append, sleep=lambda s: None).run()
        pending = self.saved()["pending_ack"]
        self.assertEqual(len(pending["receipts"]), 5, "trained on, saved, not acknowledged")
        self.assertEqual(len(self.saved()["trained"]), 5)

        self.gw.faults.clear()
        summary = trainer_loop.Trainer(client, opts, logs.append, sleep=lambda s: None).run()
        self.assertEqual(summary["trained"], 6)
        self.assertEqual(summary["reward_sum"], expected_reward(6), "nothing trained on twice")
        acks = self.gw.calls("POST", "/v1/sets/s1/acks")
        self.assertEqual(acks[-2].body["request_id"], pending["request_id"], "the ack in flight is sent again as is")
        self.assertEqual(sorted(self.gw.sets["s1"].acked), [f"s1-{i:04d}" for i in range(6)])

    def test_a_stalled_set_aborts_with_the_reason(self) -> None:
        self.gw.set_options = {"stall_after_polls": 2, "per_poll": 1}
        code, summary, err = self.run_main("--envs", "counter", "--count", "10", "--batch", "3")
        self.assertEqual(code, trainer_loop.EXIT_STALLED, err)
        self.assertIn("aborting: set s1 stalled: model endpoint unreachable: connection refused", err)
        self.assertEqual(summary["aborted"], "model endpoint unreachable: connection refused")
        self.assertEqual(summary["health"]["state"], "stalled")
        self.assertEqual(summary["trained"], 1, "what came before the stall was trained on and kept")

    def test_the_final_sweep_finds_a_result_the_cursor_passed(self) -> None:
        self.gw.set_options = {"skip_once": 5, "per_poll": 3}
        code, summary, err = self.run_main("--envs", "counter", "--count", "8", "--batch", "2")
        self.assertEqual(code, 0, err)
        self.assertEqual((summary["trained"], summary["swept"]), (8, 1))
        self.assertIn("the final sweep found 1 results", err)

    def test_a_dataset_is_sent_inline_and_bad_lines_are_all_reported(self) -> None:
        rows = os.path.join(self.dir, "rows.jsonl")
        with open(rows, "w", encoding="utf-8") as f:
            f.write('{"id":"a","env":"counter","task":{"target":2}}\n{"env":"counter","task":{"target":3}}\n')
        code, summary, err = self.run_main("--dataset", rows, "--repeats", "3")
        self.assertEqual(code, 0, err)
        self.assertEqual(summary["trained"], 6)
        (call,) = self.gw.calls("POST", "/v1/sets")
        self.assertEqual(call.body["request_id"], "submit.s1")
        self.assertEqual((len(call.body["rows"]), call.body["repeats"], call.body["require_ack"]), (2, 3, True))

        with open(rows, "w", encoding="utf-8") as f:
            f.write('{"env":"counter","task":{}}\nnot json\n{"env":"counter"}\n')
        code, _, err = self.run_main("--dataset", rows, set_name="s2")
        self.assertEqual(code, trainer_loop.EXIT_USAGE)
        self.assertIn("line 2", err)
        self.assertIn("line 3: want an object with env and task", err)
        self.assertNotIn("s2", self.gw.sets, "nothing is submitted")

    def test_a_state_file_of_another_set_is_refused(self) -> None:
        code, _, err = self.run_main("--envs", "counter", "--count", "2")
        self.assertEqual(code, 0, err)
        code, _, err = self.run_main("--envs", "counter", "--count", "2", set_name="other")
        self.assertEqual(code, trainer_loop.EXIT_USAGE)
        self.assertIn("belongs to set 's1'", err)

    def test_a_set_submitted_by_someone_else_is_a_conflict(self) -> None:
        Client(self.gw.url, "secret").submit("s1", envs=["counter"], count=2, request_id="theirs")
        code, _, err = self.run_main("--envs", "counter", "--count", "2")
        self.assertEqual(code, trainer_loop.EXIT_ERROR)
        self.assertIn("--attach", err)
        code, summary, err = self.run_main("--attach")
        self.assertEqual(code, 0, err)
        self.assertEqual(summary["trained"], 2)


if __name__ == "__main__":
    unittest.main()
