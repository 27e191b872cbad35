"""What an environment is to the participant library (the Python twin of the
Go envs.Environment interface), and base classes to write one.

An environment serves any number of sessions, one a rollout:

    env.name                    the name on the wire (POST /v1/sessions "env")
    env.spec()                  {"name", "mode", "style", "tools"[, "task_format"]}
    env.start(seed, task)       -> (session, {"instructions", "observation"})
    env.restore(state)          -> session rebuilt from session.export(); it
                                validates everything and raises
                                EnvError("bad_state", ...) on any problem

    session.apply(tool, args)   -> {"observation", "reward"[, "terminated", "truncated"]}
    session.verify()            -> {"reward"[, "details"]}; changes nothing
    session.export()            -> the whole state as JSON values
                                (export_restore environments only)
    session.close()

Subclass Environment and Session (or write classes with these methods).
An EnvError leaves the session unchanged; the participant answers it 422
with the environment's code. Anything else an environment raises is a 500.

The mode says what a checkpoint keeps of a session:

- export_restore: export() captures the whole state and restore() rebuilds
  a session that answers every later call exactly like the original (the
  same state must export to the same JSON); the rollout continues.
- restart_only: the state cannot be exported (a process, a clock, a
  socket); after a restore the rollout starts over as its new attempt.
- stateless: the session holds nothing start() did not derive from the
  seed and task; treated like restart_only by a checkpoint.

MODES lists the modes the protocol knows; a mode added to the protocol
(such as a replay mode) is added there and handled by the control plane.
"""

import json

EXPORT_RESTORE = "export_restore"
RESTART_ONLY = "restart_only"
STATELESS = "stateless"
MODES = (EXPORT_RESTORE, RESTART_ONLY, STATELESS)

# Styles: "tools" (the model answers with tool calls, each one operation) or
# "gym" (Gymnasium reset/step: the model's answer is the action given to
# the single operation "step", which returns a dense reward).
TOOLS = "tools"
GYM = "gym"
STYLES = (TOOLS, GYM)
STEP_TOOL = "step"


class EnvError(Exception):
    """A refusal by the environment, with a code the client sees (bad_task,
    bad_arguments, unknown_tool, illegal_action, bad_state, ...); the
    session state is unchanged."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


def tool(name, description, properties=None, required=()):
    """The declaration of one tool: an OpenAI function tool whose arguments
    are a JSON object with these properties (JSON Schemas by name)."""
    return {"name": name, "description": description,
            "parameters": {"type": "object", "properties": dict(properties or {}),
                           **({"required": list(required)} if required else {}), "additionalProperties": False}}


def task_format(description="", schema=None, example=None):
    """The declaration of the task an environment's start() accepts: a
    short description, a JSON Schema, an example task; each optional."""
    out = {}
    if description:
        out["description"] = description
    if schema is not None:
        out["schema"] = schema
    if example is not None:
        out["example"] = example
    return out


SCRIPT_PREFIX = "SCRIPT "


def script_line(task):
    """The line that shows a task's "script" to the policy server's generic
    scripted policy (model "scripted"): 'SCRIPT <JSON>', to put in the first
    observation; "" for a task without one. A script is a list of turns,
    each a list of {"name", "arguments"}, or {"turns": [...], "answer": "..."}."""
    if not isinstance(task, dict) or "script" not in task:
        return ""
    return SCRIPT_PREFIX + json.dumps(task["script"], separators=(",", ":"), sort_keys=True)


class Environment:
    """Base class of an environment. Set the class attributes and implement
    start (and restore for export_restore):

        class Counter(Environment):
            name = "counter"
            mode = EXPORT_RESTORE
            tools = [tool("increment", "Add amount to the counter.", {"amount": {"type": "integer"}}, ["amount"])]

            def start(self, seed, task):
                return CounterSession(task["target"]), {"instructions": "...", "observation": "..."}

            def restore(self, state):
                return CounterSession.from_state(state)
    """

    name = ""
    mode = RESTART_ONLY
    style = TOOLS
    tools = ()
    # What start() accepts, or None: {"description", "schema" (a JSON
    # Schema of the task), "example" (one task)}, each optional
    # (task_format() builds one).
    task_format = None

    def spec(self):
        """The environment's declaration, as GET /v1/envs lists it."""
        spec = {"name": self.name, "mode": self.mode, "style": self.style, "tools": [dict(t) for t in self.tools]}
        if self.task_format:
            spec["task_format"] = dict(self.task_format)
        return spec

    def start(self, seed, task):
        """Begins a session for a task (JSON values, or None) and a seed;
        returns (session, {"instructions", "observation"}). Raise
        EnvError("bad_task", ...) for a task it cannot run."""
        raise NotImplementedError(f"{type(self).__name__}.start")

    def restore(self, state):
        """Rebuilds a session from what its export() returned."""
        raise EnvError("not_exportable", f"environment {self.name!r} ({self.mode}) does not restore sessions")


class Session:
    """Base class of a session. apply(tool, args) calls the method
    tool_<name>(args) (for a gym environment: step(args)); a method may
    return the observation text (reward 0) or the whole outcome dict.
    Implement verify, and export for export_restore environments."""

    def apply(self, tool, args):
        if tool == STEP_TOOL and callable(getattr(self, "step", None)):
            return outcome(self.step(args))
        handler = getattr(self, "tool_" + tool, None) if tool.isidentifier() else None
        if not callable(handler):
            known = sorted(n[len("tool_"):] for n in dir(self) if n.startswith("tool_") and callable(getattr(self, n)))
            raise EnvError("unknown_tool", f"no tool {tool!r} (tools: {', '.join(known) or 'none'})")
        return outcome(handler(args))

    def verify(self):
        """The verdict, {"reward": float[, "details": {...}]}; changes nothing."""
        raise NotImplementedError(f"{type(self).__name__}.verify")

    def export(self):
        """The whole state, as JSON values (export_restore only)."""
        raise EnvError("not_exportable", f"{type(self).__name__} does not export its state")

    def close(self):
        """Releases what the session holds; called once, when it is dropped."""


def outcome(v):
    """An operation's outcome: a string is an observation with reward 0."""
    if isinstance(v, str):
        return {"observation": v, "reward": 0}
    if not isinstance(v, dict) or "observation" not in v:
        raise TypeError(f"an operation returns an observation string or a dict with an observation, not {v!r}")
    return v


def check_environment(env):
    """Raises ValueError naming what is wrong with an environment's
    declaration, before a server is started with it."""
    what = f"environment {getattr(env, 'name', env)!r}"
    for method in ("spec", "start", "restore"):
        if not callable(getattr(env, method, None)):
            raise ValueError(f"{what}: no {method}() method")
    spec = env.spec()
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise ValueError(f"{what}: spec() must be a dict with a non-empty name")
    if spec["name"] != getattr(env, "name", spec["name"]):
        raise ValueError(f"{what}: spec() names it {spec['name']!r}")
    if spec.get("mode") not in MODES:
        raise ValueError(f"{what}: mode {spec.get('mode')!r} is not one of {', '.join(MODES)}")
    if spec.get("style", TOOLS) not in STYLES:
        raise ValueError(f"{what}: style {spec.get('style')!r} is not one of {', '.join(STYLES)}")
    tools = spec.get("tools") or []
    names = [t.get("name") if isinstance(t, dict) else None for t in tools]
    if not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise ValueError(f"{what}: every tool needs a name of its own, got {names}")
    for t in tools:
        if not isinstance(t.get("parameters"), dict) or t["parameters"].get("type") != "object":
            raise ValueError(f"{what}: tool {t['name']!r}: parameters must be a JSON Schema of type object")
    fmt = spec.get("task_format")
    if fmt is not None:
        if not isinstance(fmt, dict) or set(fmt) - {"description", "schema", "example"}:
            raise ValueError(f"{what}: task_format must be a dict of description, schema, example, got {fmt!r}")
        if "schema" in fmt and not isinstance(fmt["schema"], dict):
            raise ValueError(f"{what}: task_format schema must be a JSON Schema object")
    return spec
