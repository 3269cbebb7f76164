"""`gputop-diag report` as a user meets it: a report for every scenario, the golden layout, the
command's options (Markdown or JSON, -o, --private-map, --seconds, --replay), failing closed,
and no Textual in the headless path."""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from test_report_leaks import contains_word

from gputop_diag import __version__, sim
from gputop_diag.cli import _add_common
from gputop_diag.commands import report as report_cmd
from gputop_diag.monitor.core import Monitor
from gputop_diag.recording.store import Recording
from gputop_diag.recording.writer import write_recording
from gputop_diag.report import build as report
from gputop_diag.report import sections as report_sections
from gputop_diag.report.build import REPORT_SCHEMA, SECTIONS, ReportSource, make_report
from gputop_diag.sanitize.sanitizer import Sanitizer


@pytest.fixture(autouse=True)
def _known_shell(monkeypatch):
    """Under --demo the simulated shell takes CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER,
    GPU_DEVICE_ORDINAL and SLURM_* from the real one: these tests need the scenario's."""
    for k in list(os.environ):
        if k in sim.PASSED_ENV or k.startswith(sim.PASSED_ENV_PREFIX):
            monkeypatch.delenv(k)


GOLDEN = Path(__file__).parent / "data" / "report" / "capacity.md"
GOLDEN_KEY = b"gputop-diag golden report key 01"
REGEN = "GPUTOP_DIAG_REGEN_GOLDEN"


def window(scenario: str, seconds: float = 20, sources=None):
    sources = sources or sim.build(scenario)
    m = Monitor(sources)
    m.run_for(seconds)
    return list(m.history.snapshots()), m.last.diagnosis, sources


def identifiers(snaps) -> set[str]:
    """What names the simulated machine and its people."""
    out = {snaps[-1].system.hostname, "alice", "bob", "/home/"}
    for s in snaps:
        for g in s.gpus:
            out |= {g.static.uuid, g.static.serial, g.static.pci_bus_id}
            out |= {m.uuid for m in g.mig_instances}
        out |= {j.job_id for j in s.scheduler_jobs or ()} | {j.name for j in s.scheduler_jobs or ()}
    return {x for x in out if x}


@pytest.mark.parametrize("scenario", [s.name for s in sim.list_scenarios()])
def test_every_scenario_makes_a_report(scenario):
    snaps, diag, sources = window(scenario)
    r = make_report(
        snaps,
        diag,
        source=ReportSource("simulator", scenario),
        environ=sources.environ,
        sources=sources,
    )
    assert r.left_out == []
    assert r.doc["schema"] == REPORT_SCHEMA and r.doc["sanitized"] is True
    assert set(SECTIONS) <= set(r.doc)
    assert r.doc["diagnosis"]["primary"] == diag.primary
    md = r.markdown
    assert md.startswith(f"# gputop-diag report: {diag.primary.replace('_', ' ')}")
    for title in (
        "## Diagnosis",
        "## Memory and headroom",
        "## Device mapping",
        "## Xid events",
        "## What was redacted",
    ):
        assert title in md
    text = md + json.dumps(r.doc, ensure_ascii=False)
    leaked = sorted(x for x in identifiers(snaps) if contains_word(text, x))
    assert not leaked
    assert json.loads(json.dumps(r.doc)) == r.doc
    # what a reader needs survives: the GPU model and the driver
    if snaps[-1].gpus:
        assert snaps[-1].gpus[0].static.name in md
        assert snaps[-1].system.driver_version in md


def _golden_report() -> str:
    snaps, diag, sources = window("capacity", 30)
    r = make_report(
        snaps,
        diag,
        source=ReportSource("simulator", "capacity"),
        environ=sources.environ,
        sources=sources,
        sanitizer=Sanitizer(GOLDEN_KEY),
    )
    return r.markdown.replace(f"gputop-diag {__version__},", "gputop-diag VERSION,")


def test_the_golden_report_pins_the_layout():
    """The capacity scenario under a fixed key. After a deliberate change of the report (or of
    the diagnosis's words), regenerate: GPUTOP_DIAG_REGEN_GOLDEN=1 python -m pytest
    tests/test_report.py -k golden, and read the diff."""
    md = _golden_report()
    if os.environ.get(REGEN):
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(md, encoding="utf-8")
    assert md == GOLDEN.read_text(encoding="utf-8")


def test_a_section_that_cannot_be_sanitized_is_left_out_with_a_note(monkeypatch):
    snaps, diag, sources = window("capacity", 10)
    raw_cmd = " ".join(snaps[-1].processes[0].cmdline)

    def careless(last, s):  # a bug: raw command lines and user names
        rows = [
            {"gpu": 0, "pid": p.pid, "user": p.user, "command": " ".join(p.cmdline or ())}
            for p in last.processes
        ]
        return {"processes": rows, "more": 0}

    monkeypatch.setattr(report_sections, "processes", careless)
    r = make_report(snaps, diag, source=ReportSource("live"), environ=sources.environ)
    assert [x["section"] for x in r.left_out] == ["processes"]
    assert "could not be sanitized with confidence" in r.left_out[0]["reason"]
    assert "processes" not in r.doc and "## GPU processes" not in r.markdown
    assert "**Left out: GPU processes**: could not be sanitized with confidence" in r.markdown
    assert "alice" not in r.markdown and raw_cmd not in r.markdown
    assert "alice" not in r.left_out[0]["reason"]  # the note names the class, not the leak


def test_a_section_that_fails_to_build_is_left_out(monkeypatch):
    snaps, diag, _ = window("compute-bound", 5)
    monkeypatch.setattr(report_sections, "xid", lambda snaps: 1 / 0)
    r = make_report(snaps, diag, source=ReportSource("live"))
    assert r.left_out == [{"section": "xid", "reason": "could not be built (ZeroDivisionError)"}]
    assert "**Left out: Xid events**" in r.markdown


def test_saving_writes_both_formats_and_never_over_a_file(tmp_path):
    from datetime import datetime

    snaps, diag, _ = window("idle", 3)
    r = make_report(snaps, diag, source=ReportSource("live"))
    stem = report.default_stem(datetime(2026, 1, 15, 10, 0, 0))
    assert stem == "gputop-diag-report-20260115-100000"
    first = report.save_report(r, str(tmp_path), stem)
    second = report.save_report(r, str(tmp_path), stem)
    assert [os.path.basename(p) for p in first + second] == [
        f"{stem}.md",
        f"{stem}.json",
        f"{stem}-2.md",
        f"{stem}-2.json",
    ]
    assert Path(first[0]).read_text() == r.markdown
    assert json.loads(Path(first[1]).read_text()) == r.doc
    with pytest.raises(OSError):
        report.save_report(r, str(tmp_path / "missing"), stem)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        os.path.basename(p) for p in first + second
    )


def test_helpers_read_well():
    assert report_sections.gpu_list([0, 1, 2, 3, 5, 7, 8]) == "0–3, 5, 7, 8"
    assert report_sections.sparkline([0, 50, 100, None]) == "▁▅█ "
    assert report_sections.sparkline([100.0] * 90) == "█" * 30


# -- the command -------------------------------------------------------------------------------


def parse(*argv: str) -> argparse.Namespace:
    """The report subcommand's options as cli.py builds them (top-level defaults included)."""
    p = argparse.ArgumentParser()
    p.set_defaults(interval=1.0, sanitize=False)
    _add_common(p, top=False)
    report_cmd.add_arguments(p)
    return p.parse_args(list(argv))


def run(feed, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = report_cmd.run(parse(*argv), feed)
    return rc, out.getvalue(), err.getvalue()


def test_markdown_on_stdout_by_default():
    rc, out, err = run(sim.build("compute-bound"), "--seconds", "10")
    assert rc == 0 and out.startswith("# gputop-diag report: compute") and err == ""
    assert "gpu-node-07" not in out


def test_json_with_its_schema_and_the_window_asked_for():
    rc, out, _ = run(sim.build("input-starved"), "--format", "json", "--seconds", "15")
    doc = json.loads(out)
    assert rc == 0 and doc["schema"] == "gputop-diag.report/1"
    assert doc["window"]["samples"] == 16 and doc["window"]["seconds"] == 15
    rc2, out2, _ = run(sim.build("input-starved"), "--json", "--seconds", "15")
    assert json.loads(out2)["window"] == doc["window"]
    assert run(sim.build("idle"), "--json", "--format", "md")[0] == 2


def test_output_file_and_private_map(tmp_path):
    out, pm = tmp_path / "report.md", tmp_path / "private.json"
    rc, stdout, err = run(
        sim.build("capacity"), "--seconds", "10", "-o", str(out), "--private-map", str(pm)
    )
    assert rc == 0 and stdout == ""
    assert f"wrote the sanitized report to {out}" in err and "never share it" in err
    md = out.read_text()
    assert stat.S_IMODE(pm.stat().st_mode) == 0o600
    reverse = json.loads(pm.read_text())["pseudonyms"]
    host = re.search(r"\*\*Machine:\*\* (host-[a-z2-7]+)", md).group(1)
    assert reverse[host]["original"] == "gpu-node-07"
    assert "gpu-node-07" not in md and str(pm) not in md


def test_the_private_map_never_goes_with_the_report(tmp_path):
    f = str(tmp_path / "x.md")
    for argv in (("-o", f, "--private-map", f), ("--private-map", "-")):
        rc, out, err = run(sim.build("idle"), "--seconds", "2", *argv)
        assert rc == 2 and out == "" and "--private-map needs a file of its own" in err
    assert not os.path.exists(f)


def test_bad_seconds_and_unwritable_output(tmp_path):
    assert run(sim.build("idle"), "--seconds", "-1")[0] == 2
    rc, out, err = run(sim.build("idle"), "--seconds", "2", "-o", str(tmp_path / "no" / "r.md"))
    # said before the sampling, as record says it: a usage error, nothing printed
    assert rc == 2 and "cannot write" in err and out == "" and "sampling" not in err


def test_no_driver_still_reports_and_exits_3():
    rc, out, err = run(sim.build("no-gpu"), "--seconds", "5")
    assert rc == 3 and "no NVIDIA driver" in err
    assert "## Driver chain" in out and "broken: no NVIDIA driver" in out


def test_a_report_of_a_recording(tmp_path):
    snaps, _, _ = window("xid-app", 40)  # the first Xid comes at 35 s
    path = str(tmp_path / "r.jsonl")
    write_recording(path, snaps)
    rc, out, _ = run(Recording.open(path), "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["source"] == {"kind": "recording", "scenario": None}
    assert doc["window"]["samples"] == len(snaps)
    assert {c["xid"] for c in doc["xid"]["codes"]} >= {13}
    assert str(tmp_path) not in out and "r.jsonl" not in out


def test_sanitize_is_accepted_after_the_command():
    assert parse("--sanitize").sanitize is True
    assert parse().sanitize is False  # the top-level default stays


def test_the_report_command_does_not_import_textual(tmp_path):
    code = (
        "import sys, io, contextlib, argparse\n"
        "from gputop_diag import sim\n"
        "from gputop_diag.commands import report\n"
        "p = argparse.ArgumentParser(); p.set_defaults(interval=1.0)\n"
        "report.add_arguments(p)\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = report.run(p.parse_args(['--seconds', '3']), sim.build('idle'))\n"
        "print(rc, sorted(m for m in sys.modules if m.split('.')[0] == 'textual'))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0 []"


def test_the_report_judges_the_driver_chain_as_the_driver_command_does():
    snaps, diag, sources = window("driver-mismatch", 10)
    r = make_report(
        snaps, diag, source=ReportSource("simulator", "driver-mismatch"), environ=sources.environ
    )
    chain = r.doc["driver_chain"]
    assert chain["status"] == "broken" and chain["problems"][0]["code"] == "runtime_too_new"
    assert "CUDA driver version is insufficient for CUDA runtime version" in r.markdown
    assert "kernel module 550.54.15" in r.markdown and "CUDA runtimes loaded 13.0" in r.markdown


def test_the_report_maps_devices_as_the_mapping_command_does():
    snaps, diag, sources = window("compute-bound", 5)
    env = {
        **sources.environ,
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_GPUS": "2,3",
        "SLURM_STEP_GPUS": "2,3",
        "CUDA_VISIBLE_DEVICES": "0,1",
    }
    r = make_report(snaps, diag, source=ReportSource("simulator", "compute-bound"), environ=env)
    [c] = [c for c in r.doc["mapping"]["conclusions"] if c.startswith("this shell's job")]
    assert "cuda:0=GPU 2, cuda:1=GPU 3" in c and "ConstrainDevices" in c
    assert "4242" not in r.markdown  # the job id is a pseudonym
    assert {f["kind"] for f in r.doc["mapping"]["findings"]} >= {"minor_not_index", "shared_gpu"}
