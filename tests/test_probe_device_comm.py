"""Collectives on CUDA tensors (NCCL) return once queued on the GPU's stream: the host's time
in them is not their time, so the probe marks t_comm as not measured instead of reporting
near zero. Checked with stand-in tensors (no GPU here): the real hook code runs."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from gputop_diag.probe.accounts import Accounts
from gputop_diag.probe.hooks import _collective


class Work:  # an async_op=True handle's type
    pass


def test_a_collective_on_cuda_tensors_marks_communication_unmeasurable():
    acc = Accounts(threading.get_ident())
    calls = []
    all_reduce = _collective(
        acc, lambda *a, **k: calls.append(a), lambda *a: None, Work, "all_reduce"
    )
    all_reduce(SimpleNamespace(is_cuda=False))  # gloo on the CPU: the host does wait
    assert not acc.device_comm and len(calls) == 1
    all_reduce([SimpleNamespace(is_cuda=True)], group=None)  # NCCL: queued, not waited for
    assert acc.device_comm and len(calls) == 2


def test_the_step_record_then_leaves_t_comm_empty():
    from gputop_diag.probe.core import step_record

    rec = step_record(
        (5, 1.0, 0.1, 0.0, 0.0, 0, 0.0, 0.0, (True, True, False), 0, False, None, None)
    )
    assert rec["t_comm_s"] is None and "t_comm" not in rec["measured"]
