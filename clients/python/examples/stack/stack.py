#!/usr/bin/env python3
"""A stack environment of your own, on the participant library: the agent
pushes and pops integers; the verdict is 1 when the stack ends as the
task's "want". It is in no catalog: run a set of it with bin/starter and the
bundled policy server (docs/environments.md, "Run your own environment"):

    python3 stack.py --listen 127.0.0.1:8095 --name py
    bin/starter submit --env-server py --env stack --tasks tasks.jsonl ...

A task is {"want": [ints], "script": [turns]}; the script is what the
policy server's generic policy (model "scripted") plays, shown to it in the
first observation (script_line).
"""

import os
import sys

try:
    import turnstile.participant as tp
except ImportError:  # not installed: run from a checkout
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    import turnstile.participant as tp

VALUE = {"type": "integer", "description": "the integer to push"}


class StackEnv(tp.Environment):
    name, mode = "stack", tp.EXPORT_RESTORE
    tools = [tp.tool("push", "Push value on the stack.", {"value": VALUE}, ["value"]),
             tp.tool("pop", "Pop the top of the stack and observe it.")]
    task_format = tp.task_format(
        "want: the stack the episode should end with; script: the tool calls the generic scripted policy plays",
        {"type": "object", "properties": {"want": {"type": "array", "items": {"type": "integer"}}, "script": {}},
         "required": ["want"], "additionalProperties": False},
        {"want": [1], "script": [[{"name": "push", "arguments": {"value": 1}}]]})

    def start(self, seed, task):
        if not isinstance(task, dict) or not isinstance(task.get("want"), list) or not set(task) <= {"want", "script"}:
            raise tp.EnvError("bad_task", 'a stack task is {"want": [ints][, "script": [...]]}')
        return StackSession({"stack": [], "want": task["want"]}), {
            "instructions": "Push and pop until the stack is the one wanted, then answer done.",
            "observation": f"Make the stack {task['want']}.\n{tp.script_line(task)}"}

    def restore(self, state):
        if not isinstance(state, dict) or set(state) != {"stack", "want"}:
            raise tp.EnvError("bad_state", "a stack state holds stack and want")
        return StackSession(state)


class StackSession(tp.Session):
    def __init__(self, state):
        self.st = state

    def tool_push(self, args):
        if not isinstance(args, dict) or set(args) != {"value"} or type(args["value"]) is not int:
            raise tp.EnvError("bad_arguments", 'push takes {"value": N}')
        self.st["stack"].append(args["value"])
        return f"stack={self.st['stack']}"

    def tool_pop(self, args):
        if not self.st["stack"]:
            raise tp.EnvError("illegal_action", "the stack is empty")
        return f"popped {self.st['stack'].pop()}"

    def verify(self):
        return {"reward": 1.0 if self.st["stack"] == self.st["want"] else 0.0, "details": {"stack": self.st["stack"]}}

    def export(self):
        return {"stack": list(self.st["stack"]), "want": list(self.st["want"])}


if __name__ == "__main__":
    sys.exit(tp.main([StackEnv()], prog="stack.py"))
