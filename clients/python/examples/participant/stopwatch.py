"""The stopwatch environment: a restart-only companion of notes.

Its state is a moment on this process's monotonic clock, which means
nothing to another process, so it cannot be exported: it declares
restart_only, its sessions are committed without state, and after a
restore its rollouts start over as the new attempt (rule R14). It is here
so the conformance kit has a restart-only environment to check.

- lap {}   records a lap and shows the time since the start

A task is {"laps": N} (1..10); the verdict is 1 once N laps are recorded.
"""

import time

from environment import EnvError

NAME = "stopwatch"


class StopwatchEnv:
    name = NAME

    def spec(self):
        return {"name": NAME, "mode": "restart_only", "style": "tools", "tools": [
            {"name": "lap", "description": "Record a lap and show the time since the start.",
             "parameters": {"type": "object", "properties": {}, "additionalProperties": False}}]}

    def start(self, seed, task):
        if not isinstance(task, dict) or set(task) != {"laps"} or type(task["laps"]) is not int or not 1 <= task["laps"] <= 10:
            raise EnvError("bad_task", 'task must be {"laps": N} with N from 1 to 10')
        return StopwatchSession(task["laps"]), {
            "instructions": "Record laps with the lap tool, then answer done.",
            "observation": f"Record {task['laps']} laps."}

    def restore(self, state):
        raise EnvError("not_exportable", "a stopwatch runs on this process's clock; its sessions start over")


class StopwatchSession:
    def __init__(self, laps):
        self.want = laps
        self.laps = 0
        self.t0 = time.monotonic()

    def apply(self, tool, args):
        if tool != "lap":
            raise EnvError("unknown_tool", f"no tool {tool!r} (tools: lap)")
        if args != {}:
            raise EnvError("bad_arguments", "lap takes no arguments")
        self.laps += 1
        return {"observation": f"lap {self.laps} at {int((time.monotonic() - self.t0) * 1000)} ms", "reward": 0}

    def verify(self):
        return {"reward": 1.0 if self.laps >= self.want else 0.0, "details": {"laps": self.laps}}

    def export(self):
        raise EnvError("not_exportable", "a stopwatch cannot be exported")

    def close(self):
        pass
