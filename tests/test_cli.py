"""The command line as a user meets it: exit codes, help, JSON, and no Textual in headless runs."""

import ctypes.util
import json
import subprocess
import sys

import pytest

HEADLESS = [
    ["snapshot", "--json", "--demo", "idle"],
    ["snapshot", "--demo", "compute-bound"],
    ["diagnose", "--seconds", "5", "--json", "--demo", "compute-bound"],
    ["demo", "--list"],
    ["xid", "--json", "--demo", "xid-79"],
    ["xid", "--demo", "xid-app"],
]


@pytest.mark.parametrize("argv", HEADLESS, ids=lambda a: " ".join(a))
def test_headless_commands_do_not_import_textual(argv):
    code = (
        "import sys, io, contextlib\n"
        "from gputop_diag.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        f"    rc = main({argv!r})\n"
        "bad = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(rc, bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    rc, bad = out.stdout.strip().split(" ", 1)
    assert bad == "[]", f"headless {argv} imported {bad}"
    assert rc == "0"


def test_snapshot_json_schema(cli):
    r = cli("snapshot", "--json", "--demo", "idle")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "gputop-diag.snapshot/1"
    assert len(doc["gpus"]) == 8
    g = doc["gpus"][0]
    assert g["static"]["name"].startswith("NVIDIA H100")
    assert g["mem_total_bytes"] >= g["mem_used_bytes"] >= g["mem_reserved_bytes"] >= 0
    assert g["static"]["device_node"] == f"/dev/nvidia{g['static']['minor_number']}"
    assert doc["system"]["driver_max_cuda"]
    assert doc["host"]["cpu_count"] > 0


def test_bare_demo_before_a_subcommand_means_the_tour(cli):
    r = cli("--demo", "snapshot", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["schema"] == "gputop-diag.snapshot/1"


def test_no_gpu_scenario_exits_3_with_host_part_and_next_step(cli):
    r = cli("snapshot", "--demo", "no-gpu")
    assert r.returncode == 3
    assert "host: CPU" in r.stdout
    assert "no NVIDIA driver" in r.stdout
    assert "next:" in r.stdout


def test_no_gpu_json_still_prints_a_document_and_reason_on_stderr(cli):
    r = cli("snapshot", "--json", "--demo", "no-gpu")
    assert r.returncode == 3
    doc = json.loads(r.stdout)
    assert doc["gpus"] == []
    assert doc["errors"][0]["source"] == "nvml"
    assert "next:" in r.stderr


@pytest.mark.skipif(ctypes.util.find_library("nvidia-ml") is not None, reason="a driver is here")
def test_real_machine_without_driver_exits_3(cli):
    """This machine has no NVIDIA driver: the real sources must say so, not crash."""
    r = cli("snapshot")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "libnvidia-ml.so.1" in r.stdout
    assert "host: CPU" in r.stdout


def test_unknown_scenario_is_a_usage_error(cli):
    r = cli("snapshot", "--demo", "no-such-scenario")
    assert r.returncode == 2
    assert "idle" in r.stderr  # the message lists the valid names


def test_bad_option_is_a_usage_error(cli):
    assert cli("snapshot", "--no-such-flag").returncode == 2


def test_demo_list_names_every_scenario(cli):
    r = cli("demo", "--list")
    assert r.returncode == 0
    for name in (
        "idle",
        "compute-bound",
        "bandwidth-bound",
        "input-starved",
        "sync-stall",
        "comm-bound",
        "capacity",
        "memory-leak",
        "thermal-throttle",
        "xid-79",
        "xid-app",
        "driver-mismatch",
        "scheduler-wait",
        "mig",
        "no-gpu",
        "tour",
    ):
        assert name in r.stdout


def test_help_lists_commands_and_exit_codes(cli):
    r = cli("--help")
    assert r.returncode == 0
    assert "snapshot" in r.stdout and "diagnose" in r.stdout and "3 no usable" in r.stdout


def test_redacted_snapshot_scrubs_identifiers_in_free_text():
    from gputop_diag.sanitize.snapshot import redact_snapshot_json

    doc = {
        "system": {"hostname": "gpu-node-07"},
        "gpus": [],
        "processes": [
            {
                "user": "alice",
                "cmdline": ["/home/alice/venv/bin/python", "x.py"],
                "name": "python",
                "cuda_visible_devices": "GPU-8a47641b-dff6",
            }
        ],
        "xid_events": [{"pci_bus_id": "0000:3b:00", "message": "x", "process_name": "p"}],
        "errors": [
            {
                "message": "PermissionError: /home/alice/.cache on gpu-node-07 for "
                "GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d at 00000000:3B:00.0",
                "next_step": "ask alice on gpu-node-07 (10.1.2.3)",
            }
        ],
    }
    out = str(redact_snapshot_json(doc))
    for secret in ("gpu-node-07", "alice", "8a47641b", "3B:00", "3b:00", "10.1.2.3", "/home/"):
        assert secret not in out, secret


def test_diagnose_takes_the_top_level_interval(cli):
    r = cli("--interval", "-1", "diagnose", "--demo", "idle")
    assert r.returncode == 2
    r = cli("--interval", "2", "diagnose", "--demo", "idle", "--seconds", "10", "--json")
    assert r.returncode == 0


def test_a_full_disk_is_a_clear_message_not_a_bug_report():
    import subprocess
    import sys

    with open("/dev/full", "w") as full:
        p = subprocess.run(
            [sys.executable, "-m", "gputop_diag", "--demo", "idle", "snapshot"],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    assert p.returncode == 1 and "cannot write the output: No space left" in p.stderr
    assert "please report" not in p.stderr and "Traceback" not in p.stderr


def test_debug_is_an_option_and_shows_the_traceback(monkeypatch, capsys):
    import pytest

    from gputop_diag import cli

    def boom(args, feed):
        raise RuntimeError("bang")

    monkeypatch.setattr("gputop_diag.commands.snapshot.run", boom)
    assert cli.main(["--demo", "idle", "snapshot"]) == 1
    assert "unexpected failure: RuntimeError: bang" in capsys.readouterr().err
    with pytest.raises(RuntimeError):
        cli.main(["--debug", "--demo", "idle", "snapshot"])


def test_demo_with_a_recording_is_a_usage_error(capsys):
    from gputop_diag.cli import main

    with pytest.raises(SystemExit) as e:
        main(["--replay", "any.jsonl", "demo", "--list"])
    assert e.value.code == 2 and "reads no recording" in capsys.readouterr().err
