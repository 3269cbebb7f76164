"""The rules for what busy GPUs do: communication, input pipeline, synchronization, bandwidth and
compute. Each says whether the window shows its class, how surely, on what figures, and the one
figure that argues against it when it does not win. `limits.py` holds the two limits from
outside the kernels: device memory and the queue.
"""

from __future__ import annotations

from typing import NamedTuple

from . import thresholds as T
from .features import Features
from .types import Evidence


class Verdict(NamedTuple):
    fires: bool
    confidence: float
    evidence: tuple[Evidence, ...]
    against: Evidence  # the one figure against the class when it does not win
    needs: tuple[str, ...] = ()  # the kinds of evidence (features.EVIDENCE_NAMES) it relies on
    scope_gpus: tuple[int, ...] | None = None  # None: the active GPUs
    job: str | None = None
    # The window shows this class's shape, but the evidence that would decide it is missing:
    # it cannot be primary (absent evidence never votes); the verdict says "undetermined".
    undecided: bool = False
    share: float | None = None  # the unit's share of its own peak (compute and bandwidth)
    # Decided by figures measured inside the job (the probe), which outrank those inferred from
    # outside; `share` is then the waiting part's share of the step (0..1).
    measured: bool = False
    # A named finding within the class (docs/diagnosis.md): "launch_bound" within
    # synchronization, the GPU waiting on the host's kernel launches rather than on a sync.
    finding: str | None = None


def ev(metric: str, value, threshold, text: str, unit: str = "%") -> Evidence:
    return Evidence(metric=metric, value=value, threshold=threshold, text=text, unit=unit)


def pct(v) -> str:
    return "n/a" if v is None else f"{v:.0f} %"


def as_pct(x: float) -> str:
    """A 0-1 share as the percentages elsewhere read: "38 %"."""
    return f"{100 * x:.0f} %"


def _not_waiting(f: Features) -> str:
    """Why a wait class does not fire because the GPUs do not wait, or cannot be seen to."""
    if "util" not in f.available:
        return "busy time not reported (MIG mode or an unsupported field): no wait can be seen"
    return f"the GPU does not wait: idle {as_pct(f.idle_share)} of the time"


def _gbs(kib_s) -> str:
    return "n/a" if kib_s is None else f"{kib_s * 1024 / 1e9:.1f} GB/s"


def communication(f: Features) -> Verdict:
    nv_in, nv_out = f.nvlink_in_dips_kib_s, f.nvlink_outside_kib_s
    pc_in, pc_out = f.pcie_in_dips_kb_s, f.pcie_outside_kb_s
    ratio = T.INTERCONNECT_DIP_RATIO
    together = f.multi_gpu and f.dip_fraction >= T.COMM_DIP_FRACTION
    nvlink = nv_in is not None and nv_in >= T.NVLINK_DIP_KIB_S and nv_in >= ratio * (nv_out or 1)
    pcie = pc_in is not None and pc_in >= T.PCIE_DIP_KB_S and pc_in >= ratio * (pc_out or 1)
    # Without NVLink counters: busy time stays up while the SMs dip (NCCL kernels waiting).
    # The dips are there but no interconnect counter can say whether traffic fills them.
    # NVLink GPUs whose NVLink counters are missing, or no interconnect counter at all.
    unmeasured = nv_in is None and ("nvlink" in f.missing or pc_in is None)
    blind = (
        together
        and unmeasured
        and not pcie
        and f.dips_on_sm
        and (f.util_in_dips or 0) >= T.COMM_BUSY_IN_DIPS_PCT
        and not input_pressure(f)
    )
    metric = "SM activity" if f.dips_on_sm else "GPU busy time"
    out = [
        ev(
            "correlated_dip_fraction",
            100 * f.dip_fraction,
            100 * T.COMM_DIP_FRACTION,
            f"{metric} dips on {len(f.active_gpus)} GPUs at once in {as_pct(f.dip_fraction)} of "
            f"samples ({f.recent_s:.0f} s)",
        )
    ]
    if nvlink or nv_in is not None:
        out.append(
            ev(
                "nvlink_in_dips",
                nv_in,
                T.NVLINK_DIP_KIB_S,
                f"NVLink {_gbs(nv_in)} per GPU (TX+RX) during the dips vs {_gbs(nv_out)} outside "
                "them",
                "KiB/s",
            )
        )
    if pcie and not nvlink:
        out.append(
            ev(
                "pcie_in_dips",
                pc_in,
                T.PCIE_DIP_KB_S,
                f"PCIe {pc_in / 1e6:.1f} GB/s per GPU (TX+RX) during the dips vs "
                f"{(pc_out or 0) / 1e6:.1f} GB/s outside them",
                "KB/s",
            )
        )
    if blind and not (nvlink or pcie):
        out.append(
            ev(
                "util_in_dips",
                f.util_in_dips,
                T.COMM_BUSY_IN_DIPS_PCT,
                f"busy time stays at {pct(f.util_in_dips)} while the SMs dip: kernels resident "
                "but waiting, as NCCL collectives do (no NVLink counters to confirm)",
            )
        )
    if not f.multi_gpu:
        text = "one busy GPU: no collective communication to wait on"
    elif not together:
        text = (
            f"the GPUs dip together in only {as_pct(f.dip_fraction)} of samples"
            if as_pct(f.dip_fraction) != "0 %"
            else "the GPUs dip together in none of the samples"
        )
    elif nv_in is None and pc_in is None:
        text = "interconnect throughput not available and busy time falls in the dips"
    else:
        text = (
            f"interconnect quiet during the dips (NVLink {_gbs(nv_in)}, PCIe "
            f"{(pc_in or 0) / 1e6:.1f} GB/s): no exposed all-reduce"
        )
    # Absent evidence never votes: the shape alone (no interconnect counters) names what to
    # read, it does not make communication the verdict.
    fires = together and (nvlink or pcie)
    conf = T.CONF_COMM_NVLINK if nvlink else T.CONF_COMM_PCIE if pcie else T.CONF_COMM_SHAPE_ONLY
    against = ev("correlated_dip_fraction", 100 * f.dip_fraction, 100 * T.COMM_DIP_FRACTION, text)
    return Verdict(fires, conf, tuple(out), against, ("nvlink", "gpm"), undecided=blind)


def _helpers_text(f: Features) -> str:
    named = f" ({', '.join(f.workers_named)})" if f.workers_named else ""
    return (
        f"{f.worker_count} of the job's helper processes/threads{named} at "
        f"{f.worker_cpu_mean:.0f} % CPU each: {f.worker_cores:.1f} of {f.cpu_count} cores"
    )


def _helpers_cpu(f: Features) -> str:
    """What the job's helpers burn, for the texts that argue against input pressure."""
    if f.worker_cpu_mean is not None:
        return f"{f.worker_cpu_mean:.0f} % CPU each ({f.worker_count} busy)"
    if f.worker_cores is not None:
        return f"idle ({f.worker_cores:.1f} cores in all)"
    return "none seen"


def input_pressure(f: Features) -> list[Evidence]:
    """The host figures that say the input pipeline is working flat out."""
    out = []
    if f.worker_cpu_mean is not None and f.worker_cpu_mean >= T.WORKER_BUSY_PCT:
        out.append(
            ev("dataloader_worker_cpu", f.worker_cpu_mean, T.WORKER_BUSY_PCT, _helpers_text(f))
        )
    if f.iowait_median is not None and f.iowait_median >= T.IOWAIT_PCT:
        out.append(
            ev(
                "iowait",
                f.iowait_median,
                T.IOWAIT_PCT,
                f"iowait {f.iowait_median:.1f} % (median, {T.HOST_RECENT_S * f.tick_s:.0f} s)",
            )
        )
    if f.io_pressure_median is not None and f.io_pressure_median >= T.IO_PRESSURE_PCT:
        out.append(
            ev(
                "io_pressure",
                f.io_pressure_median,
                T.IO_PRESSURE_PCT,
                f"tasks stalled on I/O {f.io_pressure_median:.0f} % of the time "
                "(/proc/pressure/io)",
            )
        )
    starved = starved_loaders(f)
    if starved is not None:
        out.append(ev("host_cpu", f.host_cpu_median, T.HOST_CPU_SATURATED_PCT, starved))
    return out


def starved_loaders(f: Features) -> str | None:
    """A saturated host as the job's input pressure, in words; None where it is not one.

    The machine's CPU is the job's input pressure only where the job's loaders work and find
    no core free, or where the job's own CPU cannot be told from the machine's (no figure of
    its processes). Other processes' load beside a job whose helpers idle (a job that spins on
    host syncs) is not this job's input: it is its own finding (`alerts`: host_cpu)."""
    host = f.host_cpu_median
    if host is None or host < T.HOST_CPU_SATURATED_PCT:
        return None
    text = f"host CPU {host:.0f} % busy across {f.cpu_count} cores"
    if f.job_cpu_pct is None:
        return text + " (the job's own share cannot be seen)"
    if f.worker_cpu_mean is None or f.worker_cpu_mean < T.WORKERS_IDLE_PCT:
        return None
    return (
        f"{text}, {host_figures_text(f)}: the job's {f.worker_count} loaders "
        f"({f.worker_cpu_mean:.0f} % CPU each) find no core free"
    )


def host_figures_text(f: Features) -> str:
    """ "other processes 80 %, the job's 17 %": whose load the machine's CPU is."""
    if f.others_cpu_pct is None or f.job_cpu_pct is None:
        return "whose load unseen"
    return f"other processes {f.others_cpu_pct:.0f} %, the job's {f.job_cpu_pct:.0f} %"


def host_cpu_text(f: Features) -> str:
    """ "host CPU 30 %", with whose load it is where the machine is busy."""
    host = f.host_cpu_median
    if host is None or host < T.HOST_CPU_SATURATED_PCT or f.others_cpu_pct is None:
        return f"host CPU {pct(host)}"
    return f"host CPU {pct(host)} ({host_figures_text(f)})"


def gap_evidence(f: Features) -> Evidence:
    how = "the driver's 1/6 s samples" if f.subsecond else "1 s busy time"
    return ev(
        "gpu_idle_share",
        100 * f.idle_share,
        100 * T.WAIT_SHARE,
        f"GPUs idle {as_pct(f.idle_share)} of the time over {f.recent_s:.0f} s (from {how}), "
        f"gaps in {as_pct(f.gap_fraction)} of samples; 1 s busy time median "
        f"{pct(f.util_median)}, p95 {pct(f.util_p95)}",
    )


def input_pipeline(f: Features) -> Verdict:
    pressure = input_pressure(f)
    if not f.gappy:
        text = _not_waiting(f)
    elif "threads" not in f.available and not pressure:
        text = "no thread data to see the loaders, and iowait and host CPU are low"
    else:
        text = (
            f"input keeps up: the job's helpers {_helpers_cpu(f)}, iowait "
            f"{pct(f.iowait_median)}, {host_cpu_text(f)}"
        )
    conf = min(T.CONF_INPUT_MAX, T.CONF_INPUT_BASE + T.CONF_INPUT_PER_FIGURE * len(pressure))
    if f.workers_named:
        conf = min(T.CONF_INPUT_MAX, conf + T.CONF_INPUT_PER_FIGURE)
    against = ev("dataloader_worker_cpu", f.worker_cpu_mean, T.WORKER_BUSY_PCT, text)
    # With no thread data only host-wide figures can show pressure: the class stays open.
    undecided = f.gappy and not pressure and "threads" not in f.available
    return Verdict(
        f.gappy and bool(pressure),
        conf,
        (gap_evidence(f), *pressure),
        against,
        ("util", "threads", "host"),
        undecided=undecided,
    )


def synchronization(f: Features) -> Verdict:
    spin = f.main_thread_cpu is not None and f.main_thread_cpu >= T.MAIN_SPIN_PCT
    loaders_idle = f.worker_cpu_mean is None or f.worker_cpu_mean < T.WORKERS_IDLE_PCT
    no_input = not input_pressure(f)
    blind = "threads" not in f.available or f.main_thread_cpu is None
    out = [gap_evidence(f)]
    if f.main_thread_cpu is not None:
        out.append(
            ev(
                "main_thread_cpu",
                f.main_thread_cpu,
                T.MAIN_SPIN_PCT,
                f"main thread ({f.main_thread_name or '?'}) at {f.main_thread_cpu:.0f} % of a "
                "core (median over the job's "
                f"processes): it spins waiting on the GPU; the job's helpers: {_helpers_cpu(f)}",
            )
        )
    out.append(
        ev(
            "iowait",
            f.iowait_median,
            T.IOWAIT_PCT,
            f"no input pressure: iowait {pct(f.iowait_median)}, {host_cpu_text(f)}",
        )
    )
    if not f.gappy:
        text = _not_waiting(f)
    elif not no_input:
        text = "the gaps come with input pressure (see input pipeline)"
    elif blind:
        text = "no thread data: whether the main thread spins on the GPU cannot be seen"
    else:
        text = f"no host thread spinning: main thread at {pct(f.main_thread_cpu)} of a core"
    fires = f.gappy and no_input and loaders_idle and spin and not blind
    against = ev("main_thread_cpu", f.main_thread_cpu, T.MAIN_SPIN_PCT, text)
    undecided = f.gappy and no_input and blind
    return Verdict(
        fires, T.CONF_SYNC_SPIN, tuple(out), against, ("util", "threads"), undecided=undecided
    )


LAUNCH_BOUND = "launch_bound"


def launch_bound(f: Features) -> Verdict | None:
    """Synchronization's other form: the GPU waits on the host's next launch, not on a sync.

    Busy time counts a GPU busy while any kernel is resident, so many small kernels launched
    back to back read ~100 % busy while a few SMs work (SM activity low, no unit near its
    roof) and the thread that launches them runs flat out: the step is the host's launch rate
    (small batches, eager-mode PyTorch, an unfused optimizer). None where the window does not
    show that shape; undecided where it does but thread data is missing (the spinning launcher
    cannot be seen, and absent evidence never votes)."""
    busy = f.busy_mean
    if "gpm" not in f.available or f.gappy or busy is None or busy < T.LAUNCH_BUSY_PCT:
        return None
    sm = f.sm_median
    near = max(f.dram_share or 0.0, f.math_share or 0.0) >= T.ROOF_SHARE_PCT
    if sm is None or sm >= T.LAUNCH_SM_PCT or near:
        return None
    blind = "threads" not in f.available or f.main_thread_cpu is None
    no_input = not input_pressure(f)
    loaders_idle = f.worker_cpu_mean is None or f.worker_cpu_mean < T.WORKERS_IDLE_PCT
    spin = not blind and (f.main_thread_cpu or 0.0) >= T.MAIN_SPIN_PCT
    fires = spin and loaders_idle and no_input
    undecided = blind and no_input
    if not (fires or undecided):
        return None
    shape = ev(
        "sm_util",
        sm,
        T.LAUNCH_SM_PCT,
        f"launch-bound: GPU busy {pct(busy)} of the time but SMs active only {pct(sm)} "
        f"(GPU counters, median of the last {f.recent_s:.0f} s; {_roofs(f)}): many small "
        "kernels, each a launch from the host",
    )
    main = ev(
        "main_thread_cpu",
        f.main_thread_cpu,
        T.MAIN_SPIN_PCT,
        f"the launching thread ({f.main_thread_name or 'main'}) at {pct(f.main_thread_cpu)} of "
        f"a core: the host issues kernels as fast as it can; the job's helpers {_helpers_cpu(f)}",
    )
    against = ev(
        "sm_util",
        sm,
        T.LAUNCH_SM_PCT,
        f"GPU busy {pct(busy)} but SMs active only {pct(sm)}: small kernels; without thread "
        "data whether the host's launches hold them back cannot be seen"
        if undecided
        else f"launch-bound: SMs active only {pct(sm)} while busy {pct(busy)}",
    )
    return Verdict(
        fires,
        T.CONF_LAUNCH,
        (shape, main) if not blind else (shape,),
        against,
        ("gpm", "threads"),
        undecided=undecided,
        finding=LAUNCH_BOUND,
    )


def _roofs(f: Features) -> str:
    return (
        f"{f.math_pipe or 'math'} pipes {pct(f.math_median)} of cycles ({pct(f.math_share)} "
        f"of the most they can do), DRAM {pct(f.dram_median)} ({pct(f.dram_share)} of the most "
        f"it can move), SM "
        f"active {pct(f.sm_median)}"
    )


def bandwidth(f: Features) -> Verdict:
    """DRAM is the unit nearest its own peak (GPM), or the memory controller is busy (no GPM)."""
    busy = not f.gappy
    if "gpm" in f.available:
        dram, math = f.dram_share, f.math_share
        near = dram is not None and dram >= T.ROOF_SHARE_PCT
        fires = busy and near
        out = (
            ev(
                "dram_share",
                dram,
                T.ROOF_SHARE_PCT,
                f"DRAM bandwidth {pct(f.dram_median)} of cycles (GPU counters): {pct(dram)} of the "
                f"most it can move, vs {pct(math)} for the {f.math_pipe or 'math'} pipes",
            ),
            ev(
                "sm_occupancy",
                f.occupancy_median,
                None,
                f"SM active {pct(f.sm_median)}, occupancy {pct(f.occupancy_median)}",
            ),
        )
        if not busy:
            text = f"the GPU waits {as_pct(f.idle_share)} of the time: kernels are not the limit"
        else:
            text = (
                f"DRAM at {pct(dram)} of the most it can move, under {T.ROOF_SHARE_PCT:.0f} %"
                f": {_roofs(f)}"
            )
        against = ev("dram_share", dram, T.ROOF_SHARE_PCT, text)
        return Verdict(fires, T.CONF_GPM, out, against, ("gpm",), share=dram)
    share = f.memctl_median
    fires = busy and (share or 0) >= T.MEMCTL_BW_PCT
    out = (
        ev(
            "memctl_util",
            share,
            T.MEMCTL_BW_PCT,
            f"memory controller busy {pct(share)} of the time (no GPU counters: a weak proxy for "
            "bandwidth)",
        ),
    )
    text = (
        "neither GPU counters (GPM) nor memory-controller figures reported: bandwidth cannot "
        "be judged"
        if share is None
        else f"memory controller busy {pct(share)} of the time, under {T.MEMCTL_BW_PCT:.0f} %"
    )
    against = ev("memctl_util", share, T.MEMCTL_BW_PCT, text)
    return Verdict(fires, T.CONF_FALLBACK, out, against, ("gpm",), share=share)


def compute(f: Features) -> Verdict:
    clocks = (
        f"power {pct(f.power_pct_median)} of the limit, SM clock {pct(f.clock_pct_median)} of max"
    )
    if f.thermal_fraction >= T.THROTTLE_FRACTION:
        clocks += f", held down by thermal slowdown in {f.thermal_fraction:.0%} of busy samples"
    elif f.power_cap_fraction >= T.THROTTLE_FRACTION:
        clocks += f", held by the power cap in {f.power_cap_fraction:.0%} of busy samples"
    busy = not f.gappy
    if "gpm" in f.available:
        math = f.math_share
        near = math is not None and math >= T.ROOF_SHARE_PCT
        dram_near = (f.dram_share or 0) >= T.ROOF_SHARE_PCT
        # SMs resident with no unit near its roof: latency- or issue-bound kernels.
        issue = (f.sm_median or 0) >= T.SM_ISSUE_BOUND_PCT and not dram_near
        fires = busy and (near or issue)
        out = (
            ev(
                "math_share",
                math,
                T.ROOF_SHARE_PCT,
                f"{f.math_pipe or 'math'} pipes active {pct(f.math_median)} of cycles (GPU "
                f"counters, median of the last {f.recent_s:.0f} s): {pct(math)} of the most they "
                f"can do, vs "
                f"{pct(f.dram_share)} for DRAM; SM active {pct(f.sm_median)}"
                + ("" if near else ", no unit near its limit: latency- or issue-bound kernels"),
            ),
            ev(
                "util_gpu",
                f.util_median,
                T.BUSY_UTIL_PCT,
                f"GPU busy {pct(f.util_median)}, idle {as_pct(f.idle_share)} of the time: input "
                "and host keep up",
            ),
            ev("power_pct", f.power_pct_median, None, clocks),
        )
        if not busy:
            text = f"the GPU waits {as_pct(f.idle_share)} of the time: kernels are not the limit"
        else:
            text = (
                f"math pipes at {pct(math)} of the most they can do, under "
                f"{T.ROOF_SHARE_PCT:.0f} %: " + _roofs(f)
            )
        against = ev("math_share", math, T.ROOF_SHARE_PCT, text)
        conf = T.CONF_GPM if near else T.CONF_ISSUE_BOUND
        share = math if near else f.sm_median
        return Verdict(fires, conf, out, against, ("gpm",), share=share)
    # Without GPM: busy time says kernels run, power says whether they work the math units.
    util = f.util_median if "util" in f.available else None
    throttled = f.thermal_fraction >= T.THROTTLE_FRACTION or (
        f.power_cap_fraction >= T.THROTTLE_FRACTION
    )
    strong = (f.power_pct_median or 0) >= T.POWER_COMPUTE_PCT or throttled
    fires = busy and strong and (util is None or util >= T.BUSY_UTIL_PCT)
    out = (
        ev(
            "power_pct",
            f.power_pct_median,
            T.POWER_COMPUTE_PCT,
            clocks + " (no GPU counters: judged from power and clocks)",
        ),
        ev(
            "util_gpu",
            util,
            T.BUSY_UTIL_PCT,
            f"GPU busy {pct(util)} (busy time alone does not prove compute)"
            if util is not None
            else "per-GPU busy time not reported (MIG mode or an unsupported field)",
        ),
    )
    if f.power_pct_median is None:
        text = "no GPU counters and no power figure: compute cannot be judged"
    elif strong:
        text = f"busy time only {pct(util)}: the GPU waits more than it computes"
    else:
        text = (
            f"busy {pct(util)} at only {pct(f.power_pct_median)} of the power limit: the "
            "math units are not the limit"
        )
    against = ev("power_pct", f.power_pct_median, T.POWER_COMPUTE_PCT, text)
    conf = T.CONF_FALLBACK if util is not None else T.CONF_FALLBACK_NO_UTIL
    return Verdict(fires, conf, out, against, ("gpm", "util"), share=f.power_pct_median)
