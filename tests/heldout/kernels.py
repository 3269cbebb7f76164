"""What the kernels do while they run: the units' activity for each kind of work, and which unit
is nearest its own roof (the label of a busy GPU).

Roofs: DCGM's user guide puts the practical peak of DRAM_ACTIVE near 0.8; streaming kernels on
HBM reach about 0.9 of the theoretical bandwidth. Tuned GEMMs keep a tensor pipe active 90-100 %
of cycles. A unit's share is its activity over its roof; because the roof is only known within
those ranges, a case names one unit only when it is nearer its roof under every roof pair in
the ranges and by at least `CLEAR_MARGIN`; otherwise either unit is an acceptable answer.
"""

from __future__ import annotations

import random

from .gpus import GB_S_AS_KB_S, GB_S_AS_KIB_S, GpuModel
from .timeline import Activity

DRAM_ROOFS = (0.80, 0.90)
MATH_ROOFS = (0.90, 1.00)
CLEAR_MARGIN = 0.05  # "within 5 points: either"


def math_of(a: Activity) -> float:
    return max(a.tensor, a.fp16, a.fp32, a.fp64)


def nearer_roof(a: Activity) -> tuple[frozenset[str], str | None]:
    """The acceptable leading units ("compute", "bandwidth") and the second one, if clear."""
    leads = set()
    for dr in DRAM_ROOFS:
        for mr in MATH_ROOFS:
            d, m = min(1.0, a.dram / dr), min(1.0, math_of(a) / mr)
            if abs(d - m) < CLEAR_MARGIN:
                leads |= {"compute", "bandwidth"}
            else:
                leads.add("compute" if m > d else "bandwidth")
    if len(leads) == 2:
        return frozenset(leads), None
    lead = next(iter(leads))
    return frozenset(leads), ("bandwidth" if lead == "compute" else "compute")


def _u(rng: random.Random, lo: float, hi: float) -> float:
    return rng.uniform(lo, hi)


def host_copies(rng: random.Random, model: GpuModel, heavy: bool = False) -> tuple[float, float]:
    """PCIe KB/s while a step runs: batches in (rx), a little out (tx)."""
    gen = model.pcie[0]
    rx = _u(rng, 0.3, 2.5 if heavy else 1.0) * (1.0 if gen >= 4 else 0.6) * GB_S_AS_KB_S
    return _u(rng, 0.01, 0.08) * GB_S_AS_KB_S, rx


def work(rng: random.Random, model: GpuModel, kind: str, overlap_comm: bool = False) -> Activity:
    """The activity of the job's compute phase for a kind of kernel mix.

    kinds: "tensor" (bf16/fp16 matmul), "fp32", "fp64" (math-bound), "bandwidth" (streaming,
    tensor pipes idle), "bandwidth_tensor" (DRAM saturated, tensor pipes moderately busy),
    "balanced" (no unit near its roof), "light" (small kernels: input and sync cases).
    """
    tx, rx = host_copies(rng, model)
    nv = 0.0
    if overlap_comm and model.nvlink_gb_s:
        nv = model.nvlink_gb_s * _u(rng, 0.01, 0.08) * GB_S_AS_KIB_S
    if kind == "tensor":
        t = _u(rng, 0.62, 0.93)
        a = Activity(
            1.0,
            _u(rng, 0.86, 0.98),
            _u(rng, 0.12, 0.4),
            t,
            _u(rng, 0.02, 0.12),
            _u(rng, 0.04, 0.15),
            0.0,
            _u(rng, 0.12, min(0.45, t * 0.55)),
        )
    elif kind == "fp32":
        f = _u(rng, 0.6, 0.9)
        a = Activity(
            1.0,
            _u(rng, 0.9, 0.99),
            _u(rng, 0.35, 0.8),
            0.0,
            _u(rng, 0.0, 0.05),
            f,
            0.0,
            _u(rng, 0.12, min(0.45, f * 0.55)),
        )
    elif kind == "fp64":
        f = _u(rng, 0.6, 0.88)
        a = Activity(
            1.0,
            _u(rng, 0.9, 0.99),
            _u(rng, 0.3, 0.7),
            0.0,
            0.0,
            _u(rng, 0.05, 0.2),
            f,
            _u(rng, 0.1, min(0.42, f * 0.5)),
        )
    elif kind in ("bandwidth", "bandwidth_tensor"):
        d = _u(rng, 0.66, 0.93)
        t = _u(rng, 0.3, 0.5) if kind == "bandwidth_tensor" else _u(rng, 0.0, 0.12)
        a = Activity(
            1.0,
            _u(rng, 0.6, 0.99),
            _u(rng, 0.45, 0.92),
            t,
            _u(rng, 0.03, 0.2),
            _u(rng, 0.05, min(0.35, d * 0.45)),
            0.0,
            d,
        )
    elif kind == "balanced":
        a = Activity(
            1.0,
            _u(rng, 0.4, 0.65),
            _u(rng, 0.15, 0.45),
            _u(rng, 0.15, 0.4),
            _u(rng, 0.02, 0.1),
            _u(rng, 0.05, 0.2),
            0.0,
            _u(rng, 0.25, 0.5),
        )
    elif kind == "light":
        t = _u(rng, 0.1, 0.6)
        a = Activity(
            1.0,
            _u(rng, 0.45, 0.9),
            _u(rng, 0.15, 0.5),
            t,
            _u(rng, 0.0, 0.1),
            _u(rng, 0.05, 0.3),
            0.0,
            _u(rng, 0.15, 0.55),
        )
    else:
        raise ValueError(kind)
    return Activity(**{**_asdict(a), "nvlink_kib_s": nv, "pcie_tx_kb_s": tx, "pcie_rx_kb_s": rx})


def tiny(rng: random.Random, model: GpuModel) -> Activity:
    """Small kernels launched back to back (a small batch in eager mode, an unfused optimizer's
    per-parameter kernels, an environment step's few ops): one is resident nearly all the time,
    each on a few SMs, no unit near its roof."""
    tx, rx = host_copies(rng, model)
    return Activity(
        _u(rng, 0.9, 1.0),
        _u(rng, 0.03, 0.2),
        _u(rng, 0.01, 0.08),
        _u(rng, 0.0, 0.1),
        _u(rng, 0.0, 0.05),
        _u(rng, 0.02, 0.12),
        0.0,
        _u(rng, 0.03, 0.22),
        0.0,
        tx,
        rx,
    )


def mixed(rng: random.Random, model: GpuModel, lead: str) -> Activity:
    """Math pipes and DRAM both near their roofs, `lead` the nearer by 0-30 points (nominal
    roofs: DRAM 0.85, math 0.95)."""
    top = _u(rng, 0.78, 1.0)
    other = top - _u(rng, 0.0, 0.3)
    m_share, d_share = (top, other) if lead == "compute" else (other, top)
    tensor = min(0.97, m_share * 0.95)
    dram = min(0.94, d_share * 0.85)
    tx, rx = host_copies(rng, model)
    return Activity(
        1.0,
        _u(rng, 0.88, 0.99),
        _u(rng, 0.25, 0.6),
        tensor,
        _u(rng, 0.02, 0.1),
        _u(rng, 0.05, 0.2),
        0.0,
        dram,
        0.0,
        tx,
        rx,
    )


def nccl(rng: random.Random, model: GpuModel, nvlink: bool, resident: float = 1.0) -> Activity:
    """An exposed collective: NCCL kernels resident (busy) for `resident` of the time on a few
    SMs, the links carrying the traffic throughout."""
    if nvlink:
        nv = model.nvlink_gb_s * _u(rng, 0.3, 0.8) * GB_S_AS_KIB_S
        tx = rx = _u(rng, 0.01, 0.1) * GB_S_AS_KB_S
    else:
        nv = 0.0
        bw = (4.0 if model.pcie[0] >= 5 else 2.0 if model.pcie[0] == 4 else 1.0) * 6.0
        tx = rx = bw * _u(rng, 0.4, 0.9) * GB_S_AS_KB_S
    return Activity(
        resident,
        _u(rng, 0.05, 0.22),
        _u(rng, 0.02, 0.08),
        0.0,
        _u(rng, 0.0, 0.03),
        _u(rng, 0.01, 0.05),
        0.0,
        _u(rng, 0.08, 0.35),
        nv,
        tx,
        rx,
    )


def _asdict(a: Activity) -> dict:
    return {k: getattr(a, k) for k in Activity.__dataclass_fields__}
