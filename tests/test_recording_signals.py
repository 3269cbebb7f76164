"""A recording stopped by a signal at any moment reads back up to its last whole line.

Three ways in: a file cut at every byte of its last line (a process killed part way through a
write), a KeyboardInterrupt raised at every step of the writer's own code (what SIGINT, SIGTERM
and SIGHUP do in `record` and `watch`), and real `record` processes killed by each signal at
random moments."""

from __future__ import annotations

import dataclasses
import gzip
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zlib

import pytest

from gputop_diag import sim
from gputop_diag.model import Snapshot
from gputop_diag.monitor.core import Monitor
from gputop_diag.recording import store, writer

SUFFIXES = [".jsonl", ".jsonl.gz"]


def idle_snapshots(n: int, gpus: int | None = None) -> list[Snapshot]:
    """`n` snapshots of the idle demo, one a second; with `gpus`, only that many GPUs in each
    and no health report (short lines, so that every byte of one can be tried: the health
    report alone is four fifths of an idle line, and each try reads the file again)."""
    m = Monitor(sim.build("idle"))
    snaps: list[Snapshot] = []
    m.run_for(n - 1, lambda t: snaps.append(t.snapshot))
    assert len(snaps) == n
    if gpus is not None:
        snaps = [dataclasses.replace(s, gpus=s.gpus[:gpus], health=None) for s in snaps]
    return snaps


def read_back(path: str) -> tuple[list[Snapshot], list[str]]:
    """(snapshots, warnings) the project's reader gets; a file with no whole snapshot line in it
    reads as none (the reader calls it empty when it holds no byte, damaged when it was cut
    before its first snapshot ended)."""
    if not os.path.exists(path):
        return [], []
    try:
        rec = store.Recording.open(path)
    except store.RecordingError as e:
        if os.path.getsize(path) == 0:
            assert "is empty" in str(e), e
        else:
            assert "is damaged" in str(e) and "nothing in it to replay" in str(e), e
        # the header alone is no recording: it gives up only where no snapshot line is whole
        assert text_prefix(path).count(b"\n") < 2, "a whole snapshot, and the reader gave up"
        return [], [str(e)]
    rec.on_warning = lambda text: None
    snaps = list(rec.snapshots())
    warnings = list(rec.warnings)
    assert rec.last() == (snaps[-1] if snaps else None)  # the other way of reading
    return snaps, warnings


def text_prefix(path: str) -> bytes:
    """What a file holds as text, as far as it can be decoded (a gzip stream may be cut)."""
    data = open(path, "rb").read()
    if data[:2] != b"\x1f\x8b":
        return data
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        return d.decompress(data)
    except zlib.error:
        return b""


def line_ends(path: str, snaps: list[Snapshot]) -> tuple[list[int], int]:
    """Write `snaps` through the writer: (the file's size after each write, after close)."""
    sizes = []
    with writer.RecordingWriter(path, interval_s=1.0) as w:
        for s in snaps:
            w.write(s)
            sizes.append(os.path.getsize(path))  # each line is in the file once write() returns
    return sizes, os.path.getsize(path)


# -- every cut of the last line ---------------------------------------------------------------


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_file_cut_at_any_byte_of_its_last_line_reads_every_earlier_line(suffix, tmp_path):
    snaps = idle_snapshots(4, gpus=0)
    whole = str(tmp_path / f"whole{suffix}")
    sizes, final = line_ends(whole, snaps)
    data = open(whole, "rb").read()
    assert len(data) == final
    cut = str(tmp_path / f"cut{suffix}")
    for n in range(sizes[-2], final + 1):  # from the end of line 3 to the end of the file
        open(cut, "wb").write(data[:n])
        got, warnings = read_back(cut)
        assert got == snaps[: len(got)], n  # nothing invented, nothing out of order
        if n >= sizes[-1]:  # the last line is all there
            assert len(got) == 4, n
        else:
            assert len(got) in (3, 4), n  # 4: cut in its newline or its gzip flush marker
        if suffix == ".jsonl.gz":
            assert bool(warnings) == (n < final), n  # "cut off" until the end marker is there
            assert not warnings or "cut off" in warnings[0], (n, warnings)
        else:
            assert bool(warnings) == (len(got) == 3 and n > sizes[-2]), (n, warnings)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_a_file_cut_anywhere_reads_as_its_whole_lines(suffix, tmp_path):
    """Coarser, over the whole file: a cut inside the first line is an empty recording."""
    snaps = idle_snapshots(3, gpus=1)
    whole = str(tmp_path / f"whole{suffix}")
    sizes, final = line_ends(whole, snaps)
    data = open(whole, "rb").read()
    cut = str(tmp_path / f"cut{suffix}")
    for n in range(0, final + 1, 7):
        open(cut, "wb").write(data[:n])
        got, _ = read_back(cut)
        whole_lines = sum(1 for size in sizes if size <= n)
        assert got == snaps[: len(got)] and len(got) - whole_lines in (0, 1), n


def test_a_damaged_gzip_end_is_read_with_a_warning(tmp_path):
    """A bad CRC or length at the end (what a writer interrupted mid-write used to leave) is
    read up to the last whole line with a warning, for the reader and the command line."""
    snaps = idle_snapshots(5)
    path = str(tmp_path / "r.jsonl.gz")
    writer.write_recording(path, snaps)
    data = open(path, "rb").read()
    for i in range(len(data) - 8, len(data)):  # the CRC and the length
        bad = bytearray(data)
        bad[i] ^= 0x01
        open(path, "wb").write(bytes(bad))
        got, warnings = read_back(path)
        assert got == snaps, i
        assert len(warnings) == 1 and "damaged" in warnings[0], (i, warnings)


def test_damage_with_readable_data_after_it_is_still_an_error(tmp_path):
    """A member damaged in the middle of a file of several is not a cut-off end."""
    snaps = idle_snapshots(6)
    a, b = str(tmp_path / "a.jsonl.gz"), str(tmp_path / "b.jsonl")
    writer.write_recording(a, snaps)
    writer.write_recording(b, snaps[3:])
    first = bytearray(open(a, "rb").read())
    first[len(first) // 2] ^= 0xFF
    tail = open(b, "rb").read().split(b"\n", 1)[1]  # the snapshots, without a second header
    path = str(tmp_path / "two.jsonl.gz")
    open(path, "wb").write(bytes(first) + gzip.compress(tail))
    # the damaged byte falls in the lines `open` reads first or after them as the compressed
    # bytes fall (each snapshot's health report holds how long its real read took): an error
    # either way, never a cut-off end
    with pytest.raises(store.RecordingError, match="damaged|not a snapshot"):
        rec = store.Recording.open(path)
        rec.on_warning = lambda text: None
        list(rec.snapshots())


def test_a_file_of_several_gzip_members_reads_like_zcat(tmp_path):
    snaps = idle_snapshots(6)
    one = str(tmp_path / "one.jsonl")
    writer.write_recording(one, snaps)
    lines = open(one, "rb").read().splitlines(keepends=True)
    path = str(tmp_path / "many.jsonl.gz")
    open(path, "wb").write(b"".join(gzip.compress(x) for x in lines) + b"\0" * 8)
    got, warnings = read_back(path)
    assert got == snaps and not warnings


# -- an interruption at every step of the writer -----------------------------------------------


class Interrupt:
    """Raise KeyboardInterrupt before the k-th bytecode run in `files` (the writer's own code;
    the gzip module's, where a writer uses it), as a signal handler does between bytecodes."""

    def __init__(self, k: int, files: set[str]) -> None:
        self.k, self.files, self.seen, self.fired = k, files, 0, False

    def __enter__(self) -> Interrupt:
        sys.settrace(self._call)
        return self

    def __exit__(self, *exc) -> None:
        sys.settrace(None)

    def _call(self, frame, event, arg):
        if frame.f_code.co_filename not in self.files:
            return None
        frame.f_trace_opcodes = True
        frame.f_trace_lines = False
        return self._step

    def _step(self, frame, event, arg):
        if event == "opcode":
            self.seen += 1
            if self.seen == self.k:
                self.fired = True
                raise KeyboardInterrupt  # also ends the tracing
        return self._step


WRITER_FILES = {os.path.abspath(writer.__file__), os.path.abspath(gzip.__file__)}


def assert_whole_gzip(path: str) -> None:
    """A gzip file passes `gzip -t` (the CRC and length of every member match)."""
    if path.endswith(".gz"):
        gzip.decompress(open(path, "rb").read())
        if shutil.which("gzip"):
            subprocess.run(["gzip", "-t", path], check=True, capture_output=True)


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_an_interrupted_write_leaves_a_whole_file_and_the_writer_goes_on(suffix, tmp_path):
    """As `watch --record` does after a first Ctrl-C: the interrupted line is in the file or
    not, whole either way; the next line and the close are whole too."""
    snaps = idle_snapshots(4, gpus=1)
    k = 0
    while True:
        k += 1
        path = str(tmp_path / f"w{k}{suffix}")
        w = writer.RecordingWriter(path, interval_s=1.0)
        w.write(snaps[0])
        w.write(snaps[1])
        with Interrupt(k, WRITER_FILES) as i:
            try:
                w.write(snaps[2])
            except KeyboardInterrupt:
                pass
        w.write(snaps[3])
        w.close()
        got, warnings = read_back(path)
        assert got in (snaps, snaps[:2] + snaps[3:]), (k, len(got))
        assert not warnings, (k, warnings)
        assert w.count == len(got), k
        assert_whole_gzip(path)
        if not i.fired:
            break
    assert k > 20  # the writer's code was stepped through, one bytecode at a time


@pytest.mark.parametrize("suffix", SUFFIXES)
def test_an_interrupted_close_leaves_a_readable_file(suffix, tmp_path):
    """A second signal while `record` closes the file (then the process ends)."""
    snaps = idle_snapshots(3, gpus=1)
    k = 0
    while True:
        k += 1
        path = str(tmp_path / f"c{k}{suffix}")
        w = writer.RecordingWriter(path, interval_s=1.0)
        for s in snaps:
            w.write(s)
        with Interrupt(k, WRITER_FILES) as i:
            try:
                w.close()
            except KeyboardInterrupt:
                pass
        got, _ = read_back(path)
        assert got == snaps, k  # every line was in the file before close() began
        if not i.fired:
            assert_whole_gzip(path)
            break
    assert k > 5


# -- real `record` processes, killed at random moments -----------------------------------------

SIGNALS = ["SIGINT", "SIGTERM", "SIGHUP", "SIGKILL"]
# 4 signals x 2 formats x 2 runs: 16 recordings, each stopped at its own random moment (the
# in-process tests above interrupt the writer at every bytecode, this checks the real process)
RUNS_EACH = 2
INTERVAL = 0.25  # 600 simulated seconds: 2400 ticks, far longer than any run here


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="no SIGHUP here")
@pytest.mark.parametrize("suffix", SUFFIXES)
@pytest.mark.parametrize("sig", SIGNALS)
def test_a_recording_killed_by_any_signal_at_a_random_moment_reads_back(sig, suffix, tmp_path):
    rng = random.Random(f"{sig}{suffix}")  # the same moments on every run of the test
    for run in range(RUNS_EACH):
        f = str(tmp_path / f"r{run}{suffix}")
        p = subprocess.Popen(
            [sys.executable, "-m", "gputop_diag", "--demo", "idle", "record", "-o", f]
            + ["--seconds", "600", "--interval", str(INTERVAL)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            # From its first byte (the writer and the signal handlers are in place), then
            # somewhere in the next ~40 lines (the demo writes about one a 10 ms).
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (os.path.exists(f) and os.path.getsize(f)):
                time.sleep(0.002)
            time.sleep(rng.uniform(0, 0.4))
            p.send_signal(getattr(signal, sig))
            out, err = p.communicate(timeout=30)
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
        what = (sig, suffix, run)
        snaps, warnings = read_back(f)
        assert [s.timestamp for s in snaps] == [
            sim.EPOCH0 + INTERVAL * k for k in range(len(snaps))
        ], what
        if sig == "SIGKILL":
            assert p.returncode == -signal.SIGKILL, what
            if suffix == ".jsonl.gz":  # no gzip end: said; zcat gives the same whole lines
                assert warnings and ("cut off" in warnings[0] or "is empty" in warnings[0])
                if shutil.which("zcat"):
                    text = subprocess.run(["zcat", f], capture_output=True).stdout
                    whole = text.count(b"\n")  # the header and the snapshots
                    assert whole == len(snaps) + 1 or (not snaps and whole == 0), what
            continue
        # A caught signal: the file was closed properly and the summary counts its lines; the
        # run was cut before its --seconds: 128 + the signal, as a shell reports it.
        assert p.returncode == 128 + getattr(signal, sig), (what, err)
        assert f"recorded {len(snaps)} snapshots" in err and "stopped early" in err, (what, err)
        assert not warnings, (what, warnings)
        assert_whole_gzip(f)
