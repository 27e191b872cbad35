"""The client's routes of a set's automatic recovery and checkpoint
schedule, against the in-process fake gateway: which token each sends,
the bodies, and the answers."""

from __future__ import annotations

import unittest
from typing import List

from fakegateway import FakeGateway
from turnstile import Client, Forbidden, NotFound, RetryPolicy


class AutomationTest(unittest.TestCase):
    def setUp(self) -> None:
        self.gw = FakeGateway(token="secret", operator_token="op-secret")
        self.addCleanup(self.gw.close)
        self.sleeps: List[float] = []
        self.client = Client(self.gw.url, "secret", operator_token="op-secret", timeout=5,
                             retry=RetryPolicy(attempts=2), sleep=self.sleeps.append)
        self.trainer_only = Client(self.gw.url, "secret", timeout=5, retry=RetryPolicy(attempts=2),
                                   sleep=self.sleeps.append)

    def test_watchdog_on_status_off(self) -> None:
        started = self.client.start_watchdog("s1", ["http://env:1"], every="5s", bound="30s", request_id="w1")
        self.assertEqual(started["workflow_id"], "watchdog/s1")
        self.assertFalse(started["existing"])
        (call,) = self.gw.calls("POST", "/v1/sets/s1/watchdog")
        self.assertEqual(call.headers.get("Authorization"), "Bearer op-secret")
        self.assertEqual(call.body, {"request_id": "w1", "participants": ["http://env:1"], "every": "5s",
                                     "bound": "30s"})
        self.assertTrue(self.client.start_watchdog("s1", ["http://env:1"])["existing"], "a repeat joins it")
        status = self.trainer_only.watchdog_status("s1")
        self.assertEqual(status["phase"], "watching")
        self.assertEqual(status["watched"], ["http://env:1"])
        self.assertEqual(self.client.stop_watchdog("s1", request_id="d1"), {"set": "s1", "stopped": True})
        (stop,) = self.gw.calls("DELETE", "/v1/sets/s1/watchdog")
        self.assertEqual(stop.body, {"request_id": "d1"})
        self.assertEqual(stop.headers.get("Authorization"), "Bearer op-secret")
        self.assertEqual(self.client.watchdog_status("s1")["phase"], "stopped")
        with self.assertRaises(NotFound):
            self.client.watchdog_status("s2")

    def test_trainer_token_cannot_turn_automation_on(self) -> None:
        with self.assertRaises(Forbidden):
            self.trainer_only.start_watchdog("s1", ["http://env:1"])
        with self.assertRaises(Forbidden):
            self.trainer_only.create_schedule("s1", "10m", ["http://env:1"])
        self.assertEqual(self.sleeps, [], "a 403 is not retried")
        self.assertEqual(self.gw.watchdogs, {})
        self.assertEqual(self.gw.schedules, {})

    def test_schedule_tag_pause_trigger_pin_delete(self) -> None:
        sch = self.client.create_schedule("s1", "10m", ["http://env:1"], tag="step-1", keep=3, request_id="c1")
        self.assertEqual((sch["every"], sch["tag"], sch["keep"], sch["existing"]), ("10m", "step-1", 3, False))
        (call,) = self.gw.calls("POST", "/v1/sets/s1/schedule")
        self.assertEqual(call.body, {"request_id": "c1", "every": "10m", "participants": ["http://env:1"],
                                     "tag": "step-1", "keep": 3})
        # The trainer's step, with the trainer token.
        self.assertEqual(self.trainer_only.tag_schedule("s1", "step-2", request_id="t2")["tag"], "step-2")
        (tag,) = self.gw.calls("POST", "/v1/sets/s1/schedule/tag")
        self.assertEqual(tag.headers.get("Authorization"), "Bearer secret")
        self.assertEqual(self.client.tag_schedule("s1", "")["tag"], "", "an empty tag is sent, and clears it")
        self.client.tag_schedule("s1", "step-2")
        sch = self.client.pause_schedule("s1", "evaluating")
        self.assertTrue(sch["paused"])
        self.assertEqual(sch["note"], "evaluating")
        self.assertFalse(self.client.unpause_schedule("s1")["paused"])
        sch = self.client.trigger_schedule("s1")
        self.assertEqual(sch["fired"], 1)
        self.assertEqual(self.trainer_only.schedule("s1")["recent"][0]["checkpoint_id"], "every-s1-1")
        self.assertEqual(self.trainer_only.pin("s1", "step-2")["pinned"], ["every-s1-1"])
        with self.assertRaises(NotFound) as ctx:
            self.client.pin("s1", "step-9")
        self.assertEqual(ctx.exception.field, "tag")
        self.assertTrue(self.client.delete_schedule("s1")["stopped"])
        with self.assertRaises(NotFound):
            self.client.schedule("s1")


if __name__ == "__main__":
    unittest.main()
