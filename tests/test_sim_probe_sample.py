"""The simulator's probed jobs sample a step as the real probe does (probe/sample.py): the
"sample" record in the probe's own shape, read by the real reader, its step marked sampled,
FLOPs that are the model's, a loss that falls; the hello's arch list follows the torch-arch
fault, so a build without sm_90 on H100s is the driver chain's critical alert."""

from __future__ import annotations

import json
import os

import pytest

from gputop_diag import sim
from gputop_diag.collect.probe import _Records, sample_of
from gputop_diag.diagnose.measured_work import measured_work
from gputop_diag.monitor.core import Monitor
from gputop_diag.probe import sample as S
from gputop_diag.probe.schema import parse_file_name
from gputop_diag.sim import probe_files as P
from gputop_diag.sim.profiles import GPU_MODELS
from gputop_diag.sim.scenarios import SCENARIOS


def _records(s) -> dict[str, list[dict]]:
    folder = os.path.join(s.sim.runtime_dir, "gputop-diag")
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name)) as f:
            out[name] = [json.loads(line) for line in f]
    return out


@pytest.fixture(scope="module")
def precision():
    """precision-measured on 2 GPUs, its files as first written and 65 s later."""
    s = sim.build("precision-measured", gpu_count=2)
    s.sim.state()
    first = _records(s)
    s.clock.sleep(65)
    s.sim.state()
    return s, first, _records(s)


def test_the_sample_record_has_the_real_probe_s_fields_and_the_reader_takes_it(precision):
    _, _, files = precision
    real = S.Sample("/").record(3, 0.5, dict.fromkeys(("matmul_precision", "allow_tf32")))
    real.update(cudnn_tf32=None, capability=None, device_name=None)
    shape_keys = {"op", "dtype", "dims", "count", "flops", "misaligned", "site"}  # Sample.record
    assert len(files) == 2  # a file per rank
    for name, records in files.items():
        samples = [r for r in records if r["kind"] == "sample"]
        assert len(samples) >= 2  # the one before the view opened, one a minute since
        for rec in samples:
            assert set(rec) == set(real)
            assert sample_of(rec, rec["t"]) is not None
            assert rec["shapes"] and all(set(x) == shape_keys for x in rec["shapes"])
        sampled = {r["step"]: r for r in records if r["kind"] == "step" and r.get("sampled")}
        later = [r for r in samples if r["step"] in sampled]
        assert later and all(sampled[r["step"]]["wall_s"] > 0.45 for r in later)
        reader = _Records(*parse_file_name(name))
        assert all(reader.take(record) for record in records)
        state = reader.state()
        assert state.sample.step == samples[-1]["step"]
        assert state.steps.wall_s == pytest.approx(0.45, rel=0.05)  # sampled steps left out


def test_flops_are_the_model_s_and_the_loss_falls(precision):
    _, _, files = precision
    records = next(iter(files.values()))
    samples = [r for r in records if r["kind"] == "sample"]
    first, last = samples[0], samples[-1]
    h, inter, layers, vocab, rows, seq = 768, 3072, 12, 50257, 16 * 1024, 1024
    n = layers * (3 * h * h + h * h + 2 * h * inter) + vocab * h  # the linear layers' weights
    assert last["matmul_flops"] == 6 * n * rows
    assert last["flops"] == 6 * n * rows + 12 * layers * h * seq * rows
    assert last["dtype_flops"]["bfloat16"] == 6 * vocab * h * rows  # the head under autocast
    assert last["step"] > first["step"] and last["loss"] < first["loss"]
    head = last["shapes"][0]  # the misaligned ones first, as the probe orders them
    assert head["dims"] == {"M": rows, "N": vocab, "K": h} and head["misaligned"] == ["N"]
    assert head["site"] == "/home/alice/train_gpt2.py:131"
    assert last["transfers"]["h2d"]["pinned_bytes"] == 0
    assert last["transfers"]["h2d"]["non_blocking"] == 2


def test_the_demo_s_sampled_step_is_the_compute_verdict_s_precision_evidence():
    m = Monitor(sim.build("precision-measured", gpu_count=2))
    t = m.run_for(8)
    w = measured_work(t.snapshot.probes)
    assert w.compute_dtype == "float32" and not w.tf32 and w.capability == (9, 0)
    assert w.misaligned_share == pytest.approx(vocab_share(), rel=1e-6)
    assert w.tokens_per_step == 2 * 16 * 1024 and w.loss is not None
    d = t.diagnosis
    assert d.primary == "compute"
    text = " ".join(e.text for e in d.evidence)
    assert "TF32 off" in text and "N 50257" in text
    assert d.checks[0].startswith("Enable TF32")


def vocab_share() -> float:
    h, inter, layers, vocab = 768, 3072, 12, 50257
    return vocab * h / (layers * (3 * h * h + h * h + 2 * h * inter) + vocab * h)


def test_the_hello_carries_the_build_s_architectures_and_the_fault_reaches_it():
    s = sim.build("sync-measured", gpu_count=1)
    s.sim.state()
    (records,) = _records(s).values()
    hello = records[0]
    assert hello["kind"] == "hello" and "sm_90" in hello["arch_list"]
    assert hello["torch_cuda"] == "12.8" and hello["torch"].endswith("+cu128")
    bad = sim.build("sync-measured", gpu_count=1, faults="torch-arch:7.0;8.0")
    t = Monitor(bad).run_for(2)
    assert t.snapshot.probes[0].arch_list == ("sm_70", "sm_80")
    alerts = [a for a in t.diagnosis.alerts if a.kind == "driver_chain"]
    assert alerts and alerts[0].severity == "critical" and "sm_90" in alerts[0].text


def test_a_step_is_sampled_the_third_then_once_a_minute():
    every = [k for k in range(400) if P.sampled(k, 0.45)]
    assert every[0] == 3 and all(b - a == 135 for a, b in zip(every, every[1:], strict=False))
    assert all(P.sampled(k, 0.9) is (k >= 3 and (k - 3) % 68 == 0) for k in range(200))


def test_every_probed_scenario_samples_a_step():
    probed = [n for n, spec in SCENARIOS.items() if spec.get("probe")]
    assert {"input-measured", "sync-measured", "precision-measured"} <= set(probed)
    for name in probed:
        spec = SCENARIOS[name]["probe"]
        rec = P.sample_record(spec, 3, 0.0, 1.0, GPU_MODELS["H100"])
        assert sample_of(rec, 0.0) is not None and rec["flops"] > 0, name


def test_the_report_s_driver_chain_lists_a_missing_kernel_image():
    from gputop_diag.report.sections import driver_chain
    from gputop_diag.sanitize.sanitizer import Sanitizer

    bad = sim.build("sync-measured", gpu_count=2, faults="torch-arch:7.0;8.0")
    t = Monitor(bad).run_for(2)
    doc = driver_chain(t.snapshot, t.diagnosis, Sanitizer())
    assert doc["status"] == "broken"
    assert doc["layers"][-1] == {
        "layer": "kernel images",
        "version": "sm_70 sm_80",
        "read_from": "the probe's torch._C._cuda_getArchFlags() against NVML's compute capability",
    }
    (problem,) = doc["problems"]
    assert problem["code"] == "no_kernel_image" and problem["processes"] == 2
    assert "GPUs 0-1 (compute capability 9.0, sm_90)" in problem["text"]
    assert "no kernel image is available" in problem["error_text"]
    assert doc["verdict"].startswith("broken: ") and "TORCH_CUDA_ARCH_LIST" in doc["next_step"]
    good = Monitor(sim.build("sync-measured", gpu_count=2)).run_for(2)
    whole = driver_chain(good.snapshot, good.diagnosis, Sanitizer())
    assert whole["status"] == "ok" and whole["layers"][-1]["layer"] == "kernel images"
    assert not whole["problems"]
