"""The command `watch -- CMD` starts: where its output goes, how it is started, and the signals
that stop it.

A started command runs in its own session (SIGHUP from a dropped SSH link does not reach it)
with stdin from /dev/null and stdout and stderr to the log file (by default in the state
directory, `default_log_path`), so it outlives us when we are detached or killed, and its
output is not lost when nobody reads it. Ctrl-C reaches it only as a shell would pass it on
(`INTERRUPT_SIGNALS`: SIGINT to its process group, then SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import NamedTuple

STOP_GRACE_S = 10.0  # stopping a started command: SIGTERM, then SIGKILL this much later
# Ctrl-C once, twice, three times (and more): what a shell user escalates to by hand
INTERRUPT_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
STATE_DIR = "gputop-diag"  # under $XDG_STATE_HOME, as the live view's `s` and `S` save


class WatchError(Exception):
    """The job cannot be watched; the text is for the user. `code` is the exit code."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def state_dir(environ: dict | None = None) -> str:
    """`$XDG_STATE_HOME/gputop-diag`, else `~/.local/state/gputop-diag` (the XDG base directory
    specification's place for state that outlives a run: logs, history), absolute."""
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME") or os.path.join(
        env.get("HOME") or os.path.expanduser("~"), ".local", "state"
    )
    return os.path.abspath(os.path.join(state, STATE_DIR))


def default_log_path(now: float | None = None, environ: dict | None = None) -> str:
    """gputop-watch-<local time>-<pid>.log in the state directory (`state_dir`: made, mode
    0700, when missing), else in the temporary directory; never the current directory (a
    project's folder, a shared one, `/`)."""
    import tempfile

    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    name = f"gputop-watch-{stamp}-{os.getpid()}.log"
    for directory in (state_dir(environ), tempfile.gettempdir()):
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
        except OSError:
            continue
        if os.access(directory, os.W_OK | os.X_OK):
            return os.path.join(directory, name)
    return os.path.join(tempfile.gettempdir(), name)


class Started(NamedTuple):
    """A command just started: its process, the size its log had before (an existing file is
    added to, not read), the environment it was given."""

    popen: subprocess.Popen
    log_offset: int
    environ: dict[str, str]


def start_command(
    argv: Sequence[str], log_path: str, env: Mapping[str, str] | None = None
) -> Started:
    """Start `argv` in its own session, stdin from /dev/null, stdout and stderr appended to
    `log_path`; WatchError (exit 127 or 126, as a shell's) when it cannot run."""
    if not argv:
        raise WatchError("watch -- CMD: no command given after --", code=2)
    existed = os.path.exists(log_path)
    try:
        logf = open(log_path, "ab")  # noqa: SIM115 - handed to the child, closed below
        before = os.fstat(logf.fileno()).st_size  # an existing file is added to, not read
    except OSError as e:
        raise WatchError(f"cannot write the output file {log_path}: {e.strerror}") from None
    environ = dict(os.environ if env is None else env)
    environ.setdefault("PYTHONUNBUFFERED", "1")  # lines reach the log as they are printed
    try:
        with logf:
            popen = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=logf,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # no SIGHUP or Ctrl-C from our terminal
                env=environ,
            )
    except (FileNotFoundError, PermissionError) as e:
        if not existed:  # nothing ran: no empty log left behind
            with contextlib.suppress(OSError):
                os.unlink(log_path)
        if isinstance(e, FileNotFoundError):
            raise WatchError(f"watch: {argv[0]}: command not found", code=127) from None
        raise WatchError(f"watch: {argv[0]}: permission denied", code=126) from None
    return Started(popen, before, environ)
