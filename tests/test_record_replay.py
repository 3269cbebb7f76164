"""Record and replay as a user meets them: faithful files, the same verdict, cut-off and bad
files, sanitized recordings, and the live view playing one."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import io
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest

from gputop_diag import model, sim
from gputop_diag.cli import main
from gputop_diag.model import (
    ChildInfo,
    CollectorError,
    GpmMetrics,
    GpuProcess,
    GpuState,
    GpuStatic,
    HostState,
    JobProcess,
    JobState,
    MigInstance,
    OomKill,
    OutputEvent,
    Owner,
    PressureStall,
    ProcessInfo,
    SchedulerEvidence,
    Snapshot,
    StepStats,
    SystemInfo,
    ThreadInfo,
    XidEvent,
)
from gputop_diag.model.codec import from_jsonable, jsonable
from gputop_diag.model.health import Finding, HealthEvidence, HealthFacts
from gputop_diag.monitor.core import Monitor
from gputop_diag.recording.store import RECORDING_SCHEMA, Recording, RecordingError, read_recording
from gputop_diag.recording.writer import RecordingWriter, write_recording

# -- helpers ---------------------------------------------------------------------------------


def monitored(scenario: str, seconds: float = 20, sources=None) -> list[Snapshot]:
    """The snapshots a Monitor produces over `seconds` of a scenario (slow sources attached)."""
    m = Monitor(sources or sim.build(scenario))
    snaps: list[Snapshot] = []
    m.run_for(seconds, lambda t: snaps.append(t.snapshot))
    return snaps


def assert_identical(a, b, path="snapshot"):
    """Equal, and of the same type all the way down (1 == 1.0 and (1,) != [1] are not enough)."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if dataclasses.is_dataclass(a):
        for f in dataclasses.fields(a):
            assert_identical(getattr(a, f.name), getattr(b, f.name), f"{path}.{f.name}")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_identical(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            assert_identical(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b), path
    else:
        assert a == b, path


def run_main(*argv: str) -> tuple[int, str, str]:
    """`gputop-diag ARGV` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def without_times(doc):
    if isinstance(doc, dict):
        return {k: without_times(v) for k, v in doc.items() if k not in ("timestamp", "time")}
    if isinstance(doc, list):
        return [without_times(v) for v in doc]
    return doc


def text_of(path) -> str:
    data = open(path, "rb").read()
    return (gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data).decode("utf-8")


# -- the codec -------------------------------------------------------------------------------


def every_field_snapshot() -> Snapshot:
    """One snapshot with every dataclass of the model and every field away from its default,
    with the shapes a codec gets wrong: ints in float fields, whole floats, None next to (),
    a dict of PressureStall, fixed-length tuples."""
    static = GpuStatic(
        index=1,
        name="NVIDIA H100 80GB HBM3",
        uuid="GPU-6e53dfa6-3823-e519-c69e-dcab88b2ae5a",
        serial="1654922000000",
        pci_bus_id="00000000:18:00.0",
        minor_number=1,
        memory_total_bytes=85899345920,
        power_limit_w=700,  # an int in a float field stays an int
        max_sm_clock_mhz=1980,
        max_mem_clock_mhz=2619,
        compute_capability=(9, 0),
        mig_mode=False,
        persistence_mode=True,
        compute_mode="exclusive_process",
        pcie_max_gen=5,
        pcie_max_width=16,
        gpm_supported=True,
        nvlink_supported=True,
    )
    gpu = GpuState(
        index=1,
        static=static,
        lost=True,
        mem_total_bytes=85899345920,
        mem_reserved_bytes=536870912,
        mem_used_bytes=42949672960,
        mem_free_bytes=42949672960,
        bar1_total_bytes=2**37,
        bar1_used_bytes=2**20,
        util_gpu_pct=100.0,  # a whole float stays a float
        util_mem_pct=37.5,
        enc_util_pct=0.0,
        dec_util_pct=1e-9,
        power_w=612.3456789012345,
        energy_mj=2**40,
        temperature_c=71,
        fan_speed_pct=43,
        memory_temperature_c=80.5,
        sm_clock_mhz=1755,
        mem_clock_mhz=2619,
        pstate=0,
        clock_event_reasons=("sw_power_cap", "hw_thermal"),
        pcie_tx_kbps=1200,
        pcie_rx_kbps=3400,
        pcie_gen=5,
        pcie_width=16,
        pcie_replay_count=2,
        nvlink_tx_kib_s=1.5e7,
        nvlink_rx_kib_s=0.1 + 0.2,
        ecc_corrected=3,
        ecc_uncorrected=1,
        retired_pages_sbe=4,
        retired_pages_dbe=5,
        retired_pages_pending=True,
        remapped_rows_corr=6,
        remapped_rows_unc=7,
        remap_pending=True,
        remap_failure=True,
        vgpu_licensed=False,
        gpm=GpmMetrics(91.0, 55.5, 33.25, 12.0, 1.0, 2.0, 3.0, 97.5),
        util_samples=(100.0, 0.0, 50, 99.5),
        mig_instances=(
            MigInstance(1, 0, "MIG-1c2d/1/0", 1, 0, 40192 * 2**20, 12 * 2**20, "3g.40gb"),
        ),
    )
    proc = ProcessInfo(
        pid=4242,
        name="python",
        user="alice",
        cmdline=("/home/alice/venv/bin/python", "train.py"),
        cpu_pct=99.9,
        rss_bytes=2**33,
        num_threads=42,
        busiest_threads=(ThreadInfo(4243, "pt_main_thread", 98.0),),
        children=(ChildInfo(4250, "pt_data_worker", 3.0),),
        start_time=1768471100.25,
        cuda_visible_devices="0,1",
        environ_readable=True,
        access_denied=True,
        ppid=4200,
        parent_name="torchrun",
        uid=1001,
        parent_user="alice",
        owner=Owner(
            kind="pod",
            pod_uid="3f1c2a9e-5b7d-4e21-9c0a-8d6f4b2e1a7c",
            pod_namespace="ml-research",
            pod_name="llama-ddp-0",
            qos="burstable",
            container_id="8e1f0d2c" * 8,
            container_runtime="containerd",
            container_name="trainer",
            slurm_job="424242",
            slurm_step="batch",
            unit="kubepods-burstable.slice",
            ns_pid=7,
        ),
    )
    return Snapshot(
        timestamp=1768471200.125,
        system=SystemInfo("gpu-node-07", "570.124.06", "12.570.124.06", 12080, 2),
        gpus=(gpu,),
        host=HostState(
            cpu_count=64,
            cpu_pct=12.5,
            per_cpu_pct=(1.0, 2, 3.5),
            iowait_pct=0.25,
            load_avg=(1.0, 2.5, 3),
            mem_total_bytes=2**40,
            mem_available_bytes=2**39,
            mem_used_bytes=2**38,
            swap_total_bytes=0,
            swap_used_bytes=0,
            disk_read_bytes_s=1.0,
            disk_write_bytes_s=2,
            pressure={
                "cpu": PressureStall(1.5, None, 2.0),
                "io": PressureStall(40.0, 35.5, 30),
            },
        ),
        gpu_processes=(GpuProcess(4242, 1, "compute", 2**30, 1, 0, 88.0, 12.0),),
        processes=(proc, ProcessInfo(pid=4300, cmdline=())),  # () is not None
        xid_events=(
            XidEvent(1768471199.5, 79, 1, "kernel-log", "0000:18:00", 4242, "python", "off"),
        ),
        errors=(CollectorError("nvml", "boom", "retry", gpu_index=1, code="NVMLError_GpuIsLost"),),
        scheduler_jobs=(
            SchedulerEvidence("48213", "PENDING", "Resources", 7260.0, 172800, 0, "llm", "a"),
        ),
        job=JobState(
            target="slurm",
            label="Slurm job 48213",
            root_pids=(4242,),
            running=False,
            exit_code=137,
            exit_signal="SIGKILL",
            processes=(
                JobProcess(
                    4242,
                    1,
                    1,
                    "python",
                    ("python", "train.py"),
                    99.5,
                    2**33,
                    12,
                    (ThreadInfo(4243, "pt_main_thread", 98.0),),
                    "0,1",
                ),
            ),
            log_path="/home/alice/slurm-48213.out",
            output_tail=("step 1 loss 2.0", ""),
            output_lines=2,
            output_events=(OutputEvent("cuda_oom", "CUDA out of memory", 7, 1768471199.0),),
            steps=StepStats("tqdm", 35, 100, (0.5, 0.25), 2.5),
            visible_gpus="0,1",
            slurm=SchedulerEvidence(
                "48213",
                "RUNNING",
                None,
                60.0,
                3600.0,
                30.0,
                "llm",
                "alice",
                1768471000.0,
                1768471060.5,
                "gpu-node-07",
                "gpu",
                8,
                "cpu=8,gres/gpu=8",
                1,
                "0:0",
                "/tmp/o",
            ),
            slurm_stale_s=95.0,
            problem="no output file",
        ),
        kernel_ooms=(
            OomKill(None, 41328, "pt_data_worker", True),
            OomKill(1768471190.5, 41329, "python", False),
        ),
        slow_sources_at=1768471195.0,
        driver_chain=model.DriverChain(
            "550.54.15",
            "open",
            True,
            "550.54.15",
            (
                model.ProcessCuda(
                    52011,
                    "python",
                    "alice",
                    (
                        model.CudaLibrary("cudart", "13.0.96", "pip", True),
                        model.CudaLibrary(
                            "torch_cuda", "2.9.0", "pip", True, ("sm_90", "compute_90")
                        ),
                    ),
                    "torch 2.9.0+cu130",
                    "13.0",
                ),
            ),
            412,
            3,
        ),
        probes=(
            model.ProbeState(
                pid=4242,
                start_ticks=26004500,
                python="3.11.9",
                torch="2.7.1+cu128",
                cuda=True,
                rank=3,
                world=8,
                can_measure=("t_input", "t_sync", "memory"),
                steps=model.ProbeSteps(
                    steps=40,
                    last_step=1234,
                    last_at=1768471199.75,
                    wall_s=0.8,
                    t_input_s=0.25,
                    t_sync_s=0.125,
                    sync_count=3,  # an int in a float field stays an int
                    t_comm_s=0.5,
                    t_comm_exposed_s=0.0,  # 0.0 is a figure, not None
                    t_gpu_s=1.0,
                    t_host_s=0.425,
                    measured=("t_input", "t_sync", "t_comm"),
                    wall_p50_s=0.75,
                    wall_p95_s=1.5,
                    own_p50_s=0.25,
                    wait_p50_s=0.5,
                    input_p50_s=0.125,
                    sync_p50_s=0.0,
                    coll_seq=2468,
                    median_steps=600,
                ),
                memory=model.ProbeMemory(2**34, 2**35, 2**34 + 1, 2**30, 7, 1),
                params_bytes=2**31,
                grads_bytes=2**31,
                optimizer_bytes=3 * 2**32,
                kv_cache_bytes=2**20,
                sync_sites=(model.SyncSite("/home/alice/llm/train.py:88", ".item", 400, 30.5),),
                notes=("probe: CUDA events failed; t_gpu is off",),
                updated_at=1768471200.0,
                ended=True,
                malformed_lines=2,
                local_rank=3,
                node="gpu-node-17",
                cuda_device=3,
                run_id="a1b2c3",
                gone=True,
                progress=model.ProbeProgress(
                    1768471199.5, 1234, 12.5, 2469, 2468, "barrier", 8, 12.25
                ),
                stack_signal=12,
                stack='File "/home/alice/llm/train.py", line 90 in main',
                stack_at=1768471200.0,
                exit_error="RuntimeError: Connection closed by peer",
                gone_at=1768471201.0,
                sample=model.ProbeSample(
                    step=3,
                    at=1768471100.5,
                    wall_s=0.375,
                    flops=2**40,
                    matmul_flops=2**39,
                    misaligned_flops=2**37,
                    dtype_flops=(("float32", 2**39),),
                    shapes=(
                        model.ProbeShape(
                            "mm",
                            "float32",
                            (8192, 50257, 4096),
                            "MNK",
                            2,
                            2**38,
                            ("N",),
                            "/home/alice/llm/train.py:61",
                        ),
                    ),
                    h2d=model.ProbeTransfer(4, 2**26, 0.0125, 2**25, 2),
                    d2h=model.ProbeTransfer(1, 4, 0.0),
                    samples=8,
                    tokens=8192,
                    batch_from="the batch's input_ids",
                    loss=2.75,
                    backward=True,
                    grad_scaler=False,
                    autocast=(("cuda", "float16"),),
                    matmul_precision="highest",
                    allow_tf32=False,
                    capability=(9, 0),
                    device_name="NVIDIA H100 80GB HBM3",
                ),
                arch_list=("sm_80", "sm_90"),
                torch_cuda="12.8",
            ),
        ),
        health=model.HealthReport(
            (
                Finding(
                    id="env.cuda_launch_blocking",
                    severity="warning",
                    title="CUDA_LAUNCH_BLOCKING=1 in a GPU job's environment",
                    evidence=(HealthEvidence("CUDA_LAUNCH_BLOCKING=1", "/proc/4242/environ"),),
                    next_step="unset CUDA_LAUNCH_BLOCKING",
                    bears_on=("synchronization",),
                    check="environment",
                    gpus=(0,),
                    pids=(4242,),
                    layer="driver",
                ),
            ),
            # the recorded form: when it was read and how long it took, never the raw facts
            HealthFacts(1768471200.0, "", read_s=0.004),
        ),
    )


def test_every_model_dataclass_round_trips_with_every_field_set(tmp_path):
    snap = every_field_snapshot()
    seen: dict[type, set[str]] = {}

    def walk(obj):
        if dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                v = getattr(obj, f.name)
                if f.default is not dataclasses.MISSING:
                    changed = v != f.default
                elif f.default_factory is not dataclasses.MISSING:
                    changed = v != f.default_factory()
                else:
                    changed = True  # a required field
                if changed:
                    seen.setdefault(type(obj), set()).add(f.name)
                walk(v)
        elif isinstance(obj, (tuple, list)):
            for v in obj:
                walk(v)
        elif isinstance(obj, dict):
            for v in obj.values():
                walk(v)

    walk(snap)
    every = {c for c in vars(model).values() if isinstance(c, type) and dataclasses.is_dataclass(c)}
    every |= {Finding, HealthEvidence}  # reached through HealthReport
    seen.pop(HealthFacts)  # recorded without the raw facts (model/health.py `recorded`)
    assert set(seen) == every  # the example reaches every dataclass of the model...
    for cls in every:  # ...with every field away from its default
        assert seen[cls] == {f.name for f in dataclasses.fields(cls)}, cls.__name__
    assert_identical(from_jsonable(Snapshot, json.loads(json.dumps(jsonable(snap)))), snap)
    path = str(tmp_path / "one.jsonl")
    write_recording(path, [snap])
    header, back = read_recording(path)
    assert_identical(back, [snap])
    assert header.gpu_models == ("NVIDIA H100 80GB HBM3",) and header.gpu_count == 1


ROUND_TRIP = ["compute-bound", "capacity", "scheduler-wait", "xid-79", "mig", "no-gpu", "tour"]


@functools.cache
def round_trip_snapshots(scenario: str) -> tuple[Snapshot, ...]:
    """A scenario's snapshots, monitored once for both file suffixes (they are frozen)."""
    seconds = 100 if scenario == "xid-79" else 45  # past the lost GPU; past the OOM kill
    return tuple(monitored(scenario, seconds))


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
@pytest.mark.parametrize(
    "scenario",
    # a scenario's two suffixes on one worker: its snapshots are monitored once, not twice
    [pytest.param(s, marks=pytest.mark.xdist_group(f"round-trip-{s}")) for s in ROUND_TRIP],
)
def test_read_of_write_is_the_identity_over_demo_scenarios(scenario, suffix, tmp_path):
    snaps = list(round_trip_snapshots(scenario))
    path = str(tmp_path / f"r{suffix}")
    assert write_recording(path, snaps) == len(snaps)
    header, back = read_recording(path)
    assert back == snaps
    assert_identical(back, snaps)
    assert header.interval_s == 1.0 and header.started == snaps[0].timestamp
    assert header.gpu_count == len(snaps[0].gpus) and header.hostname == "gpu-node-07"


def test_bad_shapes_are_named_with_their_path():
    doc = jsonable(every_field_snapshot())
    doc["gpus"][0]["util_samples"][2] = "fast"
    with pytest.raises(ValueError, match=r"gpus\[0\]\.util_samples\[2\]"):
        from_jsonable(Snapshot, doc)
    doc = jsonable(every_field_snapshot())
    del doc["system"]
    with pytest.raises(ValueError, match="system"):
        from_jsonable(Snapshot, doc)


# -- the done-when check: a replay reaches the live verdict ----------------------------------

EQUIVALENT = [
    ("scheduler-wait", 40),  # a pending Slurm job: the scheduler class
    ("capacity", 40),  # the kernel's OOM killer at 40 s
    ("comm-bound", 40),  # 8 GPUs dipping together
    ("xid-79", 100),  # a GPU lost at 90 s
    ("mig", 40),  # one A100 in MIG mode
]


@pytest.mark.parametrize("scenario,seconds", EQUIVALENT, ids=[s for s, _ in EQUIVALENT])
def test_replayed_diagnosis_is_the_live_diagnosis(scenario, seconds, tmp_path):
    f = str(tmp_path / f"{scenario}.jsonl.gz")
    rc, _, err = run_main("--demo", scenario, "record", "-o", f, "--seconds", str(seconds))
    assert rc == 0, err
    assert f"recorded {seconds + 1} snapshots" in err  # stdout may be the file
    replay = run_main("--replay", f, "diagnose", "--json")
    live = run_main("--demo", scenario, "diagnose", "--seconds", str(seconds), "--json")
    assert replay[0] == live[0] == 0, replay[2] + live[2]
    assert replay[2] == ""
    got, want = json.loads(replay[1]), json.loads(live[1])
    assert without_times(got) == without_times(want)
    if scenario == "scheduler-wait":
        assert got["primary"] == "scheduler" and got["scope"]["job"] == "48213"
    if scenario == "capacity":
        assert "OOM" in json.dumps(got["alerts"])
    if scenario == "comm-bound":
        assert got["scope"]["gpus"] == list(range(8))


def test_replay_seconds_takes_the_first_n_seconds_and_text_matches_too(tmp_path):
    f = str(tmp_path / "r.jsonl")
    assert run_main("--demo", "compute-then-input", "record", "-o", f, "--seconds", "90")[0] == 0
    rc, replayed, _ = run_main("--replay", f, "diagnose", "--seconds", "30")
    assert rc == 0
    assert replayed == run_main("--demo", "compute-then-input", "diagnose", "--seconds", "30")[1]
    assert replayed.startswith("Bottleneck: COMPUTE")
    rc, whole, _ = run_main("--replay", f, "diagnose")
    assert whole == run_main("--demo", "compute-then-input", "diagnose", "--seconds", "90")[1]
    assert whole.startswith("Bottleneck: INPUT PIPELINE")


def test_snapshot_of_a_replay_is_its_last_snapshot(tmp_path):
    f = str(tmp_path / "r.jsonl.gz")
    run_main("--demo", "compute-bound", "record", "-o", f, "--seconds", "12")
    rc, out, err = run_main("--replay", f, "snapshot", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "gputop-diag.snapshot/1"
    assert doc["timestamp"] == sim.EPOCH0 + 12 and len(doc["gpus"]) == 8
    rc, out, _ = run_main("--replay", f, "snapshot")
    assert rc == 0 and out.startswith("gpu-node-07")


def test_no_gpu_recording_exits_3_like_the_live_run(tmp_path):
    f = str(tmp_path / "r.jsonl")
    rc, out, err = run_main("--demo", "no-gpu", "record", "-o", f)
    assert rc == 3 and "next:" in err
    assert (
        "recorded 61 snapshots" in err and out == ""
    )  # the scenario's length when --seconds is not given
    rc, out, _ = run_main("--replay", f, "diagnose")
    assert rc == 3 and "INSUFFICIENT DATA" in out


def test_re_recording_a_replay_cuts_and_sanitizes(tmp_path):
    f, g = str(tmp_path / "a.jsonl.gz"), str(tmp_path / "b.jsonl.gz")
    run_main("--demo", "capacity", "record", "-o", f, "--seconds", "30")
    rc, _, err = run_main("--replay", f, "record", "-o", g, "--sanitize", "--seconds", "10")
    assert rc == 0 and "recorded 11 snapshots" in err and "sanitized" in err
    header, snaps = read_recording(g)
    assert header.sanitized and len(snaps) == 11 and "gpu-node-07" not in text_of(g)
    assert run_main("--replay", f, "record", "-o", f)[0] == 2  # onto itself: refused


# -- cut off, and bad files ------------------------------------------------------------------


def test_a_recording_cut_off_while_writing_is_read_up_to_its_last_whole_line(tmp_path):
    snaps = monitored("compute-bound", 9)
    path = str(tmp_path / "live.jsonl.gz")
    w = RecordingWriter(path, interval_s=1.0)
    for s in snaps:
        w.write(s)
    cut = str(tmp_path / "cut.jsonl.gz")  # a copy taken before close(): no gzip end marker
    with open(path, "rb") as src, open(cut, "wb") as dst:
        dst.write(src.read())
    w.close()
    rec = Recording.open(cut)
    rec.on_warning = lambda text: None
    assert list(rec.snapshots()) == snaps
    assert rec.warnings and "cut off" in rec.warnings[0]
    rc, out, err = run_main("--replay", cut, "diagnose")
    assert rc == 0 and out.startswith("Bottleneck:")
    assert err.count("\n") == 1 and "warning" in err and "cut off" in err


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_damaged_last_line_is_skipped_with_a_warning(tmp_path, suffix):
    snaps = monitored("compute-bound", 9)
    path = str(tmp_path / f"r{suffix}")
    write_recording(path, snaps)
    raw = open(path, "rb").read()
    if suffix == ".jsonl":
        open(path, "wb").write(raw[:-500])  # half a line
    else:
        text = gzip.decompress(raw)
        open(path, "wb").write(gzip.compress(text[:-500]))
    rec = Recording.open(path)
    rec.on_warning = lambda text: None
    assert list(rec.snapshots()) == snaps[:-1]
    assert "last line (11)" in rec.warnings[0] and "skipped" in rec.warnings[0]
    assert rec.last() == snaps[-2]


def test_a_damaged_line_before_the_last_is_an_error(tmp_path):
    path = str(tmp_path / "r.jsonl")
    write_recording(path, monitored("idle", 5))
    lines = open(path, encoding="utf-8").read().splitlines(keepends=True)
    lines[3] = lines[3][:100] + "\n"
    open(path, "w", encoding="utf-8").writelines(lines)
    with pytest.raises(RecordingError, match="line 4 is not a snapshot"):
        list(Recording.open(path).snapshots())
    rc, out, err = run_main("--replay", path, "diagnose")
    assert rc == 2 and out == "" and err.count("\n") == 1 and "line 4" in err


def _bad_files(tmp_path) -> dict[str, str]:
    def put(name: str, data: bytes) -> str:
        p = tmp_path / name
        p.write_bytes(data)
        return str(p)

    header = {"schema": RECORDING_SCHEMA, "interval_s": 1.0}
    return {
        "missing": str(tmp_path / "nope.jsonl"),
        "a directory": str(tmp_path),
        "empty": put("empty.jsonl", b""),
        "binary garbage": put("garbage.bin", bytes(range(256)) * 40),
        "text": put("notes.txt", b"hello there\nnot a recording\n"),
        "a snapshot document": put("snap.json", b'{\n  "schema": "gputop-diag.snapshot/1"\n}\n'),
        "another schema": put("diag.jsonl", b'{"schema": "gputop-diag.diagnosis/1"}\n'),
        "a future recording": put("v2.jsonl", b'{"schema": "gputop-diag.recording/2"}\n'),
        "a header without interval": put("h.jsonl", b'{"schema": "gputop-diag.recording/1"}\n'),
        "gzip of garbage": put("g.jsonl.gz", gzip.compress(bytes(range(256)) * 10)),
        "broken gzip": put("b.jsonl.gz", b"\x1f\x8b" + bytes(range(200))),
        "only a header": put("h2.jsonl", json.dumps(header).encode() + b"\n"),
        "a bad snapshot line": put("s.jsonl", json.dumps(header).encode() + b'\n{"x": 1}\n[]\n'),
    }


def test_bad_files_give_one_line_and_exit_2(tmp_path):
    for what, path in _bad_files(tmp_path).items():
        out_file = str(tmp_path / "out.jsonl")
        for command in (["diagnose"], ["snapshot", "--json"], ["record", "-o", out_file]):
            rc, out, err = run_main("--replay", path, *command)
            assert rc == 2, (what, command, err)
            assert out == "", (what, command)
            assert err.startswith("gputop-diag: ") and err.count("\n") == 1, (what, err)
            assert "Traceback" not in err and "unexpected" not in err, (what, err)


def test_bad_files_say_what_is_wrong(tmp_path):
    files = _bad_files(tmp_path)
    expect = {
        "missing": "No such file",
        "empty": "is empty",
        "binary garbage": "not a gputop-diag recording",
        "a snapshot document": "not a gputop-diag recording",
        "another schema": "gputop-diag.diagnosis/1",
        "a future recording": "a newer gputop-diag",
        "broken gzip": "damaged",
        "only a header": "holds no snapshots",
    }
    for what, words in expect.items():
        rc, _, err = run_main("--replay", files[what], "diagnose")
        assert words in err, (what, err)


def test_the_live_view_refuses_a_bad_file_before_it_starts(tmp_path, cli):
    r = cli("--replay", str(tmp_path / "nope.jsonl.gz"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


def test_replay_and_demo_together_is_a_usage_error(tmp_path, cli):
    f = str(tmp_path / "r.jsonl")
    run_main("--demo", "idle", "record", "-o", f, "--seconds", "3")
    for argv in (["--demo", "idle", "--replay", f, "diagnose"], ["--replay", f, "--demo"]):
        r = cli(*argv)
        assert r.returncode == 2 and "--replay and --demo" in r.stderr, argv


def test_record_to_an_unwritable_place_is_one_line(tmp_path):
    rc, out, err = run_main(
        "--demo", "idle", "record", "-o", str(tmp_path / "no" / "dir.jsonl"), "--seconds", "2"
    )
    said = f"gputop-diag: -o {tmp_path / 'no' / 'dir.jsonl'}: cannot write: "
    assert rc == 2 and err.startswith(said) and err.count("\n") == 1


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full here")
def test_a_full_disk_is_one_line_and_exit_1():
    rc, out, err = run_main("--demo", "idle", "record", "-o", "/dev/full", "--seconds", "2")
    assert rc == 1 and out == "" and err.count("\n") == 1
    assert "cannot write /dev/full" in err and "kept 0 snapshots" in err
    assert os.path.exists("/dev/full") and not os.path.isfile("/dev/full")


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
@pytest.mark.parametrize("sig", ["SIGHUP", "SIGINT", "SIGKILL"])
def test_a_recording_stopped_by_a_signal_is_readable(sig, tmp_path):
    """A long simulated recording, stopped part way as a dropped SSH session (or Ctrl-C, or
    the OOM killer) would stop it."""
    f = str(tmp_path / "r.jsonl.gz")
    p = subprocess.Popen(
        [sys.executable, "-m", "gputop_diag", "--demo", "idle", "record", "-o", f]
        + ["--seconds", "100000"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},  # SIGABRT prints every thread's stack
    )
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (not os.path.exists(f) or os.path.getsize(f) < 20000):
            time.sleep(0.05)
        p.send_signal(getattr(signal, sig))
        try:
            out, err = p.communicate(timeout=30)
        except subprocess.TimeoutExpired:  # it did not stop: say where it was
            p.send_signal(signal.SIGABRT)
            _, err = p.communicate(timeout=10)
            pytest.fail(f"{sig} did not stop the recording within 30 s; its threads:\n{err}")
    finally:
        if p.poll() is None:
            p.kill()
    rec = Recording.open(f)
    rec.on_warning = lambda text: None
    snaps = list(rec.snapshots())
    assert len(snaps) > 10
    assert [s.timestamp for s in snaps] == [sim.EPOCH0 + k for k in range(len(snaps))]
    if sig == "SIGKILL":
        assert rec.warnings and "cut off" in rec.warnings[0]
    else:  # the file was closed properly and the summary printed; stopped before its
        # --seconds: 128 + the signal, as a shell reports it (docs/architecture.md, "Stopping")
        assert p.returncode == 128 + getattr(signal, sig), err
        assert "stopped early" in err and not rec.warnings
        assert f"recorded {len(snaps)} snapshots" in err and out == ""


def test_a_ctrl_c_dropped_in_a_finalizer_still_stops_the_recording(tmp_path, monkeypatch):
    """Python prints and drops an interrupt that lands while it runs a finalizer; the recording
    stops at the next tick all the same (a full run once saw one go on past 30 s)."""
    from gputop_diag.recording.writer import RecordingWriter

    real = RecordingWriter.write
    calls = []

    class Freed:
        def __del__(self):
            signal.raise_signal(signal.SIGINT)
            for _ in range(100):  # the handler runs here, inside the finalizer
                pass

    def write(self, snap):
        calls.append(snap.timestamp)
        if len(calls) == 5:
            Freed()  # freed at once: its finalizer gets the interrupt
        return real(self, snap)

    dropped = []
    monkeypatch.setattr(RecordingWriter, "write", write)
    monkeypatch.setattr(sys, "unraisablehook", lambda u: dropped.append(u.exc_type))
    f = str(tmp_path / "r.jsonl")
    rc, _, err = run_main("--demo", "idle", "record", "-o", f, "--seconds", "60")
    # The stop signals' handler only takes note during a tick: nothing for Python to drop.
    assert dropped == []
    assert rc == 130 and "recorded 5 snapshots" in err and "(stopped early)" in err, err
    assert len(read_recording(f)[1]) == 5


# -- sanitized recordings --------------------------------------------------------------------


def identifiers(snaps: list[Snapshot]) -> set[str]:
    """What identifies the simulated machine and its people in these snapshots."""
    found = {snaps[0].system.hostname}
    for s in snaps:
        for g in s.gpus:
            found |= {g.static.uuid, g.static.serial, g.static.pci_bus_id}
            found |= {m.uuid for m in g.mig_instances}
        found |= {p.user for p in s.processes}
        found |= {j.user for j in s.scheduler_jobs or ()}
        found |= {x.pci_bus_id for x in s.xid_events}
    return {x for x in found if x}


@pytest.mark.parametrize("scenario", ["capacity", "scheduler-wait", "xid-app", "mig"])
def test_a_sanitized_recording_holds_none_of_the_machines_identifiers(scenario, tmp_path):
    seconds = "60"
    plain, clean = str(tmp_path / "plain.jsonl.gz"), str(tmp_path / "clean.jsonl.gz")
    assert run_main("--demo", scenario, "record", "-o", plain, "--seconds", seconds)[0] == 0
    rc, _, err = run_main(
        "--demo", scenario, "record", "--sanitize", "-o", clean, "--seconds", seconds
    )
    assert rc == 0 and "sanitized" in err
    secrets = identifiers(read_recording(plain)[1])
    assert {"gpu-node-07", "alice"} <= secrets and len(secrets) > 3
    assert all(s in text_of(plain) for s in secrets)  # the grep below can fail
    text = text_of(clean)
    leaked = sorted(s for s in secrets if s in text)
    assert not leaked, leaked
    assert "/home/" not in text
    header, snaps = read_recording(clean)
    assert header.sanitized and header.hostname is None
    assert '"hostname"' not in text.splitlines()[0]
    # it still replays, to the same class
    assert (
        json.loads(run_main("--replay", clean, "diagnose", "--json")[1])["primary"]
        == (json.loads(run_main("--replay", plain, "diagnose", "--json")[1])["primary"])
    )


def test_sanitized_pseudonyms_hold_across_the_whole_recording(tmp_path):
    sources = sim.build("capacity")
    rank = next(p for p in sources.sim.procs.values() if p.role == "rank")
    rank.cmdline = ("/home/alice/venv/bin/python", "/home/alice/train.py", "--out=/root/x")
    snaps = monitored("capacity", 30, sources)
    path = str(tmp_path / "r.jsonl")
    write_recording(path, snaps, sanitize=True)
    text = text_of(path)
    assert "/home/" not in text and "alice" not in text and "/root" not in text
    users_by_pid: dict[int, set[str]] = {}
    uuids_by_gpu: dict[int, set[str]] = {}
    for s in read_recording(path)[1]:
        for p in s.processes:
            users_by_pid.setdefault(p.pid, set()).add(p.user)
        for g in s.gpus:
            uuids_by_gpu.setdefault(g.index, set()).add(g.static.uuid)
    assert all(len(u) == 1 for u in users_by_pid.values())  # one pseudonym per person, always
    users = {u for us in users_by_pid.values() for u in us}
    assert len(users) == 2 and all(u.startswith("user-") for u in users)  # alice and bob
    assert all(len(u) == 1 for u in uuids_by_gpu.values())  # one pseudonym per GPU, always
    uuids = {u for us in uuids_by_gpu.values() for u in us}
    assert len(uuids) == len(uuids_by_gpu) and all(u.startswith("GPU-") for u in uuids)
    assert not uuids & {g.static.uuid for g in snaps[0].gpus}


# -- headless paths stay free of Textual -----------------------------------------------------


def test_record_and_replay_do_not_import_textual(tmp_path):
    f = str(tmp_path / "r.jsonl.gz")
    code = (
        "import sys, io, contextlib\n"
        "from gputop_diag.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    a = main(['--demo', 'capacity', 'record', '-o', {f!r}, '--seconds', '5'])\n"
        f"    b = main(['--replay', {f!r}, 'diagnose', '--json'])\n"
        f"    c = main(['--replay', {f!r}, 'snapshot'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'textual')\n"
        "print(a, b, c, bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0 0 0 []"


# -- the live view plays a recording ---------------------------------------------------------


def _replay_app(tmp_path, scenario="compute-bound", seconds=10):
    from gputop_diag.tui import GpuTopApp

    f = str(tmp_path / "play.jsonl.gz")
    run_main("--demo", scenario, "record", "-o", f, "--seconds", str(seconds))
    return GpuTopApp(None, replay=Recording.open(f))


async def _until(pilot, predicate, timeout=10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.05)
    return predicate()


def _ticks(app) -> int:
    return 0 if app.latest is None else app.latest.ticks


async def test_the_live_view_plays_a_recording_with_speed_pause_and_step(tmp_path):
    app = _replay_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        assert await _until(pilot, lambda: _ticks(app) >= 1)
        header = app.query_one("#header").plain
        assert "REPLAY" in header and "play.jsonl.gz" in header and "1x" in header
        assert await _until(pilot, lambda: "/0:10" in app.query_one("#header").plain)
        await pilot.press("greater_than_sign", "greater_than_sign")
        assert app.player.pace.speed == 4.0 and "4x" in app.query_one("#header").plain
        await pilot.press("space")
        assert app.paused and "PAUSED" in app.query_one("#header").plain
        await pilot.pause(0.3)
        held = _ticks(app)
        await pilot.pause(0.6)
        assert _ticks(app) == held  # paused: nothing plays
        await pilot.press("full_stop")
        assert await _until(pilot, lambda: _ticks(app) == held + 1)
        await pilot.pause(0.4)
        assert _ticks(app) == held + 1 and app.paused  # one step, still paused
        await pilot.press("less_than_sign")
        assert app.player.pace.speed == 2.0
        app.player.pace.speed = 16.0
        await pilot.press("space")
        assert await _until(pilot, lambda: app.player.ended)
        assert _ticks(app) == 11  # every recorded tick, then the last frame stays
        header = app.query_one("#header").plain
        assert "END" in header and "0:10/0:10" in header
        assert "COMPUTE" in app.query_one("#side-text").plain
        await pilot.press("r", "minus")  # no machine to sample: nothing happens
        assert _ticks(app) == 11 and app.interval == 1.0


async def test_the_last_frame_of_a_replay_is_its_last_tick_whole(tmp_path):
    """At the end of a replay no tick follows to move a held figure or a trace that repaints
    every few ticks: the last frame shows the last recorded tick, figures and traces (it once
    stayed a tick or more behind until a resize)."""
    from test_tui_support import screen_lines

    from gputop_diag.model.formats import pct
    from gputop_diag.tui.panes.utilization import UtilizationPane

    app = _replay_app(tmp_path, "comm-bound", seconds=12)  # 13 ticks: 12 is off the trace's 5
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("2")
        app.player.pace.speed = 16.0
        assert await _until(pilot, lambda: app.player.ended)
        await pilot.pause(0.2)
        last = app.latest.snapshot
        assert app.latest.ticks == 13
        pane = app.query_one(UtilizationPane)
        assert pane._traced is not None and pane._traced[0] == 12  # the last tick's trace
        rows = {}
        for line in screen_lines(app):
            first = line.split()[0].lstrip("▶") if line.split() else ""
            if first.startswith("GPU"):
                rows.setdefault(first, line)  # a GPU's trace row comes before its details
        for g in last.gpus:
            assert f" {pct(g.util_gpu_pct, unit=False)}% SM" in rows[f"GPU{g.index}"], rows


async def test_replay_keys_are_in_the_help_only_while_replaying(tmp_path):
    from gputop_diag.tui import GpuTopApp
    from gputop_diag.tui.help import keys_text

    app = _replay_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        text = keys_text(app).plain
        assert "replay faster" in text and "REPLAY:" in text
        assert "sample now" not in text
    live = GpuTopApp(sim.build("idle"), start_collectors=False)
    async with live.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        text = keys_text(live).plain
        assert "replay faster" not in text and "sample now" in text
        await pilot.press("greater_than_sign")
        assert live.player.pace.speed == 1.0


def test_the_header_fits_replay_facts_into_80_columns():
    from gputop_diag.tui.header import HeaderFacts, ReplayFacts, header_runs

    facts = HeaderFacts(
        host="gpu-node-07",
        driver="570.124.06",
        cuda="12.8",
        gpu_count=8,
        selected_gpu=0,
        replay=ReplayFacts("a-long-recording-name.jsonl.gz", 3725.0, 7200.0, 0.25, ended=True),
    )
    text = "".join(t for t, _ in header_runs(facts, 80))
    assert len(text) <= 80
    assert "REPLAY" in text and "1:02:05/2:00:00" in text and "0.25x" in text and "END" in text
    assert "every" not in text


def test_replay_pace_waits_the_recorded_gap_over_the_speed():
    import threading

    from gputop_diag.tui.replaying import ReplayPace

    pace, cancel = ReplayPace(), threading.Event()
    paused = []  # the Monitor's pause, as the replay reads it

    def wait(gap_s):
        return pace.wait(gap_s, cancel, lambda: bool(paused))

    pace.speed = 8.0
    t0 = time.monotonic()
    assert wait(1.6) is False
    assert 0.15 <= time.monotonic() - t0 < 1.0  # 1.6 recorded seconds at 8x: 0.2 s
    assert pace.change_speed(1) == 16.0 and pace.change_speed(1) == 16.0
    assert [pace.change_speed(-1) for _ in range(7)][-2:] == [0.25, 0.25]
    paused.append(True)
    pace.step()  # paused, one tick let through at once
    t0 = time.monotonic()
    assert wait(30.0) is False and time.monotonic() - t0 < 0.2
    done = []
    waiter = threading.Thread(target=lambda: done.append(wait(30.0)))
    waiter.start()
    time.sleep(0.2)
    assert not done  # paused: it waits
    cancel.set()
    waiter.join(2.0)
    assert done == [True]


# -- time options and damaged timestamps --------------------------------------------------------


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
@pytest.mark.parametrize("command", ["diagnose", "record"])
def test_seconds_that_are_not_a_duration_are_a_usage_error(command, value, tmp_path):
    extra = ["-o", str(tmp_path / "r.jsonl")] if command == "record" else []
    rc, _, err = run_main("--demo", "idle", command, *extra, "--seconds", value)
    assert rc == 2 and "--seconds must be a positive number" in err
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_an_interval_that_is_not_a_duration_is_a_usage_error(value, capsys):
    for argv in (["--interval", value, "diagnose"], ["diagnose", "--interval", value]):
        rc = main(["--demo", "idle", *argv])  # a usage error in one line, before or after
        err = capsys.readouterr().err
        assert (
            rc == 2
            and err
            == f"gputop-diag: --interval must be a positive number of seconds, not {value}\n"
        )


def test_a_simulated_run_of_a_billion_seconds_is_capped_and_says_so(monkeypatch):
    from gputop_diag.commands import options

    monkeypatch.setattr(options, "MAX_SIMULATED_S", 20.0)
    rc, out, err = run_main("--demo", "idle", "diagnose", "--seconds", "1e9")
    assert rc == 0 and "capped at 20 s" in err and "IDLE" in out


def _with_last_timestamp(src: str, dst: str, ts: str) -> None:
    lines = open(src, encoding="utf-8").read().splitlines()
    doc = json.loads(lines[-1])
    lines[-1] = json.dumps({**doc, "timestamp": "PLACEHOLDER"}).replace('"PLACEHOLDER"', ts)
    open(dst, "w", encoding="utf-8").write("\n".join(lines) + "\n")


@pytest.mark.parametrize("ts", ["1e300", "Infinity", "-1000000000000.0", "NaN"])
def test_a_last_line_with_an_impossible_timestamp_is_skipped_as_damaged(ts, tmp_path):
    good, bad = str(tmp_path / "good.jsonl"), str(tmp_path / "bad.jsonl")
    run_main("--demo", "capacity", "record", "-o", good, "--seconds", "10")
    _with_last_timestamp(good, bad, ts)
    rc, out, err = run_main("--replay", bad, "diagnose", "--json")
    assert rc == 0 and "damaged" in err and "unexpected" not in err
    assert json.loads(out)["timestamp"] == sim.EPOCH0 + 9  # the last good line


def test_a_recording_that_goes_back_in_time_is_refused_and_re_recording_leaves_nothing(tmp_path):
    good, bad = str(tmp_path / "good.jsonl"), str(tmp_path / "bad.jsonl")
    run_main("--demo", "capacity", "record", "-o", good, "--seconds", "10")
    lines = open(good, encoding="utf-8").read().splitlines()
    lines[3], lines[6] = lines[6], lines[3]
    open(bad, "w", encoding="utf-8").write("\n".join(lines) + "\n")
    rc, out, err = run_main("--replay", bad, "diagnose")
    assert rc == 2 and "goes back in time" in err and out == ""
    out_path = tmp_path / "again.jsonl"
    rc, _, err = run_main("--replay", bad, "record", "-o", str(out_path))
    assert rc == 2 and "not written" in err and not out_path.exists()


@pytest.mark.parametrize("target", ["/dev/stdout", "-"])
def test_a_recording_written_to_stdout_is_a_whole_recording(tmp_path, target):
    p = subprocess.run(
        [sys.executable, "-m", "gputop_diag", "--demo", "idle", "record", "-o", target]
        + ["--seconds", "5"],
        capture_output=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert not (tmp_path / "-").exists()  # "-" is standard output, not a file
    assert p.returncode == 0 and b"recorded 6 snapshots" in p.stderr
    f = tmp_path / "piped.jsonl"
    f.write_bytes(p.stdout)
    header, snaps = read_recording(str(f))
    assert len(snaps) == 6
