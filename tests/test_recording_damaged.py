"""A damaged recording says it is damaged, how much of it was read, and replays that much.

A gzip recording cut anywhere (in its gzip header, in its header line, between or inside
snapshot lines), gzip data with garbage after it, a plain file whose last line is cut: each is
"damaged", with the number of snapshots read before the damage, and those snapshots replay. A
file of no byte is "empty"; a plain recording named .gz reads as what it is; binary garbage is
no recording (or, behind gzip's magic bytes, damaged gzip data), one line and exit 2."""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import random
import re
import zlib

import pytest

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.monitor.core import Monitor
from gputop_diag.recording import store, writer

N = 5  # snapshots in the recording


@pytest.fixture(scope="module")
def snaps():
    m = Monitor(sim.build("idle"))
    out = []
    m.run_for(N - 1, lambda t: out.append(t.snapshot))
    assert len(out) == N
    return out


@pytest.fixture(scope="module")
def gz(tmp_path_factory, snaps):
    """(the bytes of a whole gzip recording, the file's size after each snapshot: the header
    line goes with the first)."""
    path = str(tmp_path_factory.mktemp("whole") / "r.jsonl.gz")
    sizes = []
    with writer.RecordingWriter(path, interval_s=1.0) as w:
        for s in snaps:
            w.write(s)
            sizes.append(os.path.getsize(path))
    return open(path, "rb").read(), sizes


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def read(path: str) -> tuple[list, list[str]]:
    rec = store.Recording.open(path)
    rec.on_warning = lambda text: None
    return list(rec.snapshots()), rec.warnings


def kept_in(text: str) -> int:
    """The count a damage warning gives: "N snapshots read before it" (0: "no snapshot")."""
    if "no snapshot before it" in text:
        return 0
    m = re.search(r"(\d+) snapshots? read before it", text)
    assert m, text
    return int(m.group(1))


def put(tmp_path, name: str, data: bytes) -> str:
    p = tmp_path / name
    p.write_bytes(data)
    return str(p)


def test_a_gzip_recording_cut_after_100_bytes_is_damaged_not_empty(tmp_path, gz):
    data, sizes = gz
    path = put(tmp_path, "cut.jsonl.gz", data[:100])
    assert b"\n" not in zlib.decompressobj(31).decompress(data[:100])  # inside the header line
    with pytest.raises(store.RecordingError) as e:
        store.Recording.open(path)
    assert "is damaged" in str(e.value) and "empty" not in str(e.value)
    assert "nothing in it to replay" in str(e.value)
    rc, out, err = cli(["--replay", path, "diagnose"])
    assert rc == 2 and out == "" and err.count("\n") == 1 and "is damaged" in err, err


@pytest.mark.parametrize("n", [1, 2, 5, 9, 10, 11, 20])
def test_a_cut_in_the_gzip_header_is_damaged(tmp_path, gz, n):
    path = put(tmp_path, "h.jsonl.gz", gz[0][:n])  # the gzip header is 10 bytes
    rc, out, err = cli(["--replay", path, "diagnose"])
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert "is damaged" in err and "nothing in it to replay" in err and "empty" not in err, err


def test_a_file_of_no_byte_is_empty(tmp_path):
    for name in ("zero.jsonl.gz", "zero.jsonl"):
        rc, out, err = cli(["--replay", put(tmp_path, name, b""), "diagnose"])
        assert rc == 2 and "is empty" in err and "damaged" not in err, err


def test_a_gzip_recording_cut_mid_stream_replays_what_it_holds(tmp_path, gz, snaps):
    """Cut at random bytes of every snapshot line (a fixed seed): the warning says damaged and
    counts the snapshots read, which are the whole lines before the cut, and they replay."""
    data, sizes = gz
    rng = random.Random(1729)
    cuts = sorted({rng.randrange(sizes[0], len(data)) for _ in range(40)} | {sizes[2] - 1})
    for n in cuts:
        path = put(tmp_path, "mid.jsonl.gz", data[:n])
        got, warnings = read(path)
        whole = sum(1 for size in sizes if size <= n)
        assert got == snaps[: len(got)] and len(got) - whole in (0, 1), n
        assert len(warnings) == 1 and "is damaged" in warnings[0], (n, warnings)
        assert "cut off" in warnings[0] and kept_in(warnings[0]) == len(got), (n, warnings)
    path = put(tmp_path, "mid.jsonl.gz", data[: sizes[2] + 20])  # inside the 4th snapshot line
    rc, out, err = cli(["--replay", path, "diagnose"])
    assert rc == 0 and out.startswith("Bottleneck:"), err
    assert "is damaged" in err and "3 snapshots read before it" in err, err


@pytest.mark.parametrize(
    "garbage",
    [b"garbage appended here\n", bytes(range(256)), b"\x1f\x8b\x08" + bytes(50), b"\0\0\x01"],
    ids=["text", "bytes", "gzip-magic", "zeros"],
)
def test_garbage_after_a_gzip_recording_is_damage_after_every_snapshot(
    tmp_path, gz, snaps, garbage
):
    path = put(tmp_path, "g.jsonl.gz", gz[0] + garbage)
    got, warnings = read(path)
    assert got == snaps
    assert len(warnings) == 1 and "is damaged" in warnings[0], warnings
    assert kept_in(warnings[0]) == N, warnings
    rc, out, err = cli(["--replay", path, "diagnose"])
    assert rc == 0 and out.startswith("Bottleneck:") and f"{N} snapshots read" in err, err


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_truncated_last_json_line_is_damaged_and_the_rest_replays(tmp_path, gz, snaps, suffix):
    text = gzip.decompress(gz[0])
    cut = text[: text.rindex(b"\n", 0, len(text) - 1) + 200]  # 200 bytes of the last line
    path = put(tmp_path, f"t{suffix}", gzip.compress(cut) if suffix.endswith(".gz") else cut)
    got, warnings = read(path)
    assert got == snaps[:-1]
    assert len(warnings) == 1 and "cut off or damaged" in warnings[0], warnings
    assert kept_in(warnings[0]) == N - 1, warnings
    rec = store.Recording.open(path)
    rec.on_warning = lambda text: None
    assert rec.last() == snaps[-2] and kept_in(rec.warnings[0]) == N - 1


def test_a_plain_header_line_cut_off_is_damaged(tmp_path, gz):
    text = gzip.decompress(gz[0])
    path = put(tmp_path, "p.jsonl", text[:40])
    rc, out, err = cli(["--replay", path, "diagnose"])
    assert rc == 2 and err.count("\n") == 1 and "is damaged" in err and "header" in err, err


def test_a_plain_recording_named_gz_reads_whole(tmp_path, gz, snaps):
    path = put(tmp_path, "plain.jsonl.gz", gzip.decompress(gz[0]))
    got, warnings = read(path)
    assert got == snaps and warnings == []
    rc, out, err = cli(["--replay", path, "diagnose"])
    assert rc == 0 and err == "", err


@pytest.mark.parametrize("magic", [b"", b"\x1f\x8b", b"\x1f\x8b\x08\x00"])
def test_binary_garbage_is_one_line_and_exit_2(tmp_path, magic):
    rng = random.Random(len(magic))
    data = magic + bytes(rng.randrange(256) for _ in range(4000))
    path = put(tmp_path, "bin.jsonl.gz", data)
    rc, out, err = cli(["--replay", path, "diagnose"])
    assert rc == 2 and out == "" and err.count("\n") == 1 and "Traceback" not in err, err
    if magic:  # gzip's magic bytes: damaged gzip data
        assert "is damaged" in err and "nothing in it to replay" in err, err
    else:
        assert "not a gputop-diag recording" in err, err


def test_a_gzip_cut_inside_the_first_snapshot_is_one_message(tmp_path, gz):
    """Cut inside line 2: nothing to replay, said once (not a warning and then "holds no
    snapshots"), with one pair of brackets."""
    data, sizes = gz
    whole = zlib.decompressobj(31).decompress(data)
    header_end = whole.index(b"\n") + 1
    cut = zlib.compressobj(9, zlib.DEFLATED, 31)
    stream = cut.compress(whole[: header_end + 40]) + cut.flush(zlib.Z_SYNC_FLUSH)
    path = put(tmp_path, "cut2.jsonl.gz", stream)  # a gzip stream without its end
    rc, out, err = cli(["--replay", path, "diagnose"])
    assert rc == 2 and out == "" and err.count("\n") == 1, err
    assert "inside line 2" in err and "nothing in it to replay" in err, err
    assert ") (" not in err


def test_a_cut_inside_the_header_has_one_pair_of_brackets(tmp_path, gz):
    data, _ = gz
    path = put(tmp_path, "h.jsonl.gz", data[:100])
    rc, _, err = cli(["--replay", path, "diagnose"])
    assert rc == 2 and ") (" not in err and "header" in err, err
