"""The simulator's commands: the kernel log through journalctl and dmesg, and Slurm."""

from __future__ import annotations

import re
from datetime import datetime, timezone

import pytest

from gputop_diag import sim

XID_RE = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\): "
    r"(?P<xid>\d+),\s*(?:pid=(?P<pid>'<unknown>'|\d*),\s*)?(?:name=(?P<name>.*?),\s)?(?P<msg>.*)$"
)
ISO_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0000 gpu-node-07 kernel: ")

# Slurm prints local time without a zone: the pending job was submitted at 07:59:00 UTC.
SUBMIT_LOCAL = datetime.fromtimestamp(
    datetime(2026, 1, 15, 7, 59, tzinfo=timezone.utc).timestamp()
).strftime("%Y-%m-%dT%H:%M:%S")


def journal(src, *args):
    r = src.run_command(["journalctl", "-k", "--no-pager", *args], 5)
    assert r.returncode == 0
    return r.stdout


def test_xid_79_in_the_kernel_log_only_after_it_happens():
    src = sim.build("xid-79")
    assert "Xid" not in journal(src, "-o", "short-iso")
    src.clock.sleep(100)
    lines = journal(src, "-o", "short-iso").splitlines()
    assert all(ISO_LINE.match(x) for x in lines)
    xids = [m for x in lines if (m := XID_RE.search(x))]
    assert [int(m["xid"]) for m in xids] == [79]
    g = src.sim.gpus[3]
    assert xids[0]["pci"] == g.xid_pci and xids[0]["pid"] == "'<unknown>'"
    assert lines[-1].endswith(f"NVRM: GPU {g.proc_bus_id}: GPU has fallen off the bus.")
    announce = next(x for x in lines if "NVRM: GPU at PCI:" in x)
    assert announce.endswith(f"NVRM: GPU at PCI:{g.xid_pci}: {g.uuid}")
    assert lines.index(announce) < lines.index(next(x for x in lines if "Xid" in x))
    assert "2026-01-15T10:01:30+0000 gpu-node-07 kernel: NVRM: Xid (PCI:0000:5d:00): 79, " in (
        "\n".join(lines)
    )


def test_app_xids_name_the_process_and_since_filters():
    src = sim.build("xid-app")
    src.clock.sleep(200)
    text = journal(src, "-o", "short-iso")
    xids = [m for x in text.splitlines() if (m := XID_RE.search(x))]
    assert [int(m["xid"]) for m in xids] == [13, 43, 31, 43, 13, 43]
    pid = next(p.pid for p in src.sim.procs.values() if p.role == "rank" and p.gpu == 5)
    assert {m["pid"] for m in xids} == {str(pid)} and {m["name"] for m in xids} == {
        "pt_main_thread"
    }
    since = int(src.clock.start + 100)
    later = [
        m
        for x in journal(src, "-o", "short-iso", "--since", f"@{since}").splitlines()
        if (m := XID_RE.search(x))
    ]
    assert [int(m["xid"]) for m in later] == [13, 43]
    iso = journal(src, "-o", "short-iso", "--since", "2026-01-15 10:01:40")
    assert [int(m["xid"]) for x in iso.splitlines() if (m := XID_RE.search(x))] == [13, 43]
    assert re.match(r"^Jan 15 10:00:35 gpu-node-07 kernel: NVRM: ", journal(src, "-g", "Xid"))


def test_journal_boot_lines_dmesg_and_empty_answers():
    src = sim.build("idle")
    text = journal(src)
    assert "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.124.06  Release" in text
    assert journal(src, "--since", "@1768471200") == "-- No entries --\n"
    assert src.run_command(["journalctl", "--since", "garbage"], 5).returncode == 1
    dmesg = src.run_command(["dmesg"], 5).stdout.splitlines()
    assert re.match(r"^\[\s+\d+\.\d{6}\] nvidia-nvlink: ", dmesg[0])
    ctime = src.run_command(["dmesg", "-T"], 5).stdout
    assert re.match(r"^\[(Mon|Tue|Wed|Thu|Fri|Sat|Sun) Jan 1[12] \d\d:\d\d:\d\d 2026\] ", ctime)


def test_capacity_scenario_logs_an_oom_kill_and_the_worker_exits():
    src = sim.build("capacity")
    src.clock.sleep(45)
    line = next(x for x in journal(src, "-o", "short-iso").splitlines() if "Out of memory" in x)
    pid = int(re.search(r"Killed process (\d+) \(pt_data_worker\) total-vm:", line).group(1))
    assert not src.psutil.pid_exists(pid)


def test_slurm_is_not_installed_outside_slurm_scenarios():
    src = sim.build("compute-bound")
    for prog in ("squeue", "scontrol", "sacct", "nvidia-bug-report.sh"):
        with pytest.raises(FileNotFoundError):
            src.run_command([prog], 5)


def test_squeue_format_fields_and_filters():
    src = sim.build("scheduler-wait")
    fmt = "%i|%j|%u|%T|%r|%V|%S|%l|%M|%D|%b|%N"
    mine = src.run_command(["squeue", "-h", "--me", "-o", fmt], 5)
    assert mine.returncode == 0
    assert mine.stdout == (
        "48213|llm-pretrain|alice|PENDING|Resources|" + SUBMIT_LOCAL + "|N/A|2-00:00:00|0:00|2|"
        "gres/gpu:8|\n"
    )
    everyone = src.run_command(["squeue", "-h", "-o", fmt], 5).stdout.splitlines()
    assert len(everyone) == 2
    bob = src.run_command(["squeue", "-h", "-u", "bob", "-o", "%i %T %M %N"], 5).stdout
    assert bob == "48190 RUNNING 5:00:00 gpu-node-[01-04]\n"
    by_id = src.run_command(["squeue", "-h", "-j", "48213", "-o", "%.10i:%8u:%T"], 5).stdout
    assert by_id == "     48213:alice   :PENDING\n"
    table = src.run_command(["squeue", "--me"], 5).stdout.splitlines()
    assert table[0].split() == [
        "JOBID",
        "PARTITION",
        "NAME",
        "USER",
        "ST",
        "TIME",
        "NODES",
        "NODELIST(REASON)",
    ]
    assert table[1].split() == [
        "48213",
        "gpu",
        "llm-pret",
        "alice",
        "PD",
        "0:00",
        "2",
        "(Resources)",
    ]
    gone = src.run_command(["squeue", "-j", "1"], 5)
    assert gone.returncode == 1 and "Invalid job id" in gone.stderr


def test_scontrol_show_job_and_sacct():
    src = sim.build("scheduler-wait")
    r = src.run_command(["scontrol", "show", "job", "48213"], 5)
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0] == "JobId=48213 JobName=llm-pretrain"
    assert all(x.startswith("   ") for x in lines[1:] if x)
    kv = dict(p.split("=", 1) for x in lines for p in x.split() if "=" in p)
    assert kv["JobState"] == "PENDING" and kv["Reason"] == "Resources"
    assert kv["SubmitTime"] == SUBMIT_LOCAL and kv["TimeLimit"] == "2-00:00:00"
    assert kv["TresPerNode"] == "gres/gpu:8" and kv["UserId"] == "alice(1001)"
    one = src.run_command(["scontrol", "-o", "show", "job", "48213"], 5).stdout
    assert one.count("\n") == 1 and "JobState=PENDING" in one
    assert src.run_command(["scontrol", "show", "job", "7"], 5).returncode == 1
    acct = src.run_command(["sacct", "-n", "-P", "-X", "-o", "JobID,State,Reason,Timelimit"], 5)
    assert acct.stdout == "48213|PENDING|Resources|2-00:00:00\n"
    table = src.run_command(["sacct", "-j", "48190"], 5).stdout.splitlines()
    assert table[0].split() == [
        "JobID",
        "JobName",
        "Partition",
        "Account",
        "AllocCPUS",
        "State",
        "ExitCode",
    ]
    assert table[2].split()[0] == "48190" and "RUNNING" in table[2]
