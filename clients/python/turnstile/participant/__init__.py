"""A turnstile participant in Python: write an environment, and this library
speaks the whole participant protocol for it (docs/protocol/RULES.md and
docs/protocol/openapi.json). Standard library only.

The library keeps both planes: the data plane (sessions, request-id
receipts replayed byte for byte, the revision check, the attempt fence,
admission) and the checkpoint control plane (capabilities, status, the phase
fence of prepare, commit, restore, resume, retire and authorise), bearer
tokens for each plane, TLS and mutual TLS, and the checkpoint artifact
format byte for byte as the Go coordinator validates it (artifact).

An environment subclasses Environment (name, mode, style, tools, start,
restore) and its sessions Session (tool_<name> methods or apply, verify,
export, close):

    from turnstile.participant import EXPORT_RESTORE, Environment, EnvError, Session, main, tool

    class Counter(Environment):
        name, mode = "counter", EXPORT_RESTORE
        tools = [tool("increment", "Add amount to the counter.",
                      {"amount": {"type": "integer", "minimum": 1}}, ["amount"])]

        def start(self, seed, task):
            s = CounterSession({"value": 0, "target": task["target"]})
            return s, {"instructions": "Reach the target.", "observation": "The counter is at 0."}

        def restore(self, state):
            return CounterSession(dict(state))

    class CounterSession(Session):
        def __init__(self, state):
            self.state = state

        def tool_increment(self, args):
            self.state["value"] += args["amount"]
            return f"The counter is at {self.state['value']}."

        def verify(self):
            return {"reward": 1.0 if self.state["value"] == self.state["target"] else 0.0}

        def export(self):
            return dict(self.state)

    if __name__ == "__main__":
        raise SystemExit(main([Counter()]))

main() reads bin/envserver's flags (--listen, --ready-file, --name,
--envs, --tls-*; tokens from $TURNSTILE_DATA_TOKEN and
$TURNSTILE_CONTROL_TOKEN); serve(envs, host, port, data_token=...,
control_token=..., tls=TLS(cert, key, client_ca)) blocks; start(...) serves
in a background thread and returns a Running with its url.
"""

from .control import COMPONENT, FEATURES, SCHEMA_VERSION
from .environment import (
    EXPORT_RESTORE,
    GYM,
    MODES,
    RESTART_ONLY,
    STATELESS,
    STEP_TOOL,
    TOOLS,
    Environment,
    EnvError,
    Session,
    check_environment,
    outcome,
    script_line,
    task_format,
    tool,
)
from .server import TLS, Running, main, serve, start
from .wire import ProtocolError

__all__ = [
    "Environment", "Session", "EnvError", "tool", "task_format", "script_line", "outcome", "check_environment",
    "EXPORT_RESTORE", "RESTART_ONLY", "STATELESS", "MODES", "TOOLS", "GYM", "STEP_TOOL",
    "start", "serve", "main", "TLS", "Running", "ProtocolError",
    "COMPONENT", "SCHEMA_VERSION", "FEATURES",
]
