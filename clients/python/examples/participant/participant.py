#!/usr/bin/env python3
"""A turnstile participant in Python: the counter and notes environments
(and the restart-only stopwatch) behind the whole participant protocol, served by the
participant library of the turnstile client (turnstile.participant).

    python3 participant.py --listen 127.0.0.1:0 --ready-file /tmp/env.url

Flags as bin/envserver's (--listen, --ready-file, --name, --envs, --tls-cert,
--tls-key, --tls-client-ca); tokens from $TURNSTILE_DATA_TOKEN and
$TURNSTILE_CONTROL_TOKEN (or --data-token, --control-token).
"""

import os
import sys

try:
    import turnstile.participant as tp
except ImportError:  # not installed: run from a checkout, with the client's sources beside the example
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    import turnstile.participant as tp

from counter import CounterEnv
from notes import NotesEnv
from stopwatch import StopwatchEnv

if __name__ == "__main__":
    sys.exit(tp.main([CounterEnv(), NotesEnv(), StopwatchEnv()], prog="participant.py"))
