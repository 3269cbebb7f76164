"""Kernel-log lines → kernel messages with their times. Pure: no I/O, no clock.

Reads every prefix a kernel line arrives with — raw `dmesg`, `dmesg -r`, `-T`, `-x`,
`--time-format=iso`, `/dev/kmsg`, journal short / short-iso / short-precise / short-full /
short-unix / short-monotonic, classic and RFC 3339 syslog (with or without the kernel's uptime),
Talos — with localised month names, rsyslog's `#012` escapes and the indented continuation lines of
multi-line messages (journalctl(1) `--output`, RFC 3164/5424). Binary junk is skipped and counted,
NUL runs (a crash leaves them in syslog) are stripped, invalid UTF-8 is read with replacement
characters and counted: nothing is fatal. `xid/events.py` finds the driver events in the messages.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

MAX_LINE_CHARS = 16384  # a longer "line" is cut: no kernel message is this long


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One kernel message: its text (continuation lines joined with newlines), its time."""

    text: str
    timestamp: float | None = None  # epoch seconds, when the source gives an absolute time
    uptime_s: float | None = None  # seconds since boot, when that is all it gives
    raw: str = ""  # as read, prefix included


@dataclass
class ParseStats:
    """What parsing met besides events."""

    lines: int = 0
    binary_skipped: int = 0  # lines of binary data, skipped
    invalid_utf8: int = 0  # lines read with replacement characters
    nul_stripped: int = 0  # lines that had NUL runs (a crash leaves them in syslog)
    cut: int = 0  # lines longer than MAX_LINE_CHARS, cut

    def add(self, other: ParseStats) -> None:
        for f in ("lines", "binary_skipped", "invalid_utf8", "nul_stripped", "cut"):
            setattr(self, f, getattr(self, f) + getattr(other, f))


# --- bytes → text -------------------------------------------------------------------------------
_CONTROL = re.compile(rb"[\x01-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")


def clean_line(line: bytes | str, stats: ParseStats) -> str | None:
    """The line as text, or None for binary junk (counted)."""
    stats.lines += 1
    if isinstance(line, str):
        data = line.encode("utf-8", "surrogateescape")
    else:
        data = line
    data = data.rstrip(b"\r\n")
    had_nul = b"\x00" in data
    if had_nul:
        data = data.replace(b"\x00", b"")
        if not data.strip():
            stats.binary_skipped += 1
            return None
    if len(data) > MAX_LINE_CHARS:
        stats.cut += 1
        data = data[:MAX_LINE_CHARS]
    controls = len(_CONTROL.findall(data))
    if controls and controls * 20 > len(data):  # more than 5 % control bytes: not text
        stats.binary_skipped += 1
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("utf-8", "replace")
        # mostly undecodable: random bytes, not a line with one bad character
        if text.count("\ufffd") * 10 > len(text):
            stats.binary_skipped += 1
            return None
        stats.invalid_utf8 += 1
    stats.nul_stripped += had_nul
    return _CONTROL_STR.sub("", text) if controls else text


_CONTROL_STR = re.compile(r"[\x01-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]")


# --- prefixes and times -------------------------------------------------------------------------
_MONTHS: dict[str, int] = {}
for _n, _names in enumerate(
    (
        "jan janv ene gen sty led oca янв",
        "feb févr fev lut úno şub фев",
        "mar mär mars mrt bře мар",
        "apr avr abr kwi dub nis апр",
        "may mai mag maj mei kvě мая май",
        "jun juin giu cze čvn haz июн",
        "jul juil lug lip čvc tem июл",
        "aug août ago sie srp ağu авг",
        "sep sept set wrz zář eyl сен",
        "oct okt ott out paź říj eki окт",
        "nov lis kas ноя",
        "dec déc dic dez gru pro ara дек",
    ),
    start=1,
):
    for _name in _names.split():
        _MONTHS[_name] = _n

_P_KMSG = re.compile(r"(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;")
_P_PRIO = re.compile(r"<\d{1,3}>")
_P_DMESG_X = re.compile(
    r"[a-z]+\s*:\s*(?:emerg|alert|crit|err|warn|notice|info|debug)\s*:\s?", re.IGNORECASE
)
_P_UPTIME = re.compile(r"\[\s*(?P<up>\d+\.\d+)\]\s?")
_P_CTIME = re.compile(
    r"\[[A-Z][a-z]{2} (?P<mon>[A-Z][a-z]{2})\s+(?P<d>\d{1,2}) (?P<t>\d\d:\d\d:\d\d)"
    r"(?:[.,]\d+)? (?P<y>\d{4})\]\s?"
)
_ISO = (
    r"(?P<date>\d{4}-\d\d-\d\d)[T ](?P<t>\d\d:\d\d:\d\d)(?:[.,](?P<frac>\d+))?"
    r"(?P<tz>Z|[+-]\d\d:?\d\d)?"
)
_P_ISO = re.compile(_ISO + r"\s+")
_P_FULL = re.compile(  # journalctl -o short-full: "Thu 2026-01-15 09:12:00 UTC host kernel:"
    r"[A-Z][a-z]{2} (?P<date>\d{4}-\d\d-\d\d) (?P<t>\d\d:\d\d:\d\d)(?:\.(?P<frac>\d+))? "
    r"(?P<zone>[A-Z]{2,5}|[+-]\d{4})\s+"
)
_P_UNIX = re.compile(r"(?P<unix>\d{9,11}\.\d+)\s+")
_P_SYSLOG = re.compile(
    r"(?P<mon>\d{1,2}(?:월|月)|[^\W\d_]{3,5}\.?)\s+(?P<d>\d{1,2})\s+(?P<t>\d\d:\d\d:\d\d)"
    r"(?:\.(?P<frac>\d+))?\s+"
)
_P_TALOS = re.compile(r"\S+: [a-z]+: [a-z]+: \[" + _ISO + r"\]: ")
_HOST_TAG = re.compile(r"\S+ [^\s:\[]+(?:\[\d+\])?: ?")
_MONO_HOST = re.compile(r"\S+ kernel: ?")


def _iso_epoch(date: str, t: str, frac: str | None, tz: str | None) -> float | None:
    try:
        dt = datetime.strptime(f"{date} {t}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return None
    if tz and tz not in ("Z", "UTC", "GMT"):
        sign = 1 if tz[0] == "+" else -1
        digits = tz[1:].replace(":", "")
        if not digits.isdigit():
            return None
        offset = timedelta(hours=int(digits[:2]), minutes=int(digits[2:4] or 0))
        dt = dt.replace(tzinfo=timezone(sign * offset))
    elif tz:
        dt = dt.replace(tzinfo=timezone.utc)
    seconds = dt.timestamp()  # a naive time is local, as the tool that wrote it
    if frac:
        seconds += int(frac[:6].ljust(6, "0")) / 1e6
    return seconds


def _month(token: str) -> int | None:
    token = token.lower().rstrip(".")
    if token[-1:] in ("월", "月"):
        n = int(token[:-1])
        return n if 1 <= n <= 12 else None
    return _MONTHS.get(token)


def _yearless_epoch(month: int, day: int, t: str, ref: float | None) -> float | None:
    """A syslog-style time without a year: the latest such time not after `ref` (+1 day)."""
    ref_dt = datetime.fromtimestamp(ref) if ref is not None else datetime.now()
    for year in (ref_dt.year, ref_dt.year - 1):
        try:
            dt = datetime.strptime(f"{year}-{month}-{day} {t}", "%Y-%m-%d %H:%M:%S")
        except ValueError:
            continue  # 29 February in a common year
        if dt <= ref_dt + timedelta(days=1):
            return dt.timestamp()
    return None


def split_prefix(
    line: str, ref_time: float | None = None
) -> tuple[str, float | None, float | None] | None:
    """(message, epoch, uptime) when `line` starts with a known log prefix; None when it has
    none (a bare message, or a continuation line)."""
    s = line
    m = _P_KMSG.match(s)
    if m:
        return s[m.end() :], None, int(m.group("usec")) / 1e6
    m = _P_PRIO.match(s)
    if m:
        s = s[m.end() :]
    m = _P_DMESG_X.match(s)
    if m:
        s = s[m.end() :]
    stamp: float | None = None
    found = False
    m = _P_UPTIME.match(s)
    if m:
        up = float(m.group("up"))
        rest = s[m.end() :]
        h = _MONO_HOST.match(rest)  # journalctl -o short-monotonic
        return (rest[h.end() :] if h else rest), None, up
    m = _P_CTIME.match(s)
    if m:
        mon = _month(m.group("mon"))
        if mon:
            stamp = _iso_epoch(
                f"{m.group('y')}-{mon:02d}-{int(m.group('d')):02d}", m.group("t"), None, None
            )
        return s[m.end() :], stamp, None
    m = _P_TALOS.match(s)
    if m:
        stamp = _iso_epoch(m.group("date"), m.group("t"), m.group("frac"), m.group("tz"))
        s, found = s[m.end() :], True
    if not found:
        m = _P_ISO.match(s)
        if m:
            stamp = _iso_epoch(m.group("date"), m.group("t"), m.group("frac"), m.group("tz"))
            s, found = s[m.end() :], True
            bare = _P_DMESG_X.match(line) is not None  # dmesg -x: no host, no tag
            if not bare and m.group("tz") is not None and "," in m.group(0)[:30]:
                bare = True  # dmesg --time-format=iso: "2025-01-25T10:34:54,859532+00:00 msg"
            if not bare:
                h = _HOST_TAG.match(s)
                if h:
                    s = s[h.end() :]
    if not found:
        m = _P_FULL.match(s)
        if m:
            zone = m.group("zone")
            stamp = _iso_epoch(
                m.group("date"),
                m.group("t"),
                m.group("frac"),
                zone if zone in ("UTC", "GMT") or zone[0] in "+-" else None,
            )
            s, found = s[m.end() :], True
            h = _HOST_TAG.match(s)
            if h:
                s = s[h.end() :]
    if not found:
        m = _P_UNIX.match(s)
        if m:
            stamp = float(m.group("unix"))
            s, found = s[m.end() :], True
            h = _HOST_TAG.match(s)
            if h:
                s = s[h.end() :]
    if not found:
        m = _P_SYSLOG.match(s)
        if m and _month(m.group("mon")) is not None:
            stamp = _yearless_epoch(
                _month(m.group("mon")), int(m.group("d")), m.group("t"), ref_time
            )
            if stamp is not None and m.group("frac"):
                stamp += int(m.group("frac")[:6].ljust(6, "0")) / 1e6
            s, found = s[m.end() :], True
            h = _HOST_TAG.match(s)
            if h:
                s = s[h.end() :]
    if not found:
        return None
    up = _P_UPTIME.match(s)  # kern.log: "... kernel: [  219.470994] NVRM: ..."
    uptime = None
    if up:
        uptime = float(up.group("up"))
        s = s[up.end() :]
    return s, stamp, uptime


def records(
    lines: Iterable[bytes | str],
    stats: ParseStats,
    ref_time: float | None = None,
    boot_time: float | None = None,
) -> Iterator[LogRecord]:
    """Kernel messages from log lines: prefixes read, `#012` escapes and indented continuation
    lines joined to their message. `ref_time` dates yearless stamps; `boot_time` turns
    uptimes into epoch times (only for the boot the lines come from)."""
    pending: list[str] | None = None
    raw: list[str] = []
    stamp = uptime = None

    def flush() -> LogRecord:
        t = stamp
        if t is None and uptime is not None and boot_time is not None:
            t = boot_time + uptime
        return LogRecord("\n".join(pending), t, uptime, "\n".join(raw))

    for line in lines:
        text = clean_line(line, stats)
        if text is None:
            continue
        pieces = text.split("#012") if "#012" in text else [text]
        first = pieces[0].replace("#011", "\t")
        split = split_prefix(first, ref_time)
        if split is None and first[:1] == " " and first[1:2] != " ":
            split = split_prefix(first[1:], ref_time)  # " 5월 18 …": a padded month
        if split is None and pending is not None and first[:1] in (" ", "\t") and first.strip():
            pending.append(first.strip())
            raw.append(first)
        elif split is None and not first.strip():
            continue
        else:
            if pending is not None:
                yield flush()
            if split is None:
                pending, stamp, uptime = [first.strip()], None, None
            else:
                msg, stamp, uptime = split
                pending = [msg.strip()]
            raw = [first]
        for extra in pieces[1:]:  # rsyslog's escaped newlines: the same message goes on
            extra = extra.replace("#011", "\t").strip()
            if extra:
                pending.append(extra)
                raw[-1] += "#012" + extra
    if pending is not None:
        yield flush()
