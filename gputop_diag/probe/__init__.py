"""The probe: measures a training or inference job from inside its own process.

Three ways in (the README): `python -m gputop_diag.probe train.py ARGS...`;
`gputop-diag watch --probe -- CMD...`, which probes every Python process the command starts
(launch.probe_environment); or, in the job itself::

    import gputop_diag.probe
    gputop_diag.probe.start()

With PyTorch, each optimizer step is one step record; `gputop_diag.probe.step()` marks the steps
of a loop without an optimizer (and of a job without torch: wall time only). The records and the
file are described in schema.py. This package imports only the standard library, and torch only
once the job has imported it; nothing it does may raise into the job.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # loaded by `start`: a reader of `schema` alone (the live view) needs none of it
    from .core import Probe

__all__ = ["start", "step"]

_probe: Probe | None = None
_lock = threading.Lock()
_fork_hook_registered = False


def start() -> None:
    """Start probing this process (idempotent; never raises)."""
    _start(by_hand=True)


def step() -> None:
    """Mark a step boundary by hand (starts the probe if needed; never raises).

    Once called, it replaces the optimizer's steps as the boundaries."""
    try:
        probe = _probe if _probe is not None else _start(by_hand=True)
        if probe is not None:
            probe.manual_step()
    except Exception:
        pass


def _start(by_hand: bool) -> Probe | None:
    """`by_hand`: started by the job or `python -m gputop_diag.probe` (its file is written even
    before a step); otherwise by the boot code of `watch --probe` (a file only if it steps)."""
    global _probe, _fork_hook_registered
    try:
        with _lock:
            from .core import Probe

            if _probe is not None:
                if by_hand:
                    _probe.earned = _probe.earned or not _probe.disabled
                return _probe
            probe = Probe(by_hand)
            probe.install()
            _probe = probe
            if not _fork_hook_registered:
                os.register_at_fork(after_in_child=_after_fork_in_child)
                _fork_hook_registered = True
            return probe
    except Exception:
        return None


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    try:
        if _probe is not None:
            _probe.after_fork_in_child()
    except Exception:
        pass


def _stop() -> None:
    """Take every hook out and finish the file (tests and bench/probe.py)."""
    global _probe
    with _lock:
        probe, _probe = _probe, None
    if probe is not None:
        probe.uninstall()
