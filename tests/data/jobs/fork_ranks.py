"""Starts examples/ranks.py as WORLD ranks forked from one process that imported torch once:
the same ranks torchrun starts (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR/PORT, gloo), without
four interpreters importing torch on a two-core machine. Under `watch --probe`'s environment the
parent loads the probe, never steps (no file), and each forked rank writes its own.

    python tests/data/jobs/fork_ranks.py WORLD PORT -- ARGS OF examples/ranks.py

`fork_ranks.py serve` imports torch once for many jobs (`serve`): each is started by a launcher
forked from it, which forks the ranks as above.
"""

import json
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

    if sys.argv[1] == "serve":
        serve()
        return
    world, port = int(sys.argv[1]), int(sys.argv[2])
    launch(world, port, sys.argv[sys.argv.index("--") + 1 :], sys.stdout)


def serve() -> None:
    """One job a line on stdin (JSON: world, port, args, log): a launcher forked from this
    process runs it as `main` does, its output and its ranks' into the file `log`, and answers
    on stdout with its pid and its ranks' ("LAUNCHER RANK0 RANK1 ..."). Ends with stdin; the
    launchers that ended are waited for before each job."""
    answer = os.fdopen(os.dup(1), "w")
    for line in sys.stdin:
        _wait_ended()
        job = json.loads(line)
        pid = os.fork()
        if pid == 0:
            log = os.open(job["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(log, 1)
            os.dup2(log, 2)
            os.close(log)
            os.close(null)
            print(os.getpid(), end=" ", file=answer, flush=True)
            launch(job["world"], job["port"], job["args"], answer)
    while True:
        try:
            os.wait()
        except ChildProcessError:
            return


def _wait_ended() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def launch(world: int, port: int, args: list[str], answer) -> None:
    """Fork the `world` ranks of examples/ranks.py `args`; write their pids on `answer`; exit
    with the first failure among them."""
    children = []
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            if answer is not sys.stdout:
                answer.close()
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
    print(" ".join(str(p) for p in children), file=answer, flush=True)
    if answer is not sys.stdout:
        answer.close()
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
