"""The job's Python stacks, written on request: what a rank that stopped stepping is doing.

`faulthandler.register(signal, file, all_threads=True)` installs a handler, written in C, that
writes every thread's Python traceback to the file when the signal arrives: it is async-signal
safe and runs even while the thread that steps is blocked inside C++ (a collective, a lock)
holding the GIL (https://docs.python.org/3/library/faulthandler.html#dumping-the-traceback-on-a-
user-signal). The Monitor sends the signal to a process that stopped stepping and reads what was
appended to the file.

The signal is `STACK_SIGNAL` (SIGUSR2), taken only while the job has not claimed it: a handler of
the job's own, set before the probe started or at any time after (`still_ours`, asked by the
writer's thread), means the probe says it cannot dump, and the Monitor never sends it.
Set GPUTOP_DIAG_PROBE_NO_STACKS=1 to keep the probe off the signal altogether.
"""

from __future__ import annotations

import faulthandler
import os
import signal

from .schema import stack_file_name
from .writer import ensure_private_dir, open_private_file

STACK_SIGNAL = signal.SIGUSR2
OFF_VARIABLE = "GPUTOP_DIAG_PROBE_NO_STACKS"


class Stacks:
    """The stack file of one process and the signal that fills it."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.signal: int | None = None

    def register(self, directory: str, pid: int, start_ticks: int) -> int | None:
        """Take the signal, where free; returns it, or None."""
        if os.environ.get(OFF_VARIABLE) or not hasattr(faulthandler, "register"):
            return None
        try:
            if signal.getsignal(STACK_SIGNAL) not in (signal.SIG_DFL, None):
                return None  # the job's own handler
            ensure_private_dir(directory)
            fd = open_private_file(os.path.join(directory, stack_file_name(pid, start_ticks)))
            faulthandler.register(STACK_SIGNAL, file=fd, all_threads=True, chain=False)
        except Exception:
            return None
        self.fd = fd
        self.signal = int(STACK_SIGNAL)
        return self.signal

    def still_ours(self) -> bool:
        """Whether the signal still dumps the stacks (the job may have set a handler since)."""
        if self.signal is None:
            return False
        try:
            if signal.getsignal(self.signal) in (signal.SIG_DFL, None):
                return True
        except Exception:
            pass
        # Not `faulthandler.unregister`: it would put back the handler in place before ours
        # (the default), over the one the job has set since.
        self.signal = None
        return False

    def abandon_after_fork(self) -> None:
        """A forked child inherits the handler, which must not write into its parent's file:
        the default action comes back (the child takes the signal again if it steps)."""
        if self.signal is not None:
            try:
                faulthandler.unregister(self.signal)
            except Exception:
                pass
            self.signal = None
        if self.fd is not None:
            try:
                os.close(self.fd)
            except OSError:
                pass
            self.fd = None
