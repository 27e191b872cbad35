"""What an environment is to this participant (the Python twin of the Go
envs.Environment interface):

    env.name                    the name on the wire
    env.spec()                  {"name", "mode", "style", "tools"}; mode is
                                export_restore, restart_only or stateless
    env.start(seed, task)       -> (session, {"instructions", "observation"})
    env.restore(state)          -> session; validates everything, raises
                                EnvError("bad_state", ...) on any problem

    session.apply(tool, args)   -> {"observation", "reward"[, "terminated", "truncated"]}
    session.verify()            -> {"reward"[, "details"]}; changes nothing
    session.export()            -> the whole state as JSON-able values
                                (export_restore environments only)
    session.close()

An EnvError leaves the session unchanged; the participant answers it 422
with the environment's code. Anything else an environment raises is a 500.
"""


class EnvError(Exception):
    """A refusal by the environment; the session state is unchanged."""

    def __init__(self, code, message):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
