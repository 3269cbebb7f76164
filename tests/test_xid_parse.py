"""Kernel-log parsing: every reference example line, every prefix, the driver's Xid formats of
every era, SXid, the driver messages that are not Xids, and what is not an event at all."""

from __future__ import annotations

import os
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

from gputop_diag.xid.events import canonical_pci, parse_lines
from gputop_diag.xid.kernlog import ParseStats, clean_line, split_prefix

DATA = Path(__file__).parent / "data" / "kernlog"


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Local-time formats (syslog, dmesg -T) read as UTC, whatever the machine's zone."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def epoch(*args) -> float:
    return datetime(*args, tzinfo=timezone.utc).timestamp()


def reference_examples() -> dict[int, str]:
    out = {}
    for line in (DATA / "reference_examples.tsv").read_text("utf-8").splitlines():
        n, text = line.split("\t", 1)
        out[int(n)] = text
    return out


# number -> (kind, code, pci, pid, process name); None: no event
EXPECTED = {
    1: ("xid", 31, "0000:01:00", None, None),
    2: ("gpu_announce", None, "0000:01:00", None, None),
    3: ("xid", 13, "0000:01:00", None, None),
    4: ("xid", 13, "0000:01:00", None, None),
    5: ("xid", 32, "0000:01:00", None, None),
    6: ("xid", 31, "0000:00:06", 2708, None),
    8: ("xid", 31, "0000:0a:00", 13332, "cuda_plot_k32_v"),
    9: ("xid", 62, "0000:0a:00", None, None),
    10: ("xid", 45, "0000:0a:00", None, None),
    12: ("xid", 13, "0000:cb:00", None, None),
    13: ("xid", 109, "0000:cb:00", 1797828, "pt_main_thread"),
    15: ("xid", 64, "0000:07:00", None, None),
    16: ("xid", 119, "0000:9b:00", 4071838, "python"),
    18: ("xid", 45, "0000:dc:00", 1818990, "python3"),
    19: ("xid", 144, "0000:01:00", None, None),
    20: ("xid", 149, "0000:00:00", None, None),
    22: ("xid", 145, "0018:01:00", None, None),
    23: None,  # the reporter redacted the PCI address: not a usable event
    25: ("xid", 79, "0000:44:00", None, None),
    26: ("xid", 79, "0000:91:00", None, None),
    28: ("xid", 154, "0018:01:00", None, None),
    29: ("xid", 94, "0000:9b:00", 1234, "python3"),
    30: ("sxid", 22013, "0000:04:00.0", None, None),
    32: ("sxid", 22013, "0000:04:00.0", None, None),
    34: ("nvlink_training", None, None, None, None),
}


def test_every_reference_example_is_in_the_table():
    assert set(reference_examples()) == set(EXPECTED)


@pytest.mark.parametrize("number", sorted(EXPECTED))
def test_reference_example_parses(number):
    line = reference_examples()[number]
    parsed = parse_lines([line], "test", ref_time=epoch(2026, 1, 20))
    want = EXPECTED[number]
    if want is None:
        assert parsed.events == []
        return
    assert len(parsed.events) == 1, parsed.events
    e = parsed.events[0]
    assert (e.kind, e.code, e.pci, e.pid, e.process_name) == want
    assert e.raw == line  # kept for local display


def test_reference_example_details():
    ex = reference_examples()
    one = lambda n: parse_lines([ex[n]], ref_time=epoch(2026, 1, 20)).events[0]  # noqa: E731
    assert one(18).caused_by == 149
    assert (one(19).fatal, one(19).link) == (False, 0)
    assert (one(20).fatal, one(20).link) == (True, 0)
    assert (one(22).fatal, one(22).link) == (False, 13)
    assert one(28).recovery_action == "GPU Reset Required"
    assert one(2).gpu_uuid == "GPU-8a47641b-dff6-f09f-618c-c3eb58fb430d"
    assert one(3).uptime_s == pytest.approx(31609.615231)
    assert one(12).timestamp == epoch(2024, 8, 30, 11, 43, 9)
    assert one(15).timestamp == epoch(2025, 12, 2, 11, 38, 47)  # the year before the reference
    assert one(15).uptime_s == pytest.approx(219.471050)
    assert one(30).switch == 3 and one(30).fatal is False and one(30).link == 44


def test_sxid_detail_lines_fold_into_their_sxid():
    ex = reference_examples()
    lines = [ex[30], ex[32]]
    events = parse_lines(lines).events
    assert len(events) == 1
    assert "Minion Link DLREQ" in events[0].detail and "Data {" in events[0].detail


XID = "NVRM: Xid (PCI:0000:3b:00): 31, pid=1234, name=python3, Ch 00000010, intr 00000000."
T0 = epoch(2026, 1, 15, 9, 12, 0)

# prefix -> (line, epoch, uptime)
PREFIXES = {
    "dmesg": (f"[ 1843.308145] {XID}", None, 1843.308145),
    "dmesg padded": (f"[   38.175561] {XID}", None, 38.175561),
    "dmesg -r": (f"<4>[  123.456789] {XID}", None, 123.456789),
    "dmesg -T": (f"[Thu Jan 15 09:12:00 2026] {XID}", T0, None),
    "dmesg -T padded day": (
        f"[Mon Mar  6 21:34:31 2023] {XID}",
        epoch(2023, 3, 6, 21, 34, 31),
        None,
    ),
    "dmesg -x iso": (f"kern  :err   : 2026-01-15T09:12:00,250000+00:00 {XID}", T0 + 0.25, None),
    "dmesg iso": (f"2026-01-15T09:12:00,250000+00:00 {XID}", T0 + 0.25, None),
    "/dev/kmsg": (f"4,1234,82659755933,-;{XID}", None, 82659.755933),
    "journal short": (f"Jan 15 09:12:00 node7 kernel: {XID}", T0, None),
    "journal short-iso": (f"2026-01-15T09:12:00+0000 node7 kernel: {XID}", T0, None),
    "journal short-iso-precise": (
        f"2026-01-15T11:12:00.5+02:00 node7 kernel: {XID}",
        T0 + 0.5,
        None,
    ),
    "journal short-precise": (f"Jan 15 09:12:00.250000 node7 kernel: {XID}", T0 + 0.25, None),
    "journal short-full": (f"Thu 2026-01-15 09:12:00 UTC node7 kernel: {XID}", T0, None),
    "journal short-unix": (f"{T0:.6f} node7 kernel: {XID}", T0, None),
    "journal short-monotonic": (f"[ 1843.308145] node7 kernel: {XID}", None, 1843.308145),
    "syslog classic": (f"Jan 15 09:12:00 node7 kernel: [  219.470994] {XID}", T0, 219.470994),
    "syslog padded day": (f"Jan  5 09:12:00 node7 kernel: {XID}", epoch(2026, 1, 5, 9, 12), None),
    "syslog RFC 3339": (f"2026-01-15T04:12:00.000000-05:00 node7 kernel: {XID}", T0, None),
    "Talos": (
        f"192.168.11.119: kern: warning: [2026-01-15T09:12:00.291660856Z]: {XID}",
        T0 + 0.29166,
        None,
    ),
    "Polish month": (f"sty 15 09:12:00 node7 kernel: {XID}", T0, None),
    "French month": (f"janv. 15 09:12:00 node7 kernel: {XID}", T0, None),
    "German month": (f"Jan 15 09:12:00 node7 kernel: {XID}", T0, None),
    "Korean month": (f" 1월 15 09:12:00 node7 kernel: {XID}", T0, None),
    "bare": (XID, None, None),
    "tag only": (f"kernel: {XID}", None, None),
}


@pytest.mark.parametrize("name", list(PREFIXES))
def test_every_prefix(name):
    line, when, uptime = PREFIXES[name]
    events = parse_lines([line], name, ref_time=epoch(2026, 1, 20)).events
    assert len(events) == 1
    e = events[0]
    assert (e.code, e.pci, e.pid, e.process_name) == (31, "0000:3b:00", 1234, "python3")
    assert e.timestamp == (pytest.approx(when) if when is not None else None)
    assert e.uptime_s == (pytest.approx(uptime) if uptime is not None else None)
    assert e.detail.startswith("Ch 00000010")


def test_uptime_becomes_a_time_with_the_boot_time():
    boot = epoch(2026, 1, 15, 8, 0, 0)
    e = parse_lines([f"[ 3600.5] {XID}"], boot_time=boot).events[0]
    assert e.timestamp == pytest.approx(boot + 3600.5) and e.uptime_s == pytest.approx(3600.5)


def test_a_yearless_stamp_after_the_file_was_written_is_last_year():
    ref = epoch(2026, 1, 2)  # the file's mtime: written on 2 January
    dec, jan = (
        parse_lines([f"{d} node7 kernel: {XID}"], ref_time=ref).events[0].timestamp
        for d in ("Dec 31 23:59:00", "Jan  1 00:01:00")
    )
    assert dec == epoch(2025, 12, 31, 23, 59) and jan == epoch(2026, 1, 1, 0, 1)


@pytest.mark.parametrize(
    ("line", "want"),
    [
        (
            "NVRM: Xid (PCI:0000:3b:00 GPU-I:02): 13, pid=9, name=VLLM::Worker, Graphics",
            (13, "0000:3b:00", 9, "VLLM::Worker", 2, None),
        ),
        (
            "NVRM: Xid (PCI:0009:01:00 GPU-I:02 GPU-CI:01): 31, pid=9, name=nvc:[driver], Ch 1",
            (31, "0009:01:00", 9, "nvc:[driver]", 2, 1),
        ),
        (
            "NVRM: Xid (PCI:0002:3b:00): 48, pid='<unknown>', name=<unknown>, An uncorrectable ECC",
            (48, "0002:3b:00", None, None, None, None),
        ),
        (
            "NVRM: Xid (0000:03:00): 14, Channel 00000001",
            (14, "0000:03:00", None, None, None, None),
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 31, pid=2708, Ch 0000003d, intr 10000000",
            (31, "0000:3b:00", 2708, None, None, None),
        ),
        (
            "NVRM: Xid (PCI:0000:3b:00): 38, pid=213710, name=nvtop, channel 0x00000003 0000c597",
            (38, "0000:3b:00", 213710, "nvtop", None, None),
        ),
        (
            "NVRM: Xid (PCI:0000:3B:00): 79, GPU has fallen off the bus.",
            (79, "0000:3b:00", None, None, None, None),
        ),
    ],
    ids=[
        "MIG GI",
        "MIG GI+CI, domain 9",
        "unknown pid, domain 2",
        "R3xx no PCI:",
        "R440 pid only",
        "R580 channel",
        "upper-case bus id",
    ],
)
def test_xid_formats_of_every_era(line, want):
    e = parse_lines([line]).events[0]
    assert (e.code, e.pci, e.pid, e.process_name, e.gpu_instance, e.compute_instance) == want


def test_nvlink5_line_with_double_spaces():
    line = "NVRM: Xid (PCI:0008:01:00): 149, NETIR_LINK_EVT  Fatal  XC0 i0 Link 07 (0x0 0x0)"
    e = parse_lines([line]).events[0]
    assert (e.code, e.pci, e.fatal, e.link) == (149, "0008:01:00", True, 7)


API_OLD = [
    "NVRM: API mismatch: the client has the version 515.48.07, but",
    "NVRM: this kernel module has the version 510.73.05.  Please",
    "NVRM: make sure that this kernel module and all NVIDIA driver",
    "NVRM: components have the same version.",
]
API_NEW = [
    "NVRM: API mismatch: the client 'kwin_wayland' (pid 1005)",
    "NVRM: has the version 595.84, but this kernel module has",
    "NVRM: the version 595.80.  Please make sure that this",
    "NVRM: kernel module and all NVIDIA driver components",
    "NVRM: have the same version.",
]


@pytest.mark.parametrize(
    "lines",
    [
        [f"Jun  1 10:00:00 h kernel: [   10.100000] {x}" for x in API_OLD],  # one record a line
        [f"[   10.100000] {API_OLD[0]}"] + ["               " + x for x in API_OLD[1:]],  # dmesg
        ["Jun  1 10:00:00 h kernel: " + "#012".join(API_OLD)],  # rsyslog's escaped newlines
    ],
    ids=["journal/syslog records", "dmesg continuation", "#012"],
)
def test_api_mismatch_old_wording_over_several_lines(lines):
    events = parse_lines(lines, ref_time=epoch(2026, 6, 2)).events
    assert [(e.kind, e.client_version, e.version) for e in events] == [
        ("api_mismatch", "515.48.07", "510.73.05")
    ]


def test_api_mismatch_new_wording():
    lines = [f"[  100.000001] {API_NEW[0]}"] + ["               " + x for x in API_NEW[1:]]
    (e,) = parse_lines(lines).events
    assert (e.kind, e.client_version, e.version, e.pid, e.process_name) == (
        "api_mismatch",
        "595.84",
        "595.80",
        1005,
        "kwin_wayland",
    )


@pytest.mark.parametrize(
    ("lines", "kind", "pci", "minor"),
    [
        (
            [
                "[ 5.1] NVRM: The NVIDIA GPU 0000:01:00.0",
                "[ 5.1] NVRM: (PCI ID: 10de:2204) installed in this system has",
                "[ 5.1] NVRM: fallen off the bus and is not responding to commands.",
            ],
            "fallen_off_bus",
            "0000:01:00",
            None,
        ),
        (
            ["[ 5.1] NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus."],
            "fallen_off_bus",
            "0000:2b:00",
            None,
        ),
        (
            ["[ 5.2] NVRM: The NVIDIA probe routine failed for 1 device(s)."],
            "probe_failed",
            None,
            None,
        ),
        (
            [
                "[ 7.0] NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)",
                "[ 7.0] NVRM: GPU 0000:0a:00.0: rm_init_adapter failed, device minor number 5",
            ],
            "init_failed",
            "0000:0a:00",
            5,
        ),
        (
            [
                "[ 7.0] NVRM: RmInitAdapter failed! (0x26:0xffff:1228)",
                "[ 7.0] NVRM: rm_init_adapter failed for device bearing minor number 0",
            ],
            "init_failed",
            None,
            0,
        ),
        (
            ["[ 9.0] NVRM: GPU6 _kgspIsHeartbeatTimedOut: Heartbeat timed out, callback_time=0"],
            "gsp_timeout",
            None,
            None,
        ),
        (["[ 9.0] NVRM: _kgspLogRpcTimeout: *** GSP Timeout ***"], "gsp_timeout", None, None),
        (
            [
                "[ 9.0] NVRM: _kgspRpcGspEventPmuHalted: Received signal from GSP that PMU has "
                "halted."
            ],
            "gsp_timeout",
            None,
            None,
        ),
        (
            [
                "[ 9.0] NVRM: nvAssertOkFailedNoLog: Assertion failed: Reset required "
                "[NV_ERR_RESET_REQUIRED] (0x00000062) returned from status @ kernel_channel.c:2874"
            ],
            "reset_required",
            None,
            None,
        ),
        (
            ["[ 9.0] NVRM: krcWatchdog_IMPL: RC watchdog: GPU is probably locked!"],
            "rc_watchdog",
            None,
            None,
        ),
        (
            ["Failed to initialize NVML: Driver/library version mismatch"],
            "nvml_mismatch",
            None,
            None,
        ),
        (
            [
                "nvidia-container-cli: initialization error: nvml error: driver/library version "
                "mismatch: unknown"
            ],
            "nvml_mismatch",
            None,
            None,
        ),
        (
            ["[ 3.0] pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0"],
            "pcie_aer",
            "0000:01:00",
            None,
        ),
    ],
    ids=[
        "fallen off at probe",
        "fallen off, short",
        "probe failed",
        "RmInitAdapter + minor",
        "RmInitAdapter, old wording",
        "GSP heartbeat",
        "GSP timeout",
        "GSP PMU halted",
        "reset required",
        "RC watchdog",
        "NVML mismatch",
        "container NVML mismatch",
        "AER",
    ],
)
def test_driver_messages_that_are_not_xids(lines, kind, pci, minor):
    events = parse_lines(lines).events
    assert [(e.kind, e.pci, e.minor) for e in events] == [(kind, pci, minor)]


def test_driver_load_line_gives_version_and_flavour():
    lines = [
        "[ 4.3] NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  570.158.01  Release "
        "Build  (dvs-builder@U16-I3-B03-4-3)  Tue Nov 26 01:14:39 UTC 2024",
        "[ 4.3] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  535.129.03  Thu Oct 19 "
        "18:56:32 UTC 2023",
    ]
    events = parse_lines(lines).events
    assert [(e.kind, e.version, e.detail.split()[0]) for e in events] == [
        ("driver_loaded", "570.158.01", "open"),
        ("driver_loaded", "535.129.03", "proprietary"),
    ]


ORDINARY = [
    "[    1.000000] usb 1-1: new high-speed USB device number 2 using xhci_hcd",
    "[    2.000000] nvidia-modeset: Loading NVIDIA Kernel Mode Setting Driver for UNIX "
    "platforms  535.129.03",
    "[    2.100000] nvidia 0000:01:00.0: enabling device (0000 -> 0003)",
    "[    2.200000] nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
    "[    2.300000] [drm] [nvidia-drm] [GPU ID 0x00000100] Loading driver",
    "[    3.000000] EXT4-fs (sda1): mounted filesystem with ordered data mode",
    "[    3.100000] pcieport 0000:00:01.0: AER: Corrected error received: 0000:01:00.0",
    "[    4.000000] NVRM: GPU Board Serial Number: 1234567890123",
    "Jan 15 09:12:00 node7 systemd[1]: Started nvidia-persistenced.service.",
    "Jan 15 09:12:00 node7 kernel: Xid is mentioned here but not by the driver",
    "",
    "    ",
]


def test_ordinary_kernel_lines_are_not_events():
    parsed = parse_lines(ORDINARY)
    assert parsed.events == [] and parsed.ooms == []


def test_oom_kills_come_from_the_same_pass():
    lines = [
        "Jan 15 09:12:00 node7 kernel: Out of memory: Killed process 4242 (pt_data_worker) "
        "total-vm:1kB",
        f"Jan 15 09:12:01 node7 kernel: {XID}",
    ]
    parsed = parse_lines(lines, ref_time=epoch(2026, 1, 20))
    assert [(k.pid, k.process_name, k.timestamp) for k in parsed.ooms] == [
        (4242, "pt_data_worker", T0)
    ]
    assert [e.code for e in parsed.events] == [31]


def test_binary_junk_is_skipped_and_counted_text_around_it_is_kept():
    junk = bytes(range(256)) * 4
    lines = [
        junk,
        b"\xff\xfe\xfd\xfc" * 40,
        b"\x00" * 500,
        b"\x00\x00\x00\x00Jan 15 09:12:00 node7 kernel: " + XID.encode(),  # after a hard reset
        b"Jan 15 09:12:01 node7 kernel: " + XID.replace("python3", "caf\xe9").encode("latin-1"),
    ]
    parsed = parse_lines(lines, ref_time=epoch(2026, 1, 20))
    st = parsed.stats
    assert st.lines == 5 and st.binary_skipped == 3 and st.nul_stripped == 1
    assert st.invalid_utf8 == 1
    assert [(e.code, e.timestamp, e.process_name) for e in parsed.events] == [
        (31, T0, "python3"),
        (31, T0 + 1, "caf\ufffd"),
    ]


def test_clean_line_cuts_what_no_kernel_prints():
    st = ParseStats()
    text = clean_line(b"a" * 100_000, st)
    assert len(text) == 16384 and st.cut == 1


def test_continuation_needs_a_message_to_continue():
    assert split_prefix("               NVRM: this kernel module") is None
    parsed = parse_lines(["               NVRM: Xid (PCI:0000:01:00): 13, Graphics Exception"])
    assert [e.code for e in parsed.events] == [13]  # a lone indented line is its own message


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("PCI:0000:3b:00", "0000:3b:00"),
        ("00000000:3B:00.0", "0000:3b:00"),
        ("0000:3B:00.0", "0000:3b:00"),
        ("0018:01:00.0", "0018:01:00"),
        ("nonsense", None),
        (None, None),
    ],
)
def test_bus_ids_in_every_form_meet(text, want):
    assert canonical_pci(text) == want


def test_a_sample_of_each_log_family_parses(tmp_path):
    """The fixture files: what each tool prints, end to end."""
    for name, count in (("dmesg-T.txt", 5), ("kern.log", 6), ("journal-short.txt", 6)):
        data = (DATA / name).read_bytes().splitlines()
        mtime = os.stat(DATA / name).st_mtime
        parsed = parse_lines(data, name, ref_time=max(mtime, epoch(2026, 2, 1)))
        assert len(parsed.events) == count, (name, parsed.events)
        assert all(e.timestamp is not None for e in parsed.events if e.kind != "driver_loaded")


FALL = "NVRM: GPU 0000:5d:00.0: GPU has fallen off the bus."
XID79 = "NVRM: Xid (PCI:0000:5d:00): 79, pid=41248, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize("order", ["xid first", "line first"])
def test_one_fall_off_the_bus_said_twice_is_one_event(order):
    t = "Jan 15 10:01:30 node kernel: "
    lines = [t + XID79, t + FALL] if order == "xid first" else [t + FALL, t + XID79]
    (e,) = parse_lines(lines, "journal", ref_time=epoch(2026, 1, 20)).events
    assert (e.kind, e.code, e.pci, e.pid) == ("xid", 79, "0000:5d:00", 41248)
    assert "Xid (PCI:0000:5d:00): 79" in e.raw and "GPU has fallen off the bus." in e.raw


def test_falls_of_other_gpus_or_other_times_stay_apart():
    t = "Jan 15 10:01:30 node kernel: "
    later = "Jan 15 10:09:00 node kernel: "
    other = FALL.replace("5d", "3b")
    kinds = [
        (e.kind, e.pci)
        for e in parse_lines(
            [t + XID79, t + other, later + FALL], "journal", ref_time=epoch(2026, 1, 20)
        ).events
    ]
    assert kinds == [
        ("xid", "0000:5d:00"),
        ("fallen_off_bus", "0000:3b:00"),
        ("fallen_off_bus", "0000:5d:00"),
    ]
    alone = parse_lines([t + FALL], "journal", ref_time=epoch(2026, 1, 20)).events
    assert [e.kind for e in alone] == ["fallen_off_bus"]  # without an Xid it is its own event
