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

from turnstile.participant import RESTART_ONLY, EnvError, Environment, Session, tool

NAME = "stopwatch"


class StopwatchEnv(Environment):
    """restart_only: the library commits its sessions without state and
    never calls restore; the base class's restore refuses."""

    name, mode = NAME, RESTART_ONLY
    tools = [tool("lap", "Record a lap and show the time since the start.")]

    def start(self, seed, task):
        if not isinstance(task, dict) or set(task) != {"laps"} or type(task["laps"]) is not int or not 1 <= task["laps"] <= 10:
            raise EnvError("bad_task", 'task must be {"laps": N} with N from 1 to 10')
        return StopwatchSession(task["laps"]), {
            "instructions": "Record laps with the lap tool, then answer done.",
            "observation": f"Record {task['laps']} laps."}


class StopwatchSession(Session):
    def __init__(self, laps):
        self.want = laps
        self.laps = 0
        self.t0 = time.monotonic()

    def tool_lap(self, args):
        if args != {}:
            raise EnvError("bad_arguments", "lap takes no arguments")
        self.laps += 1
        return f"lap {self.laps} at {int((time.monotonic() - self.t0) * 1000)} ms"

    def verify(self):
        return {"reward": 1.0 if self.laps >= self.want else 0.0, "details": {"laps": self.laps}}
