"""Hand-built windows for the cases the classifier used to get wrong, each with its counter-case
on the other side of the line, so every test here can fail.

Built here, not from the simulator's scenario profiles: figures are chosen to sit close to the
thresholds, and helpers carry names other than PyTorch's.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_diagnose_rules import T0, gpu, snap

from gputop_diag.diagnose.classify import classify, judge
from gputop_diag.diagnose.render import render_text, to_json
from gputop_diag.model import ChildInfo, GpuProcess, OomKill, ProcessInfo, Snapshot, ThreadInfo

BUSY = dict(util=100, sm=93, occ=40, memctl=60, power=0.8)


def steady(n=30, gpus=2, **fig):
    return [snap(k, [gpu(i, **{**BUSY, **fig}) for i in range(gpus)]) for k in range(n)]


# -- each unit against its own roof ------------------------------------------------------------


@pytest.mark.parametrize(
    ("tensor", "dram", "primary", "secondary"),
    [
        (45, 82, "bandwidth", None),  # DRAM saturated, tensor pipes moderately busy
        (33, 78, "bandwidth", None),  # the old rule let tensor > 30 % veto bandwidth
        (20, 50, "compute", None),  # neither near its roof, SMs resident: issue-bound compute
        (70, 80, "bandwidth", "compute"),  # both near their roofs: DRAM 94 % vs math 78 %
        (85, 60, "compute", "bandwidth"),  # math 94 % vs DRAM 71 %
        (80, 30, "compute", None),
    ],
)
def test_the_unit_nearest_its_own_roof_limits(tensor, dram, primary, secondary):
    d = judge(steady(tensor=tensor, dram=dram))
    assert (d.primary, d.secondary) == (primary, secondary), [e.text for e in d.evidence]
    if secondary:
        assert d.secondary_evidence and d.confidence <= 0.7
        assert f"and also: {secondary}" in render_text(d)
        assert to_json(d)["secondary"] == secondary


def test_resident_sms_with_idle_pipes_and_little_traffic_are_not_compute():
    d = judge(steady(sm=60, tensor=20, dram=40))
    assert d.primary == "balanced"


# -- starvation without a fixed shape -----------------------------------------------------------


def job(pid, gpu_index, *, main=40.0, helpers=(), threads=(), denied=False, user="bob"):
    """A GPU process with `helpers` (name, cpu) as child processes and `threads` (name, cpu)."""
    if denied:
        info = ProcessInfo(pid=pid, access_denied=True)
    else:
        info = ProcessInfo(
            pid=pid,
            name="python3",
            user=user,
            cpu_pct=main,
            busiest_threads=(
                ThreadInfo(pid, "python3", main),
                *(ThreadInfo(pid + 100 + k, n, c) for k, (n, c) in enumerate(threads)),
            ),
            children=tuple(ChildInfo(pid + 1 + k, n, c) for k, (n, c) in enumerate(helpers)),
        )
    return GpuProcess(pid=pid, gpu_index=gpu_index, kind="compute", used_memory_bytes=2**34), info


def with_job(window, cpu=30.0, iowait=0.5, **kw):
    out = []
    for s in window:
        pairs = [job(5000 + 10 * g.index, g.index, **kw) for g in s.gpus]
        out.append(
            replace(
                s,
                gpu_processes=tuple(p for p, _ in pairs),
                processes=tuple(i for _, i in pairs),
                host=replace(s.host, cpu_pct=cpu, iowait_pct=iowait),
            )
        )
    return out


def low_amplitude(n=30, gpus=2):
    """Never near 50 % busy: 15-35 %, tiny kernels between long waits."""
    return [
        snap(
            k,
            [
                gpu(i, util=15 + 20 * ((k + i) % 3) / 2, sm=12, tensor=4, dram=6, power=0.3)
                for i in range(gpus)
            ],
        )
        for k in range(n)
    ]


POOL = tuple(("python3", 99.0) for _ in range(6))  # multiprocessing.Pool workers: no loader name


def test_low_amplitude_gpu_with_unnamed_helpers_flat_out_is_input():
    d = judge(with_job(low_amplitude(), helpers=POOL))
    assert d.primary == "input_pipeline", [e.text for e in d.evidence]
    assert any("12 of the job's helper" in e.text for e in d.evidence)
    # the same GPU with the helpers idle: the input pipeline is not the limit
    d = judge(with_job(low_amplitude(), helpers=tuple(("python3", 4.0) for _ in range(6))))
    assert d.primary != "input_pipeline"


def test_loader_threads_in_the_main_process_count_too():
    tf = tuple(("tf_data_private", 92.0) for _ in range(4))
    d = judge(with_job(low_amplitude(), threads=tf))
    assert d.primary == "input_pipeline"
    assert any("tf.data" in e.text for e in d.evidence)


def subsecond(n=30, gpus=2, with_samples=True, tick_util=62.5):
    """Busy 0.5 s of every 0.8 s: the tick figure is a flat ~62 %, the 1/6 s samples are not."""
    out = []
    for k in range(n):
        gs = []
        for i in range(gpus):
            samples = (
                tuple(100.0 if ((k + j / 6.0) % 0.8) < 0.5 else 0.0 for j in range(6))
                if with_samples
                else ()
            )
            g = gpu(i, util=tick_util, sm=55, tensor=40, dram=30, power=0.55)
            gs.append(replace(g, util_samples=samples))
        out.append(snap(k, gs))
    return out


@pytest.mark.parametrize("with_samples", [True, False])
def test_stalls_shorter_than_a_tick_with_busy_loaders_are_input(with_samples):
    loaders = tuple(("pt_data_worker_", 98.0) for _ in range(4))
    d = judge(with_job(subsecond(with_samples=with_samples), helpers=loaders))
    assert d.primary == "input_pipeline", [e.text for e in d.evidence]
    assert ("1/6 s samples" in d.evidence[0].text) is with_samples


def test_subsecond_samples_decide_when_the_tick_figure_hides_the_gaps():
    # A driver whose 1 s figure reads 90 % while its 1/6 s samples show a third of the time idle.
    loaders = tuple(("python", 97.0) for _ in range(4))
    hidden = with_job(subsecond(tick_util=90.0), helpers=loaders)
    assert judge(hidden).primary == "input_pipeline"
    flat = [replace(s, gpus=tuple(replace(g, util_samples=()) for g in s.gpus)) for s in hidden]
    assert judge(flat).primary != "input_pipeline"


def test_gaps_with_the_main_thread_spinning_and_helpers_idle_are_synchronization():
    d = judge(with_job(subsecond(), main=99.0, helpers=(("python3", 3.0),)))
    assert d.primary == "synchronization"
    d = judge(with_job(subsecond(), main=70.0, helpers=(("python3", 3.0),)))
    assert d.primary != "synchronization"


@pytest.mark.parametrize(
    ("runtime_thread", "primary"),
    [
        ("NCCL Progress 1", "synchronization"),  # NCCL's proxy busy-polls: not a loader
        ("cuda-EvtHandlr", "synchronization"),
        ("pt_autograd_0", "synchronization"),
        ("decode", "input_pipeline"),  # an unnamed-by-convention thread of the job's own
    ],
)
def test_the_gpu_runtimes_own_threads_are_not_input_helpers(runtime_thread, primary):
    d = judge(with_job(subsecond(), main=99.0, threads=((runtime_thread, 100.0),)))
    assert d.primary == primary, [e.text for e in d.evidence]


def stall_then_busy(n=30, stall=20, rise_gib=0.0, new_pid=False):
    """Idle for `stall` ticks, then busy; loaders flat out throughout. The judged last 15 s open
    with 5 idle ticks. With `rise_gib` the GPU loads its weights in the 6 ticks before its first
    kernel (a job starting); without it the idle run is a stall."""
    w = []
    for k in range(n):
        busy = k >= stall
        loaded = min(1.0, max(0.0, (k - stall + 6) / 6)) if rise_gib else 1.0
        gs = [
            gpu(
                i,
                util=97 if busy else 0,
                sm=88 if busy else 0,
                tensor=70 if busy else 0,
                power=0.85 if busy else 0.1,
                mem_pct=20 + 50 * loaded if rise_gib else 70,
            )
            for i in range(2)
        ]
        w.append(snap(k, gs))
    w = with_job(w, helpers=POOL)
    if new_pid:  # the job's processes appear with its first kernels
        w = [s if k >= stall - 2 else replace(s, gpu_processes=()) for k, s in enumerate(w)]
    return w


def test_a_stall_at_the_start_of_the_window_is_a_stall_not_a_ramp_up():
    d = judge(stall_then_busy())
    assert d.primary == "input_pipeline", [e.text for e in d.evidence]


@pytest.mark.parametrize("how", [dict(rise_gib=40.0), dict(new_pid=True)])
def test_an_idle_run_while_the_job_starts_is_ramp_up(how):
    d = judge(stall_then_busy(**how))
    assert d.primary == "compute", [e.text for e in d.evidence]


def test_one_shared_dip_without_interconnect_counters_leaves_compute_standing():
    def fig(k, i):
        return dict(util=100, sm=20 if k == 20 else 90, tensor=20 if k == 20 else 80)

    w = [
        snap(k, [gpu(i, nvlink=None, pcie=None, **fig(k, i)) for i in range(4)]) for k in range(30)
    ]
    d = judge(w)
    assert d.primary == "compute" and d.confidence > 0.5, [e.text for e in d.evidence]


# -- absent evidence never votes ----------------------------------------------------------------


def test_missing_thread_data_does_not_vote_for_synchronization():
    d = judge(with_job(subsecond(), denied=True))
    assert d.primary == "undetermined" and not d.has_confidence
    assert "per-process thread and dataloader data" in d.missing_evidence
    assert "no verdict" in render_text(d) and to_json(d)["confidence"] is None
    # host-wide figures can still show input pressure without any thread data
    d = judge(with_job(subsecond(), denied=True, iowait=25.0))
    assert d.primary == "input_pipeline"


# -- host OOM, memory as a symptom ---------------------------------------------------------------


def test_memory_nearly_full_beside_a_starved_gpu_is_named_a_symptom():
    loaders = tuple(("python3", 95.0) for _ in range(4))
    w = [
        replace(
            s,
            gpus=tuple(
                replace(g, mem_used_bytes=int(0.88 * (g.mem_total_bytes - g.mem_reserved_bytes)))
                for g in s.gpus
            ),
        )
        for s in with_job(low_amplitude(), helpers=loaders)
    ]
    d = judge(w)
    assert d.primary == "input_pipeline"
    assert any("88 % used is not the limit" in e.text for e in d.evidence)
    full = [
        replace(
            s,
            gpus=tuple(
                replace(g, mem_used_bytes=int(0.97 * (g.mem_total_bytes - g.mem_reserved_bytes)))
                for g in s.gpus
            ),
        )
        for s in w
    ]
    assert judge(full).primary == "capacity"


def test_host_oom_travels_in_the_snapshot_and_is_an_alert():
    w = steady(tensor=80, dram=30)
    kill = OomKill(T0 + 10, 5003, "python3", cgroup=True)
    w = [replace(s, kernel_ooms=(kill,), scheduler_jobs=()) for s in w]
    d = classify(w)  # read from the newest snapshot, as a replay does
    assert d.primary == "compute"
    (a,) = [a for a in d.alerts if a.kind == "host_oom"]
    assert "cgroup" in a.text and "not GPU memory" in a.text


# -- hardware faults lead ------------------------------------------------------------------------


def _with_xid(w: list[Snapshot], xid: int, gpu_index: int, remap_failure=False):
    from gputop_diag.model import XidEvent

    out = list(w)
    out[-5] = replace(out[-5], xid_events=(XidEvent(T0 + 25, xid, gpu_index),))
    if remap_failure:
        out = [
            replace(
                s,
                gpus=tuple(
                    replace(g, remap_failure=True) if g.index == gpu_index else g for g in s.gpus
                ),
            )
            for s in out
        ]
    return out


@pytest.mark.parametrize(
    ("xid", "remap", "fault"),
    [
        (79, False, True),
        (48, False, True),
        (94, False, True),
        (63, False, False),
        (64, True, True),
        (13, False, False),
        (31, False, False),
    ],
)
def test_critical_xids_lead_above_the_class(xid, remap, fault):
    d = judge(_with_xid(steady(tensor=80, dram=30), xid, 1, remap))
    assert d.primary == "compute"  # the class is still named
    assert any(a.code == xid for a in d.faults) is fault
    text = render_text(d)
    assert text.startswith("FAULT:") is fault


def test_a_lost_gpu_leads_and_the_rest_are_still_judged():
    w = steady(gpus=3, tensor=80, dram=30)
    w = [
        replace(
            s, gpus=tuple(replace(g, lost=True) if g.index == 2 and k > 20 else g for g in s.gpus)
        )
        for k, s in enumerate(w)
    ]
    d = judge(w)
    assert [a.kind for a in d.faults] == ["gpu_lost"] and d.faults[0].gpus == (2,)
    assert d.primary == "compute" and 2 not in d.scope_gpus
    assert to_json(d)["faults"][0]["gpus"] == [2]


def test_alerts_name_every_gpu_they_apply_to():
    w = steady(gpus=4, tensor=80, dram=30, reasons=("hw_thermal",))
    d = judge(w)
    thermal = next(a for a in d.alerts if a.kind == "thermal")
    assert thermal.gpus == (0, 1, 2, 3) and "GPUs 0, 1, 2, 3" in thermal.text


# -- the verdict flips where the physics says, once ---------------------------------------------


def _flips(values, verdict_of):
    seq = [verdict_of(v) for v in values]
    return seq, sum(a != b for a, b in zip(seq, seq[1:], strict=False))


def test_sweeping_dram_traffic_turns_balanced_into_bandwidth_once():
    seq, flips = _flips(range(30, 95, 5), lambda d: judge(steady(sm=60, tensor=20, dram=d)).primary)
    assert seq[0] == "balanced" and seq[-1] == "bandwidth" and flips == 1, seq
    # the flip sits at the documented roof share (65 % of DRAM's 85 % practical peak)
    assert seq[(55 - 30) // 5] == "balanced" and seq[(60 - 30) // 5] == "bandwidth"


def test_sweeping_helper_cpu_turns_a_waiting_gpu_into_input_once():
    def verdict(cpu):
        return judge(with_job(low_amplitude(), helpers=tuple(("python3", cpu) for _ in range(4))))

    seq, flips = _flips(range(10, 101, 10), lambda c: verdict(c).primary)
    assert seq[0] != "input_pipeline" and seq[-1] == "input_pipeline" and flips == 1, seq


def test_sweeping_the_idle_share_turns_compute_into_a_wait_once():
    loaders = tuple(("python3", 97.0) for _ in range(4))

    def verdict(busy):
        w = [
            snap(
                k,
                [
                    gpu(i, util=busy, sm=busy * 0.9, tensor=busy * 0.85, dram=25, power=0.8)
                    for i in range(2)
                ],
            )
            for k in range(30)
        ]
        return judge(with_job(w, helpers=loaders)).primary

    seq, flips = _flips(range(40, 101, 5), verdict)
    assert seq[0] == "input_pipeline" and seq[-1] == "compute" and flips == 1, seq


# -- MIG: instance memory, and no busy figure at all ------------------------------------------


def mig_window(instance_used_pct, n=30, util=None, gpm=False, power=0.5):
    """One GPU in MIG mode with three 20 GB instances; the job's instance is `instance_used_pct`
    full while the GPU as a whole reads mostly free. MIG mode reports no busy time."""
    from gputop_diag.model import MigInstance

    total = 20 * 2**30
    out = []
    for k in range(n):
        insts = tuple(
            MigInstance(
                parent_index=0,
                mig_index=m,
                gpu_instance_id=m + 1,
                compute_instance_id=0,
                memory_total_bytes=total,
                memory_used_bytes=int(total * (instance_used_pct if m == 1 else 2) / 100),
                name="NVIDIA H100 80GB HBM3 MIG 2g.20gb",
            )
            for m in range(3)
        )
        g = replace(
            gpu(0, gpm=gpm, mem_pct=30.0, power=power),
            util_gpu_pct=util,
            util_mem_pct=None,
            mig_instances=insts,
        )
        s = snap(k, [g])
        procs = tuple(replace(p, gpu_instance_id=2) for p in s.gpu_processes)
        out.append(replace(s, gpu_processes=procs))
    return out


def test_a_full_mig_instance_is_capacity_though_the_gpu_reads_mostly_free():
    d = judge(mig_window(97.0))
    assert d.primary == "capacity", [e.text for e in d.evidence]
    assert "MIG 2g.20gb (instance 2)" in d.evidence[0].text
    assert "pid 41200" in d.evidence[0].text  # the process on that instance holds it
    full = [a for a in d.alerts if a.kind == "memory_full"]
    assert full and full[0].gpus == (0,) and "instance 2" in full[0].text


def test_a_half_full_mig_instance_is_not_capacity():
    assert judge(mig_window(60.0)).primary != "capacity"


def test_without_busy_time_or_gpm_the_window_is_undetermined_not_balanced():
    d = judge(mig_window(60.0))
    assert d.primary == "undetermined" and to_json(d)["confidence"] is None
    assert "cannot be seen" in d.evidence[0].text
    assert any("dcgmi dmon" in e.text for e in d.evidence)


def test_without_busy_time_a_gpu_at_its_power_limit_is_still_compute_at_low_confidence():
    d = judge(mig_window(60.0, power=0.9))
    assert d.primary == "compute" and d.confidence < 0.5


def test_the_same_gpu_with_busy_time_is_judged():
    assert judge(mig_window(60.0, util=99.0, gpm=True)).primary in ("compute", "balanced")


# -- a small steady rise on a nearly full GPU -------------------------------------------------


def growing(start_pct, mib_per_min, n=60, total_gib=24):
    mem = total_gib * 2**30
    w = []
    for k in range(n):
        used = start_pct / 100 * mem + k * mib_per_min / 60 * 2**20
        g = gpu(0, mem_pct=100 * used / mem)
        g = replace(
            g,
            static=replace(g.static, memory_total_bytes=mem),
            mem_total_bytes=mem + g.mem_reserved_bytes,  # the driver's reserve beside `mem`
            mem_used_bytes=int(used),
            mem_free_bytes=int(mem - used),
        )
        w.append(snap(k, [g]))
    return w


@pytest.mark.parametrize(
    ("start", "capacity"),
    [
        # 95 MiB/min on a 24 GiB GPU: full within 30 min from either start, but a minute's
        # window shows a 93 MiB rise, under the 100 MiB that counts on a GPU with room
        (91.0, True),  # at 90 % full the last 2 GiB go: the small rise counts
        (89.0, False),  # under 90 %: the same rise is the allocator warming up
    ],
)
def test_a_small_steady_rise_counts_only_on_a_nearly_full_gpu(start, capacity):
    d = judge(growing(start, 95))
    assert (d.primary == "capacity") is capacity, [e.text for e in d.evidence]
    if capacity:
        assert "grows 9" in d.evidence[0].text and "full in ~2" in d.evidence[0].text
