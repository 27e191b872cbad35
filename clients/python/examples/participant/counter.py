"""The counter environment on the participant library, in Python: the agent
raises a counter with the increment tool until it reaches a target. Its
task, observations and state are those of the Go counter (envs/counter), so
the counter's scripted policy on the bundled policy server drives it.

A task is {"target": T[, "start": S]}; the verdict is 1 when the counter
ends exactly on the target. The whole state is exported, so a checkpoint
keeps it and a restored rollout continues where it was cut.
"""

from turnstile.participant import EXPORT_RESTORE, EnvError, Environment, Session, tool

INSTRUCTIONS = "You control a counter. Call the increment tool until the counter reaches the target, then answer done."
AMOUNT = {"type": "integer", "minimum": 1, "maximum": 10, "description": "how much to add to the counter"}
FIELDS = {"start", "target", "padding", "value", "ops"}


def whole(v, name, code):
    if type(v) is not int or v < 0:
        raise EnvError(code, f"{name} must be a whole number, not {v!r}")
    return v


class CounterEnv(Environment):
    name, mode = "counter", EXPORT_RESTORE
    tools = [tool("increment", "Add amount (1 to 10) to the counter and observe its new value.", {"amount": AMOUNT}, ["amount"])]

    def start(self, seed, task):
        if not isinstance(task, dict) or "target" not in task or not set(task) <= {"target", "start"}:
            raise EnvError("bad_task", 'a counter task is {"target": T} or {"target": T, "start": S}')
        s = whole(task.get("start", 0), "start", "bad_task")
        t = whole(task["target"], "target", "bad_task")
        state = {"start": s, "target": t, "padding": 0, "value": s, "ops": 0}
        return CounterSession(state), {"instructions": INSTRUCTIONS, "observation":
                                       f'Increase the counter from {s} to {t}.\nTASK {{"start":{s},"target":{t}}}'}

    def restore(self, state):
        if not isinstance(state, dict) or set(state) != FIELDS or state["padding"] != 0:
            raise EnvError("bad_state", f"a counter state holds exactly {sorted(FIELDS)}, padding 0")
        st = {k: whole(state[k], k, "bad_state") for k in sorted(FIELDS)}
        if st["value"] < st["start"] or not st["ops"] <= st["value"] - st["start"] <= 10 * st["ops"]:
            raise EnvError("bad_state", f"value {st['value']} cannot be reached from {st['start']} in {st['ops']} increments")
        return CounterSession(st)


class CounterSession(Session):
    def __init__(self, state):
        self.st = state

    def tool_increment(self, args):
        if not isinstance(args, dict) or set(args) != {"amount"} or type(args["amount"]) is not int or not 1 <= args["amount"] <= 10:
            raise EnvError("bad_arguments", 'increment takes {"amount": N} with N from 1 to 10')
        self.st["value"] += args["amount"]
        self.st["ops"] += 1
        return f"counter={self.st['value']}"

    def verify(self):
        st = self.st
        return {"reward": 1.0 if st["value"] == st["target"] else 0.0, "details": {"value": st["value"], "target": st["target"]}}

    def export(self):
        return {k: self.st[k] for k in ("start", "target", "padding", "value", "ops")}
