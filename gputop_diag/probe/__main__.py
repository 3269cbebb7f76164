"""`python -m gputop_diag.probe [-m module | script.py] [args...]`: run a job under the probe.

The `python -m cProfile` idiom (https://docs.python.org/3/library/profile.html): the script runs
as `__main__` with `sys.argv` set to the script and its arguments, and `sys.path[0]` to the
script's directory, exactly as `python script.py` would; its exceptions and exit code pass
through unchanged. `runpy` makes `__main__` the script's own module while it runs, so objects
defined in it pickle for spawned workers (https://docs.python.org/3/library/runpy.html).
"""

from __future__ import annotations

import os
import runpy
import sys

from . import start

USAGE = """usage: python -m gputop_diag.probe script.py [args...]
       python -m gputop_diag.probe -m module [args...]

Runs the script (or module) as __main__ with the gputop-diag probe started: per optimizer step,
where the time went (input, host-device syncs, collectives, GPU), written for `gputop-diag watch`
to read. Exit status and exceptions are the script's own."""


def main(argv: list[str]) -> None:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE, file=sys.stdout if argv else sys.stderr)
        sys.exit(0 if argv else 2)
    if argv[0] == "-m":
        if len(argv) < 2:
            print(USAGE, file=sys.stderr)
            sys.exit(2)
        sys.argv = [argv[1], *argv[2:]]  # runpy puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
        start()
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        return
    script = argv[0]
    if not os.path.isfile(script):
        print(f"python -m gputop_diag.probe: can't open file {script!r}", file=sys.stderr)
        sys.exit(2)
    sys.argv = list(argv)
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    start()
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
