"""The report's "Measured in the job" section (`report/measured.py`): the step split, the work of
the probe's sampled step (samples and tokens a second, MFU, the loss, precision, misaligned
shapes, transfers) and the build's kernels, sanitized like every section; absent without a
probe. And the verdict line names the diagnosis's finding, as `diagnose` does."""

from __future__ import annotations

import functools
from dataclasses import replace

from gputop_diag import sim
from gputop_diag.collect.probe import sample_of
from gputop_diag.diagnose.classify import judge
from gputop_diag.model import ProbeState, ProbeSteps, Snapshot
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.report.build import ReportSource, make_report

SAMPLE = {
    "kind": "sample",
    "step": 7,
    "wall_s": 0.5,
    "flops": 400_000_000_000,
    "matmul_flops": 300_000_000_000,
    "misaligned_flops": 150_000_000_000,
    "dtype_flops": {"float16": 300_000_000_000},
    "shapes": [
        {
            "op": "addmm",
            "dtype": "float16",
            "dims": {"M": 256, "N": 50257, "K": 768},
            "count": 2,
            "flops": 150_000_000_000,
            "misaligned": ["N"],
            "site": "/home/alice/secretproj/train.py:50",
        }
    ],
    "transfers": {"h2d": {"count": 2, "bytes": 8 * 2**20, "seconds": 0.004, "non_blocking": 2}},
    "batch": {"samples": 8, "tokens": 256, "from": "the batch's input_ids"},
    "loss": 2.5,
    "backward": True,
    "grad_scaler": False,
    "autocast": {"cuda": "float16"},
    "matmul_precision": "highest",
    "allow_tf32": False,
}


@functools.cache
def outside(name: str, seconds: int = 20) -> tuple[Snapshot, ...]:
    sources = sim.build(name)
    sampler = Sampler(sources)
    for k in range(seconds):
        if k:
            sources.clock.sleep(1.0)
        sampler.sample()
    sampler.close()
    return sampler.history.snapshots()


def probed(window, sample: dict | None, **kw) -> list[Snapshot]:
    """`window` with a probe in its first GPU process, its newest sampled step `sample`."""
    out = []
    for s in window:
        pids = sorted({p.pid for p in s.gpu_processes})[:1]
        steps = ProbeSteps(40, 100, s.timestamp, 0.02, 0.001, 0.001, t_host_s=0.018)
        steps = replace(steps, measured=("t_input", "t_sync"))
        taken = sample_of({**sample, "t": s.timestamp}, s.timestamp) if sample else None
        probes = tuple(
            ProbeState(pid=pid, start_ticks=1, cuda=True, steps=steps, sample=taken, **kw)
            for pid in pids
        )
        out.append(replace(s, probes=probes))
    return out


def report(snaps):
    return make_report(snaps, judge(snaps), source=ReportSource("simulator", "compute-bound"))


def test_the_sampled_step_is_in_the_report_sanitized():
    r = report(probed(outside("compute-bound"), SAMPLE, arch_list=("sm_50", "sm_60")))
    section = r.doc["measured"]
    work = section["work"]
    assert work["sampled_step"] == 7 and work["loss"] == 2.5
    assert work["mfu"] is not None  # the simulated GPU is one the peak table knows
    md = r.markdown
    assert "## Measured in the job" in md
    assert "**Step split**: input 1.0 ms (5 %) + sync 1.0 ms (5 %)" in md
    assert "transfer 4.0 ms (20 %, sampled) + host 14 ms (70 %) = 20 ms a step" in md
    assert "**Work** (sampled step 7): 8 samples a step" in md and "loss 2.5" in md
    assert "tokens/s" in md and "MFU " in md and "MFU n/a" not in md
    assert "**Precision** (sampled step 7): matmuls in float16" in md
    assert "fp16 training without a gradient scaler" in md
    assert "| addmm | float16 | M 256 N 50257 K 768 | N |" in md
    assert "host to device 2 copies of 8 MiB" in md and "pageable" in md
    assert "**Kernel images**: no kernel image is available for this device" in md
    # the job's line of code keeps its line number, not its path
    assert "train.py:50" in md or ":50 |" in md
    assert "alice" not in md and "secretproj" not in md
    assert "alice" not in str(r.doc) and "secretproj" not in str(r.doc)
    assert not r.left_out


def test_no_probe_no_section_and_a_probe_without_a_sample_says_only_its_split():
    plain = report(list(outside("compute-bound")))
    assert "measured" not in plain.doc and "## Measured in the job" not in plain.markdown
    unsampled = report(probed(outside("compute-bound"), None))
    assert unsampled.doc["measured"]["work"] is None
    assert "**Step split**" in unsampled.markdown and "**Work**" not in unsampled.markdown


def test_the_verdict_line_names_the_finding():
    snaps = probed(outside("compute-bound"), SAMPLE)
    d = judge(snaps)
    launch = replace(d, primary="synchronization", finding="launch_bound")
    md = make_report(snaps, launch, source=ReportSource("live")).markdown
    assert md.startswith("# gputop-diag report: synchronization (launch-bound)\n")
    assert "**SYNCHRONIZATION (launch-bound)**, confidence" in md
    plain = make_report(snaps, replace(launch, finding=None), source=ReportSource("live"))
    assert plain.markdown.startswith("# gputop-diag report: synchronization\n")
    assert "(launch-bound)" not in plain.markdown
