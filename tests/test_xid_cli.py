"""`gputop-diag xid` as a user meets it: the route before the events, the JSON document, the
simulator's scenarios, a recording's history, --sanitize, --since, bad arguments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gputop_diag.cli import main
from gputop_diag.commands.xid import parse_since

DATA = Path(__file__).parent / "data" / "kernlog"


def xid(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["xid", *argv]) if argv[:1] != ("--demo",) else main([*argv[:2], "xid", *argv[2:]])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_demo_gpu_lost_json(capsys):
    rc, out, _ = xid(capsys, "--demo", "xid-79", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == "gputop-diag.xid/1" and doc["readable"]
    assert [s["name"] for s in doc["sources"]] == ["journal", "dmesg"]
    assert doc["sources"][1]["status"] == "skipped"  # the journal holds this boot
    (first,) = doc["route"]
    assert (first["code"], first["device"], first["severity"]) == (79, "GPU 3", "critical")
    assert first["question"].endswith("?") and first["action"].startswith("drain the node")
    assert {"first": "Xid 79 FALLEN_OFF_BUS", "then": "NVML: GPU lost"}.items() <= next(
        c for c in doc["chains"] if c["then"] == "NVML: GPU lost"
    ).items()
    kinds = sorted(e["kind"] for e in doc["events"])
    assert kinds == ["xid"]  # the driver's "fallen off the bus" line is the same event
    assert doc["lost_gpus"] == ["GPU 3"]
    e = next(e for e in doc["events"] if e["kind"] == "xid")
    assert e["gpu_uuid"].startswith("GPU-") and e["pci_bus_id"] and e["raw"].startswith("NVRM: Xid")


def test_text_leads_with_the_question_then_the_action(capsys):
    rc, out, _ = xid(capsys, "--demo", "xid-app")
    assert rc == 0
    route = out.index("Route, most urgent first")
    events = out.index("Events, newest first")
    assert route < out.index("Patterns") < events
    first = out[route:]
    assert first.index("ask:") < first.index("then:")
    assert "Xid 13 GR_EXCEPTION ×2 on GPU 5" in out
    assert "repeated Xid on one device" in out and "same physical GPU, same job type" in out
    assert "follow-ups, triaged with the Xid they follow: Xid 43 RESET_CHANNEL ×3" in out
    assert "pt_main_thread" in out and "Graphics SM Warp Exception" in out  # local: all of it


def test_sanitize_keeps_codes_classes_counts_and_the_route_only(capsys):
    rc, out, _ = xid(capsys, "--demo", "xid-app", "--json")
    doc = json.loads(out)
    secrets = {
        doc["events"][0]["gpu_uuid"],
        doc["events"][0]["pci_bus_id"],
        "pt_main_thread",
        str(doc["events"][0]["pid"]),
        "Graphics SM Warp",
        "MMU Fault",
        "gpu-node-07",
    }
    for argv in (["--json"], []):
        rc = main(["--sanitize", "--demo", "xid-app", "xid", *argv])
        text = capsys.readouterr().out
        assert rc == 0
        for s in secrets:
            assert s not in text, s
        assert "Xid 13 GR_EXCEPTION ×2 on GPU 5" in text or '"device": "GPU 5"' in text
    rc = main(["--demo", "xid-app", "xid", "--sanitize"])  # after the command, too
    assert rc == 0 and "pt_main_thread" not in capsys.readouterr().out
    doc = json.loads(
        (main(["--sanitize", "--demo", "xid-app", "xid", "--json"]), capsys.readouterr().out)[1]
    )
    assert doc["sanitized"] and doc["route"][0]["count"] == 2 and doc["route"][0]["question"]
    assert all(e["raw"] is None and e["detail"] is None for e in doc["events"])
    finding = doc["findings"][0]
    assert (
        finding["evidence"] == "repeated Xid on one device" and "one process" in finding["detail"]
    )


def test_files_only_does_not_read_this_machine(capsys):
    rc, out, _ = xid(capsys, "--log", str(DATA / "kern.log"), "--since", "all", "--json")
    doc = json.loads(out)
    assert rc == 0 and [s["name"] for s in doc["sources"]] == [str(DATA / "kern.log")]
    assert "files only" in doc["note"]
    titles = [g["title"] for g in doc["route"]]
    assert set(titles) == {
        "RmInitAdapter failed",
        "driver API mismatch",
        "Xid 48 ECC_DBE",
        "Xid 64 ROW_REMAP_FAILURE",
    }
    assert titles[0] == "RmInitAdapter failed"  # equally critical: the latest leads
    assert any(c["then"] == "Xid 64 ROW_REMAP_FAILURE" for c in doc["chains"])
    devices = {e["gpu_uuid"] for e in doc["events"] if e["kind"] == "xid"}
    assert devices == {"GPU-0b1c2d3e-aaaa-bbbb-cccc-ddddeeeeffff"}  # from the driver's own line
    init = next(e for e in doc["events"] if e["kind"] == "init_failed")
    assert init["minor"] == 3
    assert any(f["evidence"] == "Xid after driver update" for f in doc["findings"])


def test_several_files_and_formats_at_once(capsys):
    argv = []
    for name in ("dmesg-T.txt", "kern.log", "journal-short.txt"):
        argv += ["--log", str(DATA / name)]
    rc, out, _ = xid(capsys, *argv, "--since", "all", "--limit", "0")
    assert rc == 0
    for text in (
        "Xid 109 CTXSW_TIMEOUT",
        "Xid 149 NVLINK_NETIR_ERROR",
        "Xid 64",
        "RmInitAdapter",
        "NVLink training",
        "driver API mismatch",
        "Xid 154: GPU Reset Required",
    ):
        assert text in out, text


def test_replay_joins_the_recorded_history(tmp_path, capsys):
    rec = tmp_path / "run.jsonl"
    assert main(["--demo", "xid-app", "record", "-o", str(rec), "--seconds", "200"]) == 0
    capsys.readouterr()
    rc, out, _ = xid(capsys, "--replay", str(rec), "--json", "--since", "all")
    doc = json.loads(out)
    assert rc == 0 and doc["note"].startswith(f"recording {rec}")
    assert {g["code"] for g in doc["route"]} == {13, 31}
    (load,) = [f for f in doc["findings"] if f["evidence"] == "Xid during high utilization"]
    assert "% busy" in load["detail"] and "pid " in load["detail"]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("30m", 1000.0 - 1800),
        ("24h", 1000.0 - 86400),
        ("7d", 1000.0 - 7 * 86400),
        ("2w", 1000.0 - 14 * 86400),
        ("90s", 910.0),
        ("all", None),
        ("boot", 500.0),
        ("2026-01-15", 1768435200.0),
        ("2026-01-15T09:00", 1768467600.0),
        ("2026-01-15T09:00:00+01:00", 1768464000.0),
    ],
)
def test_since(text, want):
    assert parse_since(text, 1000.0, 500.0) == want


def test_bad_arguments_are_usage_errors(capsys, tmp_path):
    rc, _, err = xid(capsys, "--since", "last tuesday")
    assert rc == 2 and "--since" in err and "7d" in err
    rc, _, err = xid(capsys, "--log", str(tmp_path / "nope.log"))
    assert rc == 2 and "no such file" in err
    rc, _, err = xid(capsys, "--limit", "-1")
    assert rc == 2
    rc, _, err = xid(capsys, "--since", "")  # an empty window is a mistake, not "everything"
    assert rc == 2 and "--since" in err


def test_source_counts_are_of_the_window_asked_for(tmp_path, capsys):
    log = tmp_path / "kern.log"
    log.write_text(
        "2026-01-14T08:00:00+00:00 node kernel: NVRM: Xid (PCI:0000:3b:00): 13, pid=11, "
        "name=python, Graphics SM Warp Exception\n"
        "2026-01-15T10:12:00+00:00 node kernel: NVRM: Xid (PCI:0000:3b:00): 31, pid=12, "
        "name=python, Ch 00000010, intr 10000000. MMU Fault\n"
    )
    rc, out, _ = xid(capsys, "--log", str(log), "--since", "all", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["sources"][0]["events"] == 2 and len(doc["events"]) == 2
    rc, out, _ = xid(capsys, "--log", str(log), "--since", "2026-01-15", "--json")
    doc = json.loads(out)
    assert [e["code"] for e in doc["events"]] == [31]
    assert doc["sources"][0]["events"] == 1  # the day before is outside the window


def test_nothing_found_says_so(tmp_path, capsys):
    quiet = tmp_path / "quiet.log"
    quiet.write_text("[ 1.0] usb 1-1: new device\n")
    rc, out, _ = xid(capsys, "--log", str(quiet))
    assert rc == 0 and "nothing to triage" in out


def test_an_old_log_named_is_read_whole_and_a_window_says_what_it_left_out(tmp_path, capsys):
    old = tmp_path / "a.log"
    old.write_text(
        "2020-01-01T10:00:00+00:00 node kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1234, "
        "name=python, GPU has fallen off the bus.\n"
    )
    rc, out, _ = xid(capsys, "--log", str(old), "--json")  # a file named: everything in it
    doc = json.loads(out)
    assert rc == 0 and doc["since"] is None and [e["code"] for e in doc["events"]] == [79]
    assert doc["older"] == 0 and doc["sources"][0]["older"] == 0
    rc, out, _ = xid(capsys, "--log", str(old), "--since", "7d")
    assert rc == 0 and f"{old}: 0 events, 1 older than --since" in out
    assert "1 event older than --since left out" in out and "--since all" in out
    assert "in what was read: nothing to triage" not in out  # something was read: too old
    copy = tmp_path / "b.log"  # the same line in a second file (kern.log and syslog)
    copy.write_text(old.read_text())
    rc, out, _ = xid(capsys, "--log", str(old), "--log", str(copy), "--since", "7d", "--json")
    doc = json.loads(out)
    assert doc["events"] == [] and [s["older"] for s in doc["sources"]] == [1, 1]
    assert doc["older"] == 1  # the same line in two sources is one event
