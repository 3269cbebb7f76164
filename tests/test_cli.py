"""The command line as a user meets it: exit codes, help, JSON, and no Textual in headless runs."""

import ctypes.util
import json
import re
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
    parts = g["mem_reserved_bytes"] + g["mem_used_bytes"] + g["mem_free_bytes"]
    assert g["mem_reserved_bytes"] > 0 and parts == g["mem_total_bytes"]  # used: not the reserve
    assert g["mem_used_includes_reserved"] is False
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


def test_save_dir_help_says_where_s_and_S_write_by_default(tmp_path):
    """The help once promised the current directory, which `s` never tries."""
    from gputop_diag.cli import build_parser
    from gputop_diag.report.saving import save_dirs

    [action] = [a for a in build_parser()._actions if "--save-dir" in a.option_strings]
    said = " ".join(action.help.split())
    assert "current directory" not in said
    env = {"XDG_STATE_HOME": str(tmp_path / "state"), "TMPDIR": str(tmp_path / "tmp")}
    dirs = save_dirs(None, env)
    assert dirs == [str(tmp_path / "state" / "gputop-diag"), str(tmp_path / "tmp")]
    spelled = ["$XDG_STATE_HOME/gputop-diag", "~/.local/state/gputop-diag", "$TMPDIR or /tmp"]
    assert [said.index(s) for s in spelled] == sorted(said.index(s) for s in spelled)
    home = save_dirs(None, {"HOME": str(tmp_path)})[0]
    assert home == str(tmp_path / ".local" / "state" / "gputop-diag")


def _schema_table() -> tuple[dict[str, str], dict[str, str]]:
    """The README's `snapshot --json` table: (top-level key -> its row's meaning, `gpus[]` key
    -> meaning); `.x` after `gpus[].y` in a key cell is `gpus[].x`."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## `snapshot --json` schema") :]
    section = section[: section.index("\n## ", 5)]
    top, gpu = {}, {}
    for line in section.splitlines():
        if not line.startswith("| `"):
            continue
        key_cell, _, meaning = line[1:].split("|", 3)[:3]
        for name in re.findall(r"`([^`]+)`", key_cell):
            if name.startswith("gpus[].") or name.startswith("."):
                gpu[name.split(".", 1)[1].removesuffix("[]")] = meaning
            else:
                top[name.removesuffix("[]")] = meaning
    return top, gpu


def _documented(key: str, table: dict[str, str]) -> bool:
    import fnmatch

    return any(fnmatch.fnmatchcase(key, k) for k in table)


def test_the_snapshot_schema_table_is_what_snapshot_json_prints(capsys):
    """Every key `snapshot --json` prints is in the README's table and every key the table
    names is printed (`sanitized` and `redactions` under --sanitize); an object's keys are
    named in its row."""
    from gputop_diag.cli import main

    docs = []
    for scenario in ("mig", "compute-bound"):
        assert main(["--demo", scenario, "snapshot", "--json", "--rates"]) == 0  # GPM too
        docs.append(json.loads(capsys.readouterr().out))
    assert main(["--demo", "idle", "snapshot", "--json", "--sanitize"]) == 0
    docs.append(json.loads(capsys.readouterr().out))
    top, gpu = _schema_table()
    printed = {k for d in docs for k in d}
    printed_gpu = {k for d in docs for g in d["gpus"] for k in g}
    assert printed == set(top), printed ^ set(top)
    assert [k for k in printed_gpu if not _documented(k, gpu)] == []
    assert [k for k in gpu if "*" not in k and k not in printed_gpu] == []
    objects = {  # an object's (or an array of objects') keys, named in its row
        "system": [d["system"] for d in docs],
        "host": [d["host"] for d in docs],
        "processes": [p for d in docs for p in d["processes"]],
        "gpu_processes": [p for d in docs for p in d["gpu_processes"]],
    }
    gpu_objects = {
        "static": [g["static"] for d in docs for g in d["gpus"]],
        "mig_instances": [m for d in docs for g in d["gpus"] for m in g["mig_instances"]],
        "gpm": [g["gpm"] for d in docs for g in d["gpus"] if g["gpm"]],
    }
    for table, groups in ((top, objects), (gpu, gpu_objects)):
        for name, items in groups.items():
            assert items, name  # the scenarios above print some
            row = table[name]
            missing = {
                k for item in items for k in item if f"`{k}`" not in row and f"`{k}[" not in row
            }
            assert missing == set(), (name, missing)


def test_a_long_simulated_run_is_capped_and_says_its_progress():
    """`--seconds 1e9` under --demo ran for minutes without a sign: capped at 1,200 samples
    and, past a few seconds of wall-clock time, a progress line with the time left."""
    import io
    from types import SimpleNamespace

    from gputop_diag.commands import options

    seconds, note = options.capped(1e9, True, 1.0)
    assert seconds == options.MAX_SIMULATED_TICKS and "progress follows on stderr" in note
    assert options.capped(1e9, True, 120.0)[0] == options.MAX_SIMULATED_S  # a day at most
    assert options.capped(1e9, False, 1.0) == (1e9, None)  # a real machine's span is the user's
    wall = iter([0.0, 0.5, 3.5, 4.0, 7.0])
    out = io.StringIO()
    seen = []
    progress = options.SimulatedProgress(100.0, then=seen.append, clock=lambda: next(wall), out=out)
    for t in (1000.0, 1050.0, 1060.0, 1080.0):  # at 0.5, 3.5, 4 and 7 s of wall-clock time
        progress(SimpleNamespace(snapshot=SimpleNamespace(timestamp=t)))
    assert len(seen) == 4  # the command's own on_tick still runs
    assert out.getvalue().splitlines() == [
        "gputop-diag: simulated 50 of 100 s (50%), about 4 s left",
        "gputop-diag: simulated 80 of 100 s (80%), about 2 s left",
    ]
    assert options.with_progress(None, 30.0, False) is None
