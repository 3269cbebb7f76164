"""The classifier's rules on hand-built snapshot windows: one figure changed at a time."""

from __future__ import annotations

import json
from dataclasses import replace

from gputop_diag.diagnose import thresholds as T
from gputop_diag.diagnose.classify import classify, judge
from gputop_diag.diagnose.render import render_text, to_json
from gputop_diag.diagnose.types import BOTTLENECK_CLASSES
from gputop_diag.model import (
    GIB,
    ChildInfo,
    CollectorError,
    GpmMetrics,
    GpuProcess,
    GpuState,
    GpuStatic,
    HostState,
    OomKill,
    ProcessInfo,
    SchedulerEvidence,
    Snapshot,
    SystemInfo,
    ThreadInfo,
    XidEvent,
)

T0 = 1_768_471_200.0  # 2026-01-15T10:00:00Z
MEM = 80 * GIB
COMPUTE = dict(util=99, sm=89, tensor=67, dram=37, occ=46, memctl=42, power=0.9)
IDLE = dict(util=0, sm=0, tensor=0, dram=0, occ=0, memctl=0, power=0.1)


def gpu(
    i: int,
    *,
    gpm: bool = True,
    mem_pct: float = 70.0,
    nvlink=9e6,
    pcie=180_000,
    reasons=(),
    clock=0.98,
    lost=False,
    **fig,
) -> GpuState:
    f = {**COMPUTE, **fig}
    static = GpuStatic(
        index=i,
        name="NVIDIA H100 80GB HBM3",
        memory_total_bytes=MEM,
        power_limit_w=700.0,
        max_sm_clock_mhz=1980,
        gpm_supported=gpm,
        nvlink_supported=True,
    )
    reserved = 470 * 2**20  # total = reserved + used + free; mem_pct: of all but the reserve
    used = int((MEM - reserved) * mem_pct / 100)
    return GpuState(
        index=i,
        static=static,
        lost=lost,
        mem_total_bytes=MEM,
        mem_used_bytes=used,
        mem_free_bytes=MEM - reserved - used,
        mem_reserved_bytes=reserved,
        util_gpu_pct=f["util"],
        util_mem_pct=f["memctl"],
        power_w=f["power"] * 700.0,
        sm_clock_mhz=int(clock * 1980),
        clock_event_reasons=tuple(reasons) + (("gpu_idle",) if f["util"] < 5 else ()),
        nvlink_tx_kib_s=nvlink,
        nvlink_rx_kib_s=nvlink,
        pcie_tx_kbps=pcie,
        pcie_rx_kbps=pcie,
        gpm=GpmMetrics(
            sm_util_pct=f["sm"],
            sm_occupancy_pct=f["occ"],
            dram_bw_util_pct=f["dram"],
            tensor_util_pct=f["tensor"],
        )
        if gpm
        else None,
    )


def proc(pid: int, gpu_index: int, main_cpu: float, worker_cpu: float, workers: int = 4):
    info = ProcessInfo(
        pid=pid,
        name="pt_main_thread",
        user="alice",
        cpu_pct=main_cpu,
        busiest_threads=(ThreadInfo(pid, "pt_main_thread", main_cpu),),
        children=tuple(
            ChildInfo(pid + 1 + k, "pt_data_worker", worker_cpu) for k in range(workers)
        ),
    )
    return GpuProcess(
        pid=pid, gpu_index=gpu_index, kind="compute", used_memory_bytes=40 * GIB
    ), info


def snap(
    k: int,
    gpus,
    *,
    main_cpu=60.0,
    worker_cpu=20.0,
    cpu=20.0,
    iowait=0.5,
    procs=True,
    xids=(),
    errors=(),
) -> Snapshot:
    pairs = (
        [proc(41200 + 10 * g.index, g.index, main_cpu, worker_cpu) for g in gpus] if procs else []
    )
    return Snapshot(
        timestamp=T0 + k,
        system=SystemInfo(hostname="node", gpu_count=len(gpus)),
        gpus=tuple(gpus),
        host=HostState(cpu_count=32, cpu_pct=cpu, iowait_pct=iowait),
        gpu_processes=tuple(p for p, _ in pairs),
        processes=tuple(i for _, i in pairs),
        xid_events=tuple(xids),
        errors=tuple(errors),
    )


def window(n=30, gpus=2, per_gpu=None, **host):
    """n snapshots at 1 s; per_gpu(k, i) gives the GPU's figures at tick k."""
    per_gpu = per_gpu or (lambda k, i: {})
    return [snap(k, [gpu(i, **per_gpu(k, i)) for i in range(gpus)], **host) for k in range(n)]


def sawtooth(k, i, period=8, busy=3, offset=True):
    phase = (k + (2 * i if offset else 0)) % period
    return {} if phase < busy else dict(IDLE)


def test_steady_busy_gpu_with_high_sm_activity_is_compute():
    d = judge(window())
    assert d.primary == "compute"
    assert d.scope_gpus == (0, 1)
    assert "SM active 89 %" in d.evidence[0].text
    assert "tensor pipes active 67 %" in d.evidence[0].text
    assert {r.cls for r in d.ruled_out} == set(BOTTLENECK_CLASSES) - {"compute"}


def test_busy_time_alone_never_proves_compute():
    # 100 % busy time with the SMs nearly empty (small kernels): not compute.
    d = judge(window(per_gpu=lambda k, i: dict(util=100, sm=25, tensor=2, dram=10)))
    assert d.primary == "balanced"
    compute = next(r for r in d.ruled_out if r.cls == "compute")
    assert "SM active 25 %" in compute.evidence.text and "under 65 %" in compute.evidence.text
    # Without GPM: busy 100 % but at a fifth of the power limit is not compute either.
    d = judge(window(per_gpu=lambda k, i: dict(util=100, power=0.2, memctl=10, gpm=False)))
    assert d.primary == "balanced"


def test_without_gpm_compute_is_judged_from_power_at_lower_confidence():
    full = judge(window())
    d = judge(window(per_gpu=lambda k, i: dict(gpm=False)))
    assert d.primary == "compute"
    assert d.confidence < full.confidence
    assert "SM, tensor and DRAM activity (GPM counters)" in d.missing_evidence
    assert any("dcgmi dmon" in c for c in d.checks)


def test_dram_bound_with_idle_tensor_pipes_is_bandwidth():
    d = judge(window(per_gpu=lambda k, i: dict(sm=82, tensor=7, dram=87, memctl=93)))
    assert d.primary == "bandwidth" and "DRAM bandwidth 87 %" in d.evidence[0].text
    no_gpm = judge(window(per_gpu=lambda k, i: dict(memctl=93, gpm=False)))
    assert no_gpm.primary == "bandwidth" and no_gpm.confidence < d.confidence


def test_gaps_with_busy_loaders_and_iowait_are_input_pipeline():
    d = judge(window(per_gpu=sawtooth, worker_cpu=97.0, iowait=22.0, main_cpu=35.0))
    assert d.primary == "input_pipeline"
    texts = " | ".join(e.text for e in d.evidence)
    assert "at 97 % CPU each" in texts and "iowait 22.0 %" in texts
    assert "PyTorch DataLoader" in texts


def test_gaps_with_one_spinning_thread_and_idle_loaders_are_synchronization():
    d = judge(window(per_gpu=sawtooth, worker_cpu=3.0, main_cpu=99.0))
    assert d.primary == "synchronization"
    assert any("py-spy dump --pid 412" in c for c in d.checks)
    # The same gaps with the main thread at a third of a core: no verdict for sync.
    d = judge(window(per_gpu=sawtooth, worker_cpu=3.0, main_cpu=30.0))
    assert d.primary != "synchronization"


def _dips(k, i, link="nvlink"):
    if k % 6 < 4:
        return {}
    return dict(
        util=62, sm=14, tensor=1, dram=22, power=0.42, **{link: 2.6e8 if link == "nvlink" else 5e6}
    )


def test_dips_together_with_nvlink_traffic_are_communication():
    d = judge(window(gpus=4, per_gpu=_dips))
    assert d.primary == "communication"
    assert "NVLink" in d.evidence[1].text


def test_communication_over_pcie_and_without_counters():
    pcie = judge(window(gpus=4, per_gpu=lambda k, i: {**_dips(k, i, "pcie"), "nvlink": None}))
    assert pcie.primary == "communication"
    assert any("PCIe" in e.text for e in pcie.evidence)
    # Without NVLink counters the shape alone does not vote: the verdict stays open and says
    # what is missing and how to get it.
    blind = judge(window(gpus=4, per_gpu=lambda k, i: {**_dips(k, i), "nvlink": None}))
    assert blind.primary == "undetermined" and blind.confidence == 0.0
    assert "NVLink throughput" in blind.missing_evidence
    assert any("nvlink" in c.lower() for c in blind.checks)


def test_gaps_that_do_not_line_up_across_gpus_are_not_communication():
    def staggered(k, i):  # each GPU idles 2 s of 8, each at its own time
        return sawtooth(k, i, busy=6)

    d = judge(window(gpus=4, per_gpu=staggered, worker_cpu=3.0, main_cpu=99.0))
    comm = next(r for r in d.ruled_out if r.cls == "communication")
    assert d.primary == "synchronization"
    assert comm.evidence.text == "the GPUs dip together in none of the samples"
    # gaps that do line up but with a quiet interconnect are not communication either
    d = judge(window(gpus=4, per_gpu=sawtooth, worker_cpu=3.0, main_cpu=99.0))
    comm = next(r for r in d.ruled_out if r.cls == "communication")
    assert d.primary == "synchronization" and "interconnect quiet" in comm.evidence.text


def test_memory_near_the_limit_is_capacity_and_names_the_holders():
    d = judge(window(per_gpu=lambda k, i: dict(mem_pct=98.0 if i == 0 else 60.0)))
    assert d.primary == "capacity" and d.scope_gpus == (0,)
    assert "GPU 0 memory 98.0 % used" in d.evidence[0].text and "pid 41200" in d.evidence[0].text
    assert any("2·L·H·T·d_head·b" in c for c in d.checks)
    # compute fires too; the ruled-out line says why capacity comes first
    compute = next(r for r in d.ruled_out if r.cls == "compute")
    assert "capacity comes first" in compute.evidence.text


def test_memory_growing_every_step_is_capacity_with_an_alert():
    d = judge(window(n=60, per_gpu=lambda k, i: dict(mem_pct=50 + 0.05 * k)))
    assert d.primary == "capacity"
    assert "grows" in d.evidence[0].text
    assert any(a.kind == "memory_growth" for a in d.alerts)
    flat = judge(window(n=60))
    assert flat.primary == "compute" and not any(a.kind == "memory_growth" for a in flat.alerts)


def test_a_kernel_oom_kill_is_a_host_memory_alert_not_capacity():
    # The kernel's OOM killer acts on host RAM; it never sees CUDA out-of-memory.
    kill = OomKill(T0 + 20, 41201, "pt_data_worker")
    d = classify(window(), None, (), [kill])
    assert d.primary == "compute"
    alert = next(a for a in d.alerts if a.kind == "host_oom")
    assert "pid 41201 (pt_data_worker)" in alert.text and "not GPU memory" in alert.text
    assert not any("OOM" in e.text for e in d.evidence)
    old = OomKill(T0 - 3600, 41201, "pt_data_worker")  # before the window: not evidence now
    assert classify(window(), None, (), [old]).primary == "compute"


PENDING = SchedulerEvidence(
    "48213",
    "PENDING",
    "Resources",
    wait_s=7260.0,
    time_limit_s=172800.0,
    time_used_s=0.0,
    name="llm-pretrain",
)


def test_a_pending_job_while_the_gpus_idle_is_the_scheduler():
    idle = window(per_gpu=lambda k, i: dict(IDLE), procs=False)
    assert judge(idle).primary == "idle"
    d = judge(idle, [PENDING])
    assert d.primary == "scheduler" and d.scope_job == "48213"
    assert "PENDING for 2.0 h, reason Resources" in d.evidence[0].text
    assert any("squeue -j 48213 -o %r" in c for c in d.checks)
    # A pending job does not hide a busy GPU's bottleneck.
    busy = judge(window(), [PENDING])
    assert busy.primary == "compute"
    assert (
        "busy with other work"
        in next(r for r in busy.ruled_out if r.cls == "scheduler").evidence.text
    )


def test_a_job_near_its_time_limit_is_an_alert():
    ending = SchedulerEvidence("77", "RUNNING", None, 60.0, 3600.0, 3300.0)
    d = judge(window(), [ending])
    assert d.primary == "compute" and d.scope_job == "pid 41200"
    assert any(a.kind == "time_limit" and "5 min" in a.text for a in d.alerts)


def test_too_few_samples_no_driver_and_all_gpus_lost_are_insufficient_data():
    assert judge([]).primary == "insufficient_data"
    assert judge(window(n=3)).primary == "insufficient_data"
    err = CollectorError("nvml", "no NVIDIA driver: libnvidia-ml.so.1 not found", "install it")
    no_driver = [replace(s, gpus=(), errors=(err,)) for s in window()]
    d = judge(no_driver)
    assert d.primary == "insufficient_data" and "libnvidia-ml" in d.evidence[0].text
    assert all("not judged" in r.evidence.text for r in d.ruled_out if r.cls != "scheduler")
    lost = window(per_gpu=lambda k, i: dict(lost=True))
    assert judge(lost).primary == "insufficient_data"


def test_alerts_for_lost_gpus_xids_and_throttling():
    xid = XidEvent(T0 + 10, 79, gpu_index=1, message="GPU has fallen off the bus.")
    w = window(per_gpu=lambda k, i: dict(lost=i == 1 and k >= 10, reasons=("sw_thermal",)))
    w[10] = replace(w[10], xid_events=(xid,))
    d = judge(w)
    kinds = {a.kind for a in d.alerts}
    assert {"gpu_lost", "xid", "thermal"} <= kinds
    assert d.primary == "compute" and d.scope_gpus == (0,)
    assert any("Xid 79" in a.text and a.severity == "critical" for a in d.alerts)


def test_one_outlier_sample_does_not_flip_and_a_real_change_does():
    w = window(n=40)
    d = None
    for k in range(5, 41):
        d = classify(w[:k], d)
    assert d.primary == "compute"
    # one tick where every GPU reads idle
    outlier = snap(40, [gpu(i, **IDLE) for i in range(2)])
    held = classify([*w, outlier], d)
    assert held.primary == "compute" and held.candidate == "compute"
    # a real change: memory jumps to the limit and stays; it takes HYSTERESIS_TICKS ticks
    full = [snap(41 + k, [gpu(i, mem_pct=98.0) for i in range(2)]) for k in range(5)]
    seq, d2, flips = [*w, outlier], held, []
    for s in full:
        seq.append(s)
        d2 = classify(seq, d2)
        flips.append(d2.primary)
    assert flips[: T.HYSTERESIS_TICKS - 1] == ["compute"] * (T.HYSTERESIS_TICKS - 1)
    assert flips[T.HYSTERESIS_TICKS - 1 :] == ["capacity"] * (6 - T.HYSTERESIS_TICKS)
    # while held, the text says a change may be coming
    pending = classify([*w, full[0]], d)
    assert pending.primary == "compute" and pending.candidate == "capacity"
    assert "changing? capacity" in render_text(pending)


def test_classify_is_pure():
    w = window()
    assert classify(w) == classify(w)
    before = list(w)
    classify(w, judge(w), [PENDING], [OomKill(None, 1, "x")])
    assert w == before


def test_missing_process_data_is_named_and_lowers_confidence():
    w = window(per_gpu=sawtooth, worker_cpu=97.0, iowait=22.0, main_cpu=35.0)
    full = judge(w)
    bare = judge([replace(s, processes=()) for s in w])
    assert bare.primary == "input_pipeline" and bare.confidence < full.confidence
    assert "per-process thread and dataloader data" in bare.missing_evidence
    nothing = judge([replace(s, processes=(), gpu_processes=()) for s in w])
    assert "GPU process list" in nothing.missing_evidence


def test_json_is_serialisable_and_text_has_every_part():
    d = judge(window(per_gpu=lambda k, i: dict(reasons=("sw_thermal",))))
    doc = json.loads(json.dumps(to_json(d)))
    assert doc["schema"] == "gputop-diag.diagnosis/1"
    assert doc["primary"] == "compute" and doc["scope"]["gpus"] == [0, 1]
    assert {"metric", "value", "threshold", "unit", "text"} <= set(doc["evidence"][0])
    assert doc["alerts"][0]["kind"] == "thermal"
    text = render_text(d)
    for part in ("Bottleneck: COMPUTE", "Evidence", "Why not:", "Next checks:", "Alerts:"):
        assert part in text


def test_one_failed_nvml_tick_is_a_hiccup_three_are_a_lost_driver():
    err = CollectorError("nvml", "NVML: driver not loaded", "check `lsmod | grep nvidia`")
    w = window(n=30)
    d = None
    for k in range(5, 31):
        d = classify(w[:k], d)
    failed = [replace(s, timestamp=s.timestamp + 30, gpus=(), errors=(err,)) for s in w[:3]]
    one = classify([*w, failed[0]], d)
    assert one.primary == "compute"
    three = classify([*w, *failed], classify([*w, *failed[:2]], one))
    assert three.primary == "insufficient_data" and "driver not loaded" in three.evidence[0].text
    assert any("lsmod" in e.text for e in three.evidence)


def test_the_package_imports_without_textual():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from gputop_diag.diagnose.classify import classify\n"
        "from gputop_diag.diagnose.types import Diagnosis\n"
        "import gputop_diag.commands.diagnose\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
