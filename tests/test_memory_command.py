"""`gputop-diag memory` as a user meets it: the plan of a config.json as a table with its
what-ifs, the same figures in JSON, the machine's own GPUs (simulated here), and clear usage
errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputop_diag.cli import main
from gputop_diag.planner.gpus import GIB

CONFIGS = Path(__file__).parent / "data" / "configs"
LLAMA = str(CONFIGS / "llama-3-8b.json")
DONE_WHEN = [
    "memory", "--config", LLAMA, "--mode", "train", "--dtype", "bf16", "--optimizer", "adamw",
    "--batch", "8", "--seq", "4096", "--gpu", "H100-80GB",
]  # fmt: skip


def run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_plan_of_a_llama_config_as_text(capsys):
    rc, out, err = run(capsys, *DONE_WHEN)
    assert rc == 0 and err == ""
    assert out.startswith("Memory plan: llama, 8.03 B parameters")
    for term in ("weights", "gradients", "optimizer state (AdamW)", "activations", "logits"):
        assert f"\n{term} " in out
    assert "Korthikanti" in out and "ZeRO" in out  # each line says where it comes from
    assert "does NOT fit" in out and "largest batch that fits: none" in out
    for lever in (
        "mixed precision",
        "checkpointing: full",
        "smaller batch",
        "sharded optimizer: ZeRO-1",
        "shorter context",
        "KV cache in fp8",
        "fewer KV heads",
    ):
        assert f"  {lever} " in out, lever


def test_json_carries_the_same_figures(capsys):
    _, text, _ = run(capsys, *DONE_WHEN)
    rc, out, _ = run(capsys, *DONE_WHEN, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == "gputop-diag.memory/1"
    assert doc["model"]["parameters"] == 8030261248
    assert sum(t["bytes"] for t in doc["terms"]) == doc["total_bytes"]
    assert doc["fits"] is False and doc["headroom_bytes"] < 0
    for t in doc["terms"]:
        assert f"{t['bytes'] / GIB:.2f}" in text and t["formula"] in text
    for r in doc["what_ifs"]:
        assert r["lever"] in text
        if r["saves"] is not None:
            assert f"{r['saves'] / GIB:.2f}" in text
    assert doc["workload"] | {"batch": 8, "seq": 4096, "mode": "train"} == doc["workload"]


def test_shape_options_without_a_config(capsys):
    rc, out, _ = run(
        capsys, "memory", "--layers", "12", "--hidden", "768", "--heads", "12",
        "--intermediate", "3072", "--vocab", "50257", "--mode", "infer", "--batch", "4",
        "--seq", "1024", "--gpu", "24GB", "--json",
    )  # fmt: skip
    doc = json.loads(out)
    assert rc == 0 and doc["model"]["family"] == "custom"
    kv = next(t for t in doc["terms"] if t["term"] == "kv_cache")
    assert kv["bytes"] == 2 * 12 * 12 * 1024 * 64 * 4 * 2
    assert doc["fits"] is True and doc["largest_batch"] > 4


def test_params_replace_the_shape_s_count(capsys):
    rc, out, _ = run(capsys, *DONE_WHEN, "--params", "7B", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["model"]["parameters"] == 7_000_000_000
    assert any("--params 7,000,000,000 replaces" in n for n in doc["notes"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["memory", "--gpu", "H100"], "give --config FILE"),
        (
            ["memory", "--params", "7e9", "--layers", "32"],
            "give --config FILE, or the whole shape together: --layers, --hidden, --heads, "
            "--intermediate and --vocab (missing: --hidden, --heads, --intermediate, --vocab)",
        ),
        (
            [
                "memory",
                "--layers",
                "2",
                "--hidden",
                "0",
                "--heads",
                "2",
                "--intermediate",
                "8",
                "--vocab",
                "10",
            ],
            "--hidden must be a positive whole number, not 0\n",
        ),  # fmt: skip
        (["memory", "--config", "/nonexistent/config.json", "--gpu", "H100"], "no such file"),
        (["memory", "--config", LLAMA, "--gpu", "Voodoo5"], "not a GPU I know"),
        (["memory", "--config", LLAMA, "--gpu", "H100", "--batch", "0"], "--batch must be"),
        (["memory", "--config", LLAMA, "--gpu", "H100", "--zero", "2"], "give --world N"),
        (["memory", "--config", LLAMA, "--gpu", "H100", "--heads", "30"], "cannot share"),
    ],
)
def test_usage_errors_exit_2_with_a_clear_message(capsys, argv, message):
    rc, out, err = run(capsys, *argv)
    assert rc == 2 and out == ""
    assert message in err and "Traceback" not in err


def test_a_file_that_is_not_a_config(capsys, tmp_path):
    bad = tmp_path / "config.json"
    bad.write_text('{"model_type": "llama", ')
    rc, _, err = run(capsys, "memory", "--config", str(bad), "--gpu", "H100")
    assert rc == 2 and "not JSON (line 1" in err
    bad.write_text('{"model_type": "t5", "d_model": 512}')
    rc, _, err = run(capsys, "memory", "--config", str(tmp_path), "--gpu", "H100")
    assert rc == 2 and "'t5' is not one the planner reads" in err


def test_the_machine_s_own_gpus(capsys):
    """Without --gpu: the GPUs NVML reports (the simulator's 8 H100s), less the driver's
    reserve."""
    rc, out, _ = run(capsys, "--demo", "capacity", "memory", "--config", LLAMA, "--json")
    doc = json.loads(out)
    assert rc == 0
    gpu = doc["gpu"]
    assert gpu["name"] == "NVIDIA H100 80GB HBM3" and gpu["count"] == 8
    assert gpu["bytes"] == (81559 - 470) * 2**20 and gpu["source"] == "simulated (--demo)"


def test_no_gpu_here_prints_the_plan_says_so_and_exits_0(capsys):
    """A calculator that answered exits 0: the plan says it had nothing to fit against."""
    rc, out, err = run(capsys, "--demo", "no-gpu", "memory", "--config", LLAMA)
    assert rc == 0
    assert "Memory plan: llama" in out and "no GPU to fit against (none usable here)" in out
    assert "GPU memory" not in out and "largest batch" not in out
    assert "next: give --gpu MODEL" in err
    rc, out, _ = run(capsys, "--demo", "no-gpu", "memory", "--config", LLAMA, "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["gpu"] is None and doc["fits"] is None


def test_sanitize_hides_the_config_path(capsys, tmp_path):
    private = tmp_path / "alice-secret-model"
    private.mkdir()
    (private / "config.json").write_text(Path(LLAMA).read_text())
    rc, out, _ = run(capsys, "memory", "--config", str(private), "--gpu", "H100", "--sanitize")
    assert rc == 0 and "Memory plan: llama" in out
    assert "alice-secret-model" not in out and str(tmp_path) not in out


def test_a_recording_s_gpus(capsys, tmp_path):
    rec = str(tmp_path / "r.jsonl")
    assert main(["--demo", "idle", "record", "-o", rec, "--seconds", "2"]) == 0
    capsys.readouterr()
    rc, out, _ = run(capsys, "--replay", rec, "memory", "--config", LLAMA, "--json")
    gpu = json.loads(out)["gpu"]
    assert rc == 0 and gpu["source"] == "NVML in the recording" and gpu["count"] == 8


def test_the_capacity_scenario_says_training(capsys):
    """The capacity demo is a training job: its checks come from the planner, in training
    words, never the inference KV-cache formula."""
    assert main(["--demo", "capacity", "diagnose", "--seconds", "20", "--json"]) == 0
    checks = json.loads(capsys.readouterr().out)["checks"]
    assert checks[0].startswith("Where does the memory go? Training keeps 16 bytes")
    assert not any("KV" in c or "inference" in c.lower() for c in checks)


MIXTRAL = str(CONFIGS / "mixtral-8x7b.json")
MIXTRAL_INFER = [
    "memory", "--config", MIXTRAL, "--mode", "infer", "--batch", "8", "--seq", "4096",
    "--flash-attention", "--gpu", "H100-80GB",
]  # fmt: skip


def test_mixtral_on_one_h100_names_the_levers_that_make_it_fit(capsys):
    rc, out, _ = run(capsys, *MIXTRAL_INFER)
    assert rc == 0 and "does NOT fit" in out
    for lever, change in (
        ("weights in int8", "bf16 → int8 weights (weight-only)"),
        ("weights in int4", "bf16 → int4 weights (weight-only)"),
        ("tensor parallelism", "1 → 2 GPUs (--tp 2)"),
    ):
        line = next(x for x in out.splitlines() if x.startswith(f"  {lever} "))
        assert change in line and "  yes  (" in line, line


def test_quant_and_tp_plan_one_gpu_of_the_group(capsys):
    rc, out, _ = run(capsys, *MIXTRAL_INFER, "--quant", "int4", "--tp", "2", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["fits"] is True
    assert (doc["workload"]["quant"], doc["workload"]["tp"]) == ("int4", 2)
    weights = next(t for t in doc["terms"] if t["term"] == "weights")
    assert weights["label"] == "weights (int4, weight-only)" and "--tp 2" in weights["formula"]
    assert doc["model"]["parameters"] == 46_702_792_704  # the model's, not the GPU's share
    rc, text, _ = run(capsys, *MIXTRAL_INFER, "--quant", "int4", "--tp", "2")
    text = " ".join(text.split())  # the workload line wraps
    assert "int4 weights (weight-only), bf16 compute" in text
    assert "one GPU of 2 (tensor parallelism)" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mode", "train", "--quant", "int8"], "weight-only quantisation for inference"),
        (["--mode", "train", "--tp", "2"], "--tp is modelled for inference"),
        (["--mode", "infer", "--tp", "3"], "32 attention heads cannot be split evenly"),
        (["--mode", "infer", "--tp", "0"], "--tp must be at least 1"),
        (["--mode", "infer", "--dtype", "fp8", "--quant", "int4"], "give --dtype bf16 or fp16"),
    ],
)
def test_quant_and_tp_usage_errors(capsys, extra, message):
    rc, out, err = run(capsys, "memory", "--config", LLAMA, "--gpu", "H100", *extra)
    assert rc == 2 and out == "" and message in err and "Traceback" not in err


def test_the_gpu_line_says_where_the_size_came_from(capsys):
    _, out, _ = run(capsys, "memory", "--config", LLAMA, "--gpu", "H100-80GB")
    line = next(x for x in out.splitlines() if x.startswith("  GPU: "))
    assert "(nvml)" not in line
    assert line.endswith("compute capability 9.0 (from --gpu: what NVML reports on that model)")
    _, out, _ = run(capsys, "memory", "--config", LLAMA, "--gpu", "B200-180GB")
    assert "(from --gpu: the data sheet's capacity)" in out
    _, out, _ = run(capsys, "memory", "--config", LLAMA, "--gpu", "V100-32GB")  # NVML's 32510 MiB
    assert "31.75 GiB" in out and "(from --gpu: what NVML reports on that model)" in out
    _, out, _ = run(capsys, "memory", "--config", LLAMA, "--gpu", "40GiB", "--json")
    gpu = json.loads(out)["gpu"]
    assert (gpu["origin"], gpu["source"], gpu["compute_capability"]) == ("--gpu", "given", None)
    _, out, _ = run(capsys, "--demo", "capacity", "memory", "--config", LLAMA, "--json")
    gpu = json.loads(out)["gpu"]
    assert (gpu["origin"], gpu["compute_capability"]) == ("NVML", [9, 0])


@pytest.mark.parametrize(
    ("argv", "subject", "needs", "has"),
    [
        (["--dtype", "bf16", "--gpu", "V100-32GB"], "bf16 compute", "8.0", "7.0"),
        (["--mode", "infer", "--dtype", "fp8", "--gpu", "A100-80GB"], "fp8 compute", "8.9", "8.0"),
        (["--dtype", "bf16", "--gpu", "Tesla T4"], "bf16 compute", "8.0", "7.5"),
    ],
)
def test_a_dtype_the_gpu_lacks_is_a_warning_in_text_and_json(capsys, argv, subject, needs, has):
    rc, out, _ = run(capsys, "memory", "--config", LLAMA, *argv)
    assert rc == 0
    assert f"Precision on this GPU (compute capability {has}):" in out
    assert f"warning: {subject} needs compute capability {needs}" in out
    assert f"this GPU has {has}" in out
    rc, out, _ = run(capsys, "memory", "--config", LLAMA, *argv, "--json")
    (check,) = json.loads(out)["precision_checks"]
    assert (check["subject"], check["needs"], check["severity"]) == (subject, needs, "warning")
    assert check["instead"] and check["source"].startswith("https://")


def test_a_dtype_the_gpu_has_says_nothing(capsys):
    for gpu in ("H100", "A100-80GB", "L4"):
        _, out, _ = run(capsys, "memory", "--config", LLAMA, "--dtype", "bf16", "--gpu", gpu)
        assert "Precision" not in out, gpu


def test_the_readme_names_the_options_memory_needs_together():
    """The README's line for `memory` and the usage error ask for the same options."""
    readme = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")
    line = next(x for x in readme.splitlines() if x.startswith("| `gputop-diag memory "))
    assert "--params N --layers L …)" not in line
    for option in ("--layers", "--hidden", "--heads", "--intermediate", "--vocab", "--params"):
        assert option in line, option
