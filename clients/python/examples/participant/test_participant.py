"""Unit tests of the example's environments (python3 -m unittest, standard
library only, with the turnstile client installed or on PYTHONPATH). The
protocol itself is the library's and tested with it (clients/python/tests);
the Go tests beside this file drive participant.py with the Go clients and
the conformance kit."""

import json
import unittest

from counter import CounterEnv
from notes import NotesEnv
from stopwatch import StopwatchEnv
from turnstile.participant import EnvError, check_environment


class CounterTest(unittest.TestCase):
    def test_reaching_the_target_scores_one_and_state_round_trips(self):
        sess, start = CounterEnv().start(0, {"target": 7, "start": 2})
        self.assertIn('TASK {"start":2,"target":7}', start["observation"])
        self.assertEqual(sess.apply("increment", {"amount": 4}), {"observation": "counter=6", "reward": 0})
        state = json.loads(json.dumps(sess.export()))
        again = CounterEnv().restore(state)
        self.assertEqual(again.export(), state)
        self.assertEqual(again.apply("increment", {"amount": 1})["observation"], "counter=7")
        self.assertEqual(again.verify()["reward"], 1.0)
        self.assertEqual(sess.verify()["reward"], 0.0)

    def test_bad_input_is_refused(self):
        for task in [None, {}, {"target": -1}, {"target": 1.5}, {"target": 3, "x": 1}]:
            with self.subTest(task=task), self.assertRaises(EnvError):
                CounterEnv().start(0, task)
        sess, _ = CounterEnv().start(0, {"target": 3})
        for args in [{}, {"amount": 0}, {"amount": 11}, {"amount": "1"}]:
            with self.subTest(args=args), self.assertRaises(EnvError):
                sess.apply("increment", args)
        with self.assertRaises(EnvError) as cm:
            sess.apply("decrement", {"amount": 1})
        self.assertEqual(cm.exception.code, "unknown_tool")
        good = {"start": 0, "target": 3, "padding": 0, "value": 5, "ops": 1}
        for k, v in [("value", 11), ("ops", 0), ("padding", 1), ("start", -1)]:
            with self.subTest(state=k), self.assertRaises(EnvError):
                CounterEnv().restore(dict(good, **{k: v}))
        self.assertEqual(sess.export()["value"], 0)


class NotesTest(unittest.TestCase):
    def test_declarations_check(self):
        for env in (CounterEnv(), NotesEnv(), StopwatchEnv()):
            check_environment(env)
        self.assertEqual(StopwatchEnv().spec()["mode"], "restart_only")

    def test_task_is_a_function_of_seed_and_steps(self):
        a = NotesEnv().start(5, {"steps": 4})[1]
        b = NotesEnv().start(5, {"steps": 4})[1]
        c = NotesEnv().start(6, {"steps": 4})[1]
        self.assertEqual(a, b)
        self.assertNotEqual(a, c)
        for bad in [{"steps": 0}, {"steps": 7}, {"steps": 2.0}, {"steps": 2, "x": 1}, [], None]:
            with self.assertRaises(EnvError):
                NotesEnv().start(1, bad)

    def test_following_the_task_scores_one(self):
        sess, start = NotesEnv().start(11, {"steps": 5})
        line = [l for l in start["observation"].splitlines() if l.startswith("TASK ")][0]
        self.assertLess(sess.verify()["reward"], 1)
        for e in json.loads(line[5:])["edits"]:
            sess.apply(e["tool"], e["arguments"])
        self.assertEqual(sess.verify()["reward"], 1)

    def test_restore_refuses_bad_state(self):
        sess, _ = NotesEnv().start(3, {"steps": 2})
        state = sess.export()
        self.assertEqual(NotesEnv().restore(json.loads(json.dumps(state))).export(), state)
        for k, v in [("version", 2), ("notes", {"t": 1}), ("steps", 99), ("edits", "1")]:
            with self.subTest(k), self.assertRaises(EnvError):
                NotesEnv().restore(dict(state, **{k: v}))



if __name__ == "__main__":
    unittest.main()
