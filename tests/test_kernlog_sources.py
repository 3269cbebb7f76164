"""Reading the kernel log where it is: a real journal file (written by systemd-journal-remote,
read by journalctl), rotated and gzipped files, permission denied (really denied: the reader
runs as an unprivileged user), a 2 GB log, random bytes, a pipe, and the same line in several
sources."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from gputop_diag.cli import main
from gputop_diag.collect.kernlog import scan as xid_scan
from gputop_diag.collect.kernlog.files import Budget, rotated
from gputop_diag.collect.kernlog.scan import scan
from gputop_diag.collect.kernlog.sources import read_dmesg, read_file, read_journal
from gputop_diag.sources import CommandResult, RealClock, run_real_command

JOURNAL_REMOTE = next(
    (
        p
        for p in ("/usr/lib/systemd/systemd-journal-remote", "/lib/systemd/systemd-journal-remote")
        if os.access(p, os.X_OK)
    ),
    None,
)
T0 = 1_768_471_920.0  # 2026-01-15 10:12:00 UTC
XID = "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python3, Ch 00000010, intr 00000000."
REPO = Path(__file__).resolve().parent.parent


# The child's own peak RSS: VmHWM belongs to the process image (getrusage's ru_maxrss would
# carry over the forking pytest's, which grows over a long run).
_CHILD = (
    "import sys\n"
    "from gputop_diag.cli import main\n"
    "rc = main(['xid', *sys.argv[1:]])\n"
    "hwm = [l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
    "sys.stderr.write(f'\\nMAXRSS_KIB={hwm[0] if hwm else -1}\\n')\n"
    "sys.exit(rc)\n"
)


def run_xid(*argv: str, stdin: bytes | None = None, user: str | None = None, timeout=60):
    """`gputop-diag xid ARGV` in a child process (as `user` when given): rc, stdout, stderr,
    the child's peak RSS in KiB, and its wall time."""
    cmd = [sys.executable, "-c", _CHILD, *argv]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]
    env = {**os.environ, "PYTHONPATH": str(REPO), "TZ": "UTC"}
    start = time.monotonic()
    p = subprocess.run(cmd, input=stdin, capture_output=True, env=env, cwd="/", timeout=timeout)
    wall = time.monotonic() - start
    err = p.stderr.decode()
    rss = int(err.rsplit("MAXRSS_KIB=", 1)[1]) if "MAXRSS_KIB=" in err else None
    return p.returncode, p.stdout.decode(), err, rss, wall


# -- a real journal file -------------------------------------------------------------------------


def export_entry(fields: dict[str, str | bytes]) -> bytes:
    """One entry of the journal export format; a value with a newline (or not UTF-8) is
    written in its binary form, as journald does."""
    out = b""
    for k, v in fields.items():
        data = v if isinstance(v, bytes) else v.encode()
        if b"\n" in data or isinstance(v, bytes):
            out += k.encode() + b"\n" + struct.pack("<Q", len(data)) + data + b"\n"
        else:
            out += k.encode() + b"=" + data + b"\n"
    return out + b"\n"


BOOTS = {"a" * 32: T0 - 5000, "b" * 32: T0 - 90000}  # boot id -> when it booted


def kernel(t: float, message: str | bytes, boot: str = "a" * 32) -> dict:
    return {
        "__REALTIME_TIMESTAMP": str(int(t * 1e6)),
        "__MONOTONIC_TIMESTAMP": str(int((t - BOOTS[boot]) * 1e6)),
        "_BOOT_ID": boot,
        "_TRANSPORT": "kernel",
        "SYSLOG_IDENTIFIER": "kernel",
        "PRIORITY": "3",
        "_HOSTNAME": "node7",
        "MESSAGE": message,
    }


@pytest.fixture
def journal_file(tmp_path):
    if JOURNAL_REMOTE is None or shutil.which("journalctl") is None:
        pytest.skip("needs systemd-journal-remote and journalctl (Debian: systemd-journal-remote)")
    entries = [
        kernel(
            T0 - 86400,
            "NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', name=<unknown>, "
            "An uncorrectable double bit error",
            boot="b" * 32,
        ),  # the boot before
        kernel(
            T0 - 86399,
            "NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, "
            "Row Remapper: New row marked for remapping",
            boot="b" * 32,
        ),
        kernel(T0, "usb 1-1: new high-speed USB device number 2 using xhci_hcd"),
        kernel(T0 + 1, XID),
        kernel(
            T0 + 2,
            "NVRM: API mismatch: the client has the version 515.48.07, but\n"
            "NVRM: this kernel module has the version 510.73.05.  Please\n"
            "NVRM: make sure that this kernel module and all NVIDIA driver\n"
            "NVRM: components have the same version.",
        ),
        kernel(T0 + 3, b"NVRM: Xid (PCI:0000:5d:00): 13, pid=77, name=caf\xe9, Graphics"),
        kernel(T0 + 4, b"NVRM: " + bytes(range(1, 32)) * 4 + b"\xff\xfe"),  # junk with a tag
        kernel(T0 + 5, "Out of memory: Killed process 4242 (pt_data_worker) total-vm:1kB"),
    ]
    export = tmp_path / "kernel.export"
    export.write_bytes(b"".join(export_entry(e) for e in entries))
    out = tmp_path / "node7.journal"
    r = subprocess.run(
        [JOURNAL_REMOTE, f"--output={out}", str(export)], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0 and out.exists(), r.stderr
    return out


def test_a_real_journal_file_through_journalctl(journal_file, capsys):
    rc = main(["xid", "--journal-file", str(journal_file), "--since", "all", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["schema"] == "gputop-diag.xid/1"
    (src,) = doc["sources"]
    assert src["name"] == f"journal file {journal_file}" and src["status"] == "ok"
    assert src["binary_skipped"] == 1  # the entry of binary junk: counted, not fatal
    events = {(e["kind"], e["code"]): e for e in doc["events"]}
    assert set(events) == {
        ("xid", 48),
        ("xid", 63),
        ("xid", 31),
        ("api_mismatch", None),
        ("xid", 13),
    }
    assert events[("xid", 31)]["time"] == "2026-01-15T10:12:01+00:00"
    assert (events[("xid", 31)]["pid"], events[("xid", 31)]["process_name"]) == (1234, "python3")
    assert events[("xid", 13)]["process_name"] == "caf\ufffd"  # a non-UTF-8 name, replaced
    api = events[("api_mismatch", None)]
    assert (api["client_version"], api["version"]) == ("515.48.07", "510.73.05")
    chains = {(c["first"], c["then"]) for c in doc["chains"]}
    assert ("Xid 48 ECC_DBE", "Xid 63 ROW_REMAP_EVENT") in chains  # across the two boots
    assert doc["host_oom_kills"] == 1


def test_since_limits_a_journal_file(journal_file, capsys):
    rc = main(["xid", "--journal-file", str(journal_file), "--since", "2026-01-15T10:00", "--json"])
    codes = sorted(e["code"] or 0 for e in json.loads(capsys.readouterr().out)["events"])
    assert rc == 0 and codes == [0, 13, 31]


def test_a_journal_file_that_is_not_one(tmp_path, capsys):
    if shutil.which("journalctl") is None:
        pytest.skip("needs journalctl (Debian: systemd)")
    bad = tmp_path / "bad.journal"
    bad.write_bytes(os.urandom(4096))
    rc = main(["xid", "--journal-file", str(bad), "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1 and doc["sources"][0]["status"] == "error" and doc["sources"][0]["message"]


def test_a_plain_log_given_as_a_journal_file_says_so_and_the_next_step(tmp_path, capsys):
    """Not "see the next steps above" with none above: what the file is, and to use --log."""
    plain = tmp_path / "kern.log"
    plain.write_text(
        "Jan 15 09:12:00 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, "
        "GPU has fallen off the bus.\n"
    )
    rc = main(["xid", "--journal-file", str(plain)])
    out = capsys.readouterr().out
    assert rc == 1  # no source could be read (docs/xid.md)
    assert "not a journal file: a text log" in out
    assert f"next: read it with --log {plain}" in out
    packed = tmp_path / "kern.log.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert main(["xid", "--journal-file", str(packed), "--json"]) == 1
    src = json.loads(capsys.readouterr().out)["sources"][0]
    assert "gzip" in src["message"] and src["next_step"] == f"read it with --log {packed}"


# -- permission denied, really -------------------------------------------------------------------


@pytest.fixture
def shared_dir():
    """A directory an unprivileged user can enter (pytest's tmp_path is private to root)."""
    d = tempfile.mkdtemp(prefix="gputop-xid-")
    os.chmod(d, 0o755)
    yield Path(d)
    shutil.rmtree(d, ignore_errors=True)


def unprivileged() -> str | None:
    """How to run a reader without privileges: None when we already are unprivileged."""
    if os.geteuid() != 0:
        return None
    if shutil.which("setpriv") is None:
        pytest.skip("running as root and setpriv (util-linux) is missing: cannot drop privileges")
    probe = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            sys.executable,
            "-c",
            "import gputop_diag.cli",
        ],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        cwd="/",
        timeout=60,
    )
    if probe.returncode != 0:
        pytest.skip("user nobody cannot read this checkout or its Python environment")
    return "65534"  # nobody


def test_permission_denied_says_which_source_and_how_to_get_access(shared_dir):
    secret = shared_dir / "kern.log"
    secret.write_text(f"Jan 15 10:12:00 node7 kernel: {XID}\n")
    os.chmod(secret, 0o640)
    if os.geteuid() == 0:
        os.chown(secret, 0, 4)  # root:adm, as Debian keeps kern.log (gid 4 is adm)
    readable = shared_dir / "copy.log"
    readable.write_text(f"Jan 15 10:12:00 node7 kernel: {XID}\n")
    os.chmod(readable, 0o644)
    user = unprivileged()
    if user is None:
        os.chmod(secret, 0)
    rc, out, err, _, _ = run_xid("--log", str(secret), "--json", "--since", "all", user=user)
    doc = json.loads(out)
    (src,) = doc["sources"]
    assert rc == 1 and src["status"] == "denied" and src["message"] == "permission denied"
    assert "sudo" in src["next_step"]
    if user is not None:
        assert "adm group" in src["next_step"] and "usermod -aG adm" in src["next_step"]
    assert "no kernel-log source could be read" in err
    # the other source is still read
    rc, out, _, _, _ = run_xid(
        "--log", str(secret), "--log", str(readable), "--since", "all", user=user
    )
    # a partial answer: printed, and exit 5 (README, "Exit statuses") since one file was not read
    assert rc == 5 and "permission denied" in out and "Xid 31 MMU_FAULT" in out
    assert "next: " in out


def test_denied_journal_file_and_dmesg_as_an_unprivileged_user(shared_dir, journal_file):
    user = unprivileged()
    if user is None:
        pytest.skip("already unprivileged: the journal file's mode decides, not this test")
    copy = shared_dir / "node7.journal"
    shutil.copy(journal_file, copy)
    os.chmod(copy, 0o640)
    rc, out, _, _, _ = run_xid("--journal-file", str(copy), "--system", "--json", user=user)
    doc = json.loads(out)
    by_name = {s["name"]: s for s in doc["sources"]}
    assert by_name[f"journal file {copy}"]["status"] == "denied"
    restricted = Path("/proc/sys/kernel/dmesg_restrict").read_text().strip() == "1"
    if restricted and by_name["dmesg"]["status"] != "skipped":
        assert by_name["dmesg"]["status"] == "denied"
        assert "dmesg_restrict" in by_name["dmesg"]["next_step"]


def stub(answers: dict[str, CommandResult]):
    def run(argv, timeout):
        return answers[argv[0]]

    return run


def test_journal_and_dmesg_refusals_in_their_own_words():
    deadline = time.monotonic() + 5
    hint = (
        "Hint: You are currently not seeing messages from other users and the system.\n"
        "      Users in groups 'adm', 'systemd-journal' can see all messages."
    )
    _, r = read_journal(stub({"journalctl": CommandResult(0, "", hint)}), None, Budget(), deadline)
    assert r.status == "denied" and "systemd-journal group" in r.next_step
    no_perm = "No journal files were opened due to insufficient permissions."
    _, r = read_journal(
        stub({"journalctl": CommandResult(1, "", no_perm)}), None, Budget(), deadline
    )
    assert r.status == "denied"
    refused = "dmesg: read kernel buffer failed: Operation not permitted"
    _, r = read_dmesg(stub({"dmesg": CommandResult(1, "", refused)}), None, deadline)
    assert r.status == "denied" and "dmesg_restrict" in r.next_step

    def missing(argv, timeout):
        raise FileNotFoundError(argv[0])

    assert read_journal(missing, None, Budget(), deadline)[1].status == "missing"


def test_journal_without_pattern_matching_asks_again_without_it():
    calls = []

    def run(argv, timeout):
        calls.append(argv)
        if "-g" in argv:
            return CommandResult(1, "", "Compiled without pattern matching support")
        line = json.dumps({"__REALTIME_TIMESTAMP": str(int(T0 * 1e6)), "MESSAGE": XID})
        return CommandResult(0, line + "\n")

    parsed, r = read_journal(run, None, Budget(), time.monotonic() + 5)
    assert len(calls) == 2 and r.status == "ok" and [e.code for e in parsed.events] == [31]


# -- files: rotations, duplicates, damage --------------------------------------------------------


class NoProc:
    def read_text(self, path):
        raise FileNotFoundError(path)


def fake_machine(journal: CommandResult | None = None):
    """Sources for the scan whose journal answers `journal` (default: nothing) and whose dmesg
    is restricted."""
    answer = journal or CommandResult(0, "")

    def run(argv, timeout):
        if argv[0] == "dmesg":
            return CommandResult(1, "", "dmesg: read kernel buffer failed: Operation not permitted")
        return answer

    return SimpleNamespace(
        run_command=run,
        simulated=False,
        clock=RealClock(),
        sim=None,
        psutil=SimpleNamespace(boot_time=lambda: T0 - 3600),
        procfs=NoProc(),
    )


def test_rotated_and_gzipped_files_newest_first(tmp_path, monkeypatch):
    base = tmp_path / "kern.log"
    base.write_text(f"Jan 15 10:12:00 node7 kernel: {XID}\n")
    (tmp_path / "kern.log.1").write_text(
        "Jan 14 10:12:00 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception\n"
    )
    with gzip.open(tmp_path / "kern.log.2.gz", "wt") as f:
        f.write("Jan 13 10:12:00 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 43, Ch 00000008\n")
    (tmp_path / "kern.log.old").write_text("not a rotation\n")
    for k, name in enumerate(("kern.log", "kern.log.1", "kern.log.2.gz")):
        os.utime(tmp_path / name, (T0 + 3600 - k * 86400, T0 + 3600 - k * 86400))
    assert [Path(p).name for p in rotated(str(base))] == ["kern.log", "kern.log.1", "kern.log.2.gz"]
    monkeypatch.setattr(xid_scan, "SYSTEM_LOGS", (str(base), str(tmp_path / "syslog")))
    found = scan(fake_machine(), since=None)
    assert sorted(e.code for e in found.events) == [13, 31, 43]
    status = {Path(r.name).name: r.status for r in found.sources}
    assert status["kern.log.2.gz"] == "ok" and status["syslog"] == "missing"
    assert status["dmesg"] == "denied"  # the journal had nothing: dmesg was asked


def test_the_same_line_in_journal_kern_log_and_syslog_is_one_event(tmp_path, monkeypatch):
    line = f"Jan 15 10:12:00 node7 kernel: [  219.470994] {XID}\n"
    (tmp_path / "kern.log").write_text(line)
    (tmp_path / "syslog").write_text("Jan 15 10:11:59 node7 systemd[1]: Starting x\n" + line)
    for name in ("kern.log", "syslog"):
        os.utime(tmp_path / name, (T0 + 60, T0 + 60))
    journal = json.dumps({"__REALTIME_TIMESTAMP": str(int((T0 + 0.4) * 1e6)), "MESSAGE": XID})
    monkeypatch.setattr(
        xid_scan, "SYSTEM_LOGS", (str(tmp_path / "kern.log"), str(tmp_path / "syslog"))
    )
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        found = scan(fake_machine(CommandResult(0, journal + "\n")), since=None)
    finally:
        monkeypatch.undo()
        time.tzset()
    (e,) = found.events
    assert e.timestamp == pytest.approx(T0 + 0.4)
    assert sorted(Path(s).name for s in e.sources) == ["journal", "kern.log", "syslog"]


def test_a_damaged_gzip_keeps_what_came_before_the_damage(tmp_path):
    lines = "".join(f"Jan 15 10:{m:02d}:00 node7 kernel: {XID}\n" for m in range(30))
    lines += "x" * 2_000_000 + "\n"  # enough to be cut mid-stream
    path = tmp_path / "kern.log.3.gz"
    data = gzip.compress(lines.encode())
    path.write_bytes(data[: len(data) - 200])
    parsed, r = read_file(str(path), None, Budget(), time.monotonic() + 10)
    assert r.status == "partial" and "damaged gzip" in r.message
    assert "gzip -t" in r.next_step and "--since" not in r.next_step  # not "too long to read"
    assert len(parsed.events) == 30


def test_a_log_of_random_bytes(tmp_path):
    path = tmp_path / "random.log"
    junk = os.urandom(2 * 1024 * 1024)
    path.write_bytes(
        junk[:1_000_000]
        + f"\n[  10.000000] {XID}\n".encode()
        + junk[1_000_000:]
        + f"\n[  20.000000] {XID}\n".encode()
    )
    rc, out, err, _, wall = run_xid("--log", str(path), "--json", "--since", "all")
    doc = json.loads(out)
    assert rc == 0, err
    assert [e["uptime_s"] for e in doc["events"]] == [10.0, 20.0]
    src = doc["sources"][0]
    assert src["status"] == "ok" and src["binary_skipped"] > 1000
    assert "lines of binary data skipped" in src["message"]


def test_a_2_gb_log_is_read_from_its_end_in_bounded_time_and_memory(tmp_path):
    path = tmp_path / "huge.log"
    size = 2 * 1024**3
    with open(path, "wb") as f:
        f.write(f"[    1.000000] {XID.replace('31,', '13,')}\n".encode())  # at the very start
        f.truncate(size)  # a sparse 2 GiB of NULs
        f.seek(size - 4096)
        tail = "".join(f"[{9000 + k:12.6f}] {XID}\n" for k in range(5))
        tail += "[ 9010.000000] usb 1-1: USB disconnect\n"
        f.write(b"\n" + tail.encode())
    rc, out, err, usage, wall = run_xid("--log", str(path), "--json", "--since", "all")
    doc = json.loads(out)
    assert rc == 0, err
    src = doc["sources"][0]
    assert src["status"] == "partial" and src["size"] >= size, src
    # cut by the byte budget ("read the newest 256.0 MiB of 2.0 GiB"), or on a loaded machine by
    # the time budget ("time budget spent after the newest … of 2.0 GiB"): bounded either way
    assert "of 2.0 GiB" in src["message"] and src["bytes_read"] <= 256 * 1024**2, src
    assert [e["code"] for e in doc["events"]] == [31] * 5  # the newest, not the oldest
    assert src["binary_skipped"] >= 1
    assert usage is not None and 0 < usage < 300 * 1024, usage  # KiB: well under 300 MiB


def test_a_big_text_log_is_read_whole(tmp_path):
    path = tmp_path / "syslog"
    filler = "Jan 15 10:11:00 node7 CRON[123]: (root) CMD (run-parts /etc/cron.hourly)\n"
    block = filler * 20_000  # ~1.5 MB
    with open(path, "w") as f:
        for k in range(20):  # ~30 MB with one Xid every 1.5 MB
            f.write(block)
            f.write(f"Jan 15 10:12:{k:02d} node7 kernel: {XID}\n")
    parsed, r = read_file(str(path), None, Budget(), time.monotonic() + 300)
    assert r.status == "ok" and len(parsed.events) == 20  # speed: bench/kernlog.py


def test_stdin(tmp_path):
    data = f"[  5.000000] {XID}\n".encode() * 3
    rc, out, _, _, _ = run_xid("--log", "-", "--json", "--since", "all", stdin=data)
    doc = json.loads(out)
    assert rc == 0 and doc["sources"][0]["name"] == "stdin" and len(doc["events"]) == 3


def test_time_budget_skips_what_it_cannot_reach(tmp_path):
    logs = []
    for k in range(3):
        p = tmp_path / f"k{k}.log"
        p.write_text(f"[  5.0] {XID}\n")
        logs.append(str(p))
    found = scan(None, since=None, logs=logs, system=False, budget=Budget(seconds=-1))
    assert [r.status for r in found.sources] == ["skipped"] * 3
    assert "time budget" in found.sources[0].message


def test_real_dmesg_when_allowed():
    r = run_real_command(["dmesg"], 5) if shutil.which("dmesg") else None
    if r is None or r.returncode != 0:
        pytest.skip("dmesg is not readable here")
    parsed, rep = read_dmesg(run_real_command, None, time.monotonic() + 5)
    assert rep.status in ("ok", "empty") and rep.bytes_read > 0


def test_the_live_view_follows_kern_log_when_journal_and_dmesg_refuse(tmp_path, monkeypatch):
    from gputop_diag.collect.kernlog import watch as kernlog_watch

    log = tmp_path / "kern.log"
    log.write_text(f"Jan 15 10:12:00 node7 kernel: {XID}\n")
    monkeypatch.setattr(kernlog_watch, "SYSTEM_LOGS", (str(log),))
    machine = fake_machine(
        CommandResult(1, "", "No journal files were opened due to insufficient permissions.")
    )
    watch = kernlog_watch.KernelLogWatch(machine)
    first = watch.poll(0.0)
    assert [e.code for e in first.events] == [31] and watch.readable
    assert [r.status for r in watch.reports] == ["denied", "denied", "ok"]
    with open(log, "a") as f:  # a new line, and one still being written
        f.write(
            "Jan 15 10:12:05 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen "
            "off the bus.\nJan 15 10:12:06 node7 kernel: NVRM: Xid (PCI:0000:3b:00): 4"
        )
    assert [e.code for e in watch.poll(0.0).events] == [79]  # only what is new, and whole
    log.rename(tmp_path / "kern.log.1")  # rotated: the new file is read from its start
    log.write_text(f"Jan 15 10:13:00 node7 kernel: {XID.replace('31,', '13,')}\n")
    assert [e.code for e in watch.poll(0.0).events] == [13]
    assert watch.reports[0].name == str(log)  # asked first next time: the one that answered


def test_under_sanitize_a_named_log_file_is_a_label_not_its_path(tmp_path):
    d = tmp_path / "node-gpu17.corp.example"
    d.mkdir()
    path = d / "worker4-kern.log"
    path.write_text(f"[  5.000000] {XID}\n")
    rc, out, _, _, _ = run_xid("--log", str(path), "--json", "--since", "all", "--sanitize")
    assert rc == 0 and "corp.example" not in out and "worker4" not in out
    doc = json.loads(out)
    assert doc["sources"][0]["name"] == "file-1" and len(doc["events"]) == 1


def _journal_machine(tmp_path, monkeypatch, simulated=False):
    """A live view's kernel-log watch whose journal folder is `tmp_path/journal` (one active
    file, one archived) and whose `journalctl` answers one Xid line; its calls are counted."""
    from gputop_diag.collect.kernlog import watch as kernlog_watch

    top = tmp_path / "journal"
    (top / "machine").mkdir(parents=True)
    (top / "machine" / "system.journal").write_bytes(b"LPKSHHRH" + bytes(300))
    (top / "machine" / "system@0001-0002-0003.journal").write_bytes(b"LPKSHHRH" + bytes(300))
    monkeypatch.setattr(kernlog_watch, "JOURNAL_DIRS", (str(top), str(tmp_path / "absent")))
    calls = []
    line = json.dumps({"__REALTIME_TIMESTAMP": str(int(T0 * 1e6)), "MESSAGE": XID})

    def run(argv, timeout):
        calls.append(argv[0])
        return CommandResult(0, line + "\n")

    machine = fake_machine()
    machine.run_command, machine.simulated = run, simulated
    return kernlog_watch.KernelLogWatch(machine), top / "machine", calls


def test_the_live_view_asks_the_journal_again_only_once_a_journal_file_changed(
    tmp_path, monkeypatch
):
    watch, folder, calls = _journal_machine(tmp_path, monkeypatch)
    first = watch.poll(T0 - 60)
    assert [e.code for e in first.events] == [31] and calls == ["journalctl"]
    again = watch.poll(T0 - 30)  # no file changed: the last answer, no journalctl
    assert [e.code for e in again.events] == [31] and calls == ["journalctl"]
    assert [r.status for r in watch.reports] == ["ok"] and watch.journal_reads == 1
    assert watch.poll(T0 + 1).events == []  # the answer's message is older than the window
    active = folder / "system.journal"
    with open(active, "r+b") as f:  # journald appended an entry: the header's counts moved
        f.seek(160)
        f.write((1).to_bytes(8, "little"))
    assert [e.code for e in watch.poll(T0 - 30).events] == [31] and len(calls) == 2
    watch.poll(T0 - 30)
    assert len(calls) == 2
    (folder / "user-1000.journal").write_bytes(b"LPKSHHRH")  # a new file
    watch.poll(T0 - 30)
    assert len(calls) == 3
    # an archived file is never read: its bytes do not matter, its name does
    (folder / "system@0001-0002-0003.journal").write_bytes(b"changed")
    watch.poll(T0 - 30)
    assert len(calls) == 3


def test_the_journal_is_asked_each_poll_where_its_files_cannot_be_read_or_are_simulated(
    tmp_path, monkeypatch
):
    from gputop_diag.collect.kernlog import watch as kernlog_watch

    watch, folder, calls = _journal_machine(tmp_path, monkeypatch)
    monkeypatch.setattr(kernlog_watch, "journal_state", lambda: None)
    watch.poll(T0 - 60)
    watch.poll(T0 - 60)
    assert len(calls) == 2
    monkeypatch.undo()
    watch, folder, calls = _journal_machine(tmp_path / "sim", monkeypatch, simulated=True)
    watch.poll(T0 - 60)
    watch.poll(T0 - 60)
    assert len(calls) == 2


def test_an_unchanged_journal_is_asked_again_after_the_recheck_time(tmp_path, monkeypatch):
    from gputop_diag.collect.kernlog import watch as kernlog_watch

    watch, folder, calls = _journal_machine(tmp_path, monkeypatch)
    watch.poll(T0 - 60)
    monkeypatch.setattr(kernlog_watch, "JOURNAL_RECHECK_S", -1.0)
    watch.poll(T0 - 60)
    assert len(calls) == 2


def test_a_journal_written_through_a_linked_machine_folder_changes_the_state(tmp_path):
    """/var/log/journal/<machine-id> as a link to where journald writes: an entry appended
    there is seen at the next look, not at the 5-minute recheck."""
    from gputop_diag.collect.kernlog.watch import journal_state

    real = tmp_path / "host-journal"
    real.mkdir()
    journal = real / "system.journal"
    journal.write_bytes(b"A" * 300)
    top = tmp_path / "journal"
    top.mkdir()
    (top / "0123456789abcdef").symlink_to(real, target_is_directory=True)
    before = journal_state((str(top),))
    assert before is not None and [os.path.basename(n) for n in before[0]] == ["system.journal"]
    with open(journal, "r+b") as f:  # journald bumps the header's counts as it appends
        f.seek(100)
        f.write(b"B")
    assert journal_state((str(top),)) != before
    # a link back to the top, a second link to the same folder and a dangling one: each
    # folder read once, nothing raised
    (top / "loop").symlink_to(top, target_is_directory=True)
    (top / "again").symlink_to(real, target_is_directory=True)
    (top / "gone").symlink_to(tmp_path / "nowhere", target_is_directory=True)
    names, headers = journal_state((str(top),))
    assert [os.path.basename(n) for n in names] == ["system.journal"] and len(headers) == 1


def test_journal_state_reads_only_the_files_journald_still_writes(tmp_path):
    from gputop_diag.collect.kernlog.watch import journal_state

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "system.journal").write_bytes(b"A" * 400)
    (tmp_path / "m" / "system@x.journal~").write_bytes(b"B")
    (tmp_path / "m" / "notes.txt").write_bytes(b"C")
    names, headers = journal_state((str(tmp_path), str(tmp_path / "none")))
    assert [os.path.basename(n) for n in names] == ["system.journal", "system@x.journal~"]
    assert len(headers) == 1 and headers[0][3] == b"A" * 256
    os.chmod(tmp_path / "m", 0)
    try:
        if os.access(tmp_path / "m", os.R_OK):  # root reads it all the same
            pytest.skip("running as root")
        assert journal_state((str(tmp_path),)) is None
    finally:
        os.chmod(tmp_path / "m", 0o755)
