"""python -m turnstile.participant artifact write|check DIR CHECKPOINT_ID:
writes a checkpoint from JSON sections on stdin, or validates one, in the
checkpoint artifact format; prints the manifest digest. For tests that
compare the library with other implementations, and to check a checkpoint
by hand."""

import sys

from .artifact import _main

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "artifact":
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    sys.exit(_main(sys.argv[2:]))
