"""Starts examples/ranks.py as WORLD ranks forked from one process that imported torch once:
the same ranks torchrun starts (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, gloo), without
four interpreters importing torch on a two-core machine. Under `watch --probe`'s environment the
parent loads the probe, never steps (no file), and each forked rank writes its own.

    python tests/data/jobs/fork_ranks.py WORLD PORT -- ARGS OF examples/ranks.py
"""

import os
import runpy
import socket
import sys

import torch  # noqa: F401 - imported once, before the fork
import torch.distributed  # noqa: F401

HERE = os.path.dirname(os.path.abspath(__file__))
RANKS = os.path.join(HERE, "..", "..", "..", "examples", "ranks.py")


def main() -> None:
    # torch._dynamo (with sympy and mpmath, ~800 modules) is imported on a rank's first step, by
    # the optimizer: imported here, before the fork, it costs 1.5 s of CPU once rather than in
    # each rank (4 x 1.6 s; the ranks run the same code either way). Not at the top: the tests
    # import this module for free_port.
    import torch._dynamo  # noqa: F401

    world, port = int(sys.argv[1]), int(sys.argv[2])
    args = sys.argv[sys.argv.index("--") + 1 :]
    children = []
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            os.environ.update(
                RANK=str(rank),
                LOCAL_RANK=str(rank),
                WORLD_SIZE=str(world),
                LOCAL_WORLD_SIZE=str(world),
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
            )
            sys.argv = [RANKS, *args]
            # an exception unwinds to the interpreter, which prints it and runs atexit (the
            # probe's "exit" record), as in a rank torchrun started
            runpy.run_path(RANKS, run_name="__main__")
            sys.exit(0)
        children.append(pid)
    print(" ".join(str(p) for p in children), flush=True)
    status = 0
    for pid in children:
        _, code = os.waitpid(pid, 0)
        status = status or os.waitstatus_to_exitcode(code)
    sys.exit(1 if status else 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    main()
