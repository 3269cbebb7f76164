"""What the headless commands share: `--sanitize` (one seeded sanitizer for every command) and
the leak check before printing, the one-sample warm-up, the no-driver check, and a snapshot as
text.

Start-up: `snapshot`, `mapping` and `driver` import this module. The warm-up needs only the
collectors (the Sampler), not the Monitor's classifier, Xid triage, kernel log and Slurm, so
`monitor.core` is not imported here. Nor, at import, the model (its package builds every
snapshot dataclass), `dataclasses`, the paced loop or the collectors: the chosen command's module
is loaded to parse its options, and `snapshot` takes its first GPM samples right after
(`collect/nvml/head.py`, `cli.main`), before they load; the functions here import them when
called."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import stat
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING

from ..collect.host_head import RATE_MIN_S
from ..collect.nvml.head import GPM_MIN_INTERVAL_S

if TYPE_CHECKING:
    from ..collect.host_head import HostHead
    from ..collect.nvml.head import GpmHeadStart
    from ..model import Snapshot
    from ..sources import Sources

# Rates (CPU %, NVLink, GPM) need two readings; GPM needs them at least 0.1 s apart.
WARMUP_S = GPM_MIN_INTERVAL_S + 0.01
# With a head start (the GPM pair's first samples taken before the imports, each timed after it
# was taken), the second reading comes HEAD_MARGIN_S after NVML's minimum, and the other rates'
# two readings (CPU %, disk, NVLink, each process's CPU) are at least RATE_MIN_S apart.
HEAD_MARGIN_S = 0.003


SANITIZE_HELP = (
    "show pseudonyms instead of the host and user names, GPU UUIDs, serials, PCI bus ids, "
    "paths and command-line arguments; no minor numbers or raw kernel-log text (also "
    "accepted before the command)"
)


def add_sanitize(p: argparse.ArgumentParser) -> None:
    """`--sanitize` after the command; before it, the top-level option sets the same name."""
    p.add_argument("--sanitize", action="store_true", default=argparse.SUPPRESS, help=SANITIZE_HELP)


def seeded_sanitizer(feed, snaps: Iterable[Snapshot] = (), key: bytes | None = None):
    """The one sanitizer of one sanitized output, seeded the same way by every command (and
    `watch`, `diagnose`: `sanitizer = seeded_sanitizer(feed, snaps)`): first what the machine
    names (`collect.identity`: its host names, this shell's environment, the job's processes'
    environments, working directories and command lines, the accounts of people, the user's
    Slurm jobs), then every snapshot of the window (`sanitize.snapshot.learn_snapshots`). A
    recording is not this machine: only its snapshots seed."""
    from ..collect.identity import read_machine_names
    from ..sanitize.sanitizer import Sanitizer
    from ..sanitize.snapshot import learn_snapshots

    sanitizer = Sanitizer(key)
    snaps = list(snaps)
    if feed is not None and not is_recording(feed):
        pids = sorted({p.pid for snap in snaps[-1:] for p in snap.gpu_processes})
        sanitizer.seed_machine(read_machine_names(feed, pids))
    learn_snapshots(sanitizer, snaps)
    return sanitizer


PREFIX = "gputop-diag: "  # every line of ours on stderr, before a command is known or after


def say(message: object, flush: bool = False) -> None:
    """One line on stderr, as every command and the entry point words it: `gputop-diag: ` and
    the message (a usage error, a failure, a note), whatever the command."""
    print(f"{PREFIX}{message}", file=sys.stderr, flush=flush)


_session: dict[str, object] = {}  # this run of the program: its path namer (`session_key`)


def shown_path(path: str) -> str:
    """`path` as a sanitized surface prints it: its pseudonym under `session_key()`, the same
    wherever it is printed in this run (the summary's `seeded_sanitizer(…, key=session_key())`
    gives the same)."""
    return shown_text(path, path=True)


def shown_text(text: str, path: bool = False) -> str:
    """Free text (an error that names a file) through the session's sanitizer."""
    from ..monitor.run import session_key
    from ..sanitize.sanitizer import Sanitizer

    namer = _session.get("namer")
    if namer is None:
        namer = _session["namer"] = Sanitizer(session_key())
    return namer.path(text) if path else namer.text(text) or ""  # type: ignore[attr-defined]


def said_path(path: str, sanitize: bool) -> str:
    """A path the user named, as stderr says it: under --sanitize its pseudonym, the same in
    every line of this run (`shown_path`: a bare relative name such as `jsmith-runs`, which no
    rule tells from a word, included), else as the user wrote it."""
    return shown_path(path) if sanitize and path not in ("-", "/dev/stdout") else path


def said_text(text: str, sanitize: bool, paths: Iterable[str | None] = ()) -> str:
    """An error's text as stderr says it: under --sanitize each of `paths` it names (the user's
    own: `said_path`) as its pseudonym, the text around them through the session's sanitizer
    (a pseudonym is never sanitized again)."""
    if not sanitize:
        return text
    named = sorted({p for p in paths if p and p not in ("-", "/dev/stdout")}, key=len)[::-1]
    if not named:
        return shown_text(text)
    split = re.compile(rf"(?<![\w./-])({'|'.join(map(re.escape, named))})(?![\w/-])")
    parts = split.split(text)  # text, path, text, path, ..., text
    return "".join(
        said_path(part, True) if k % 2 else (shown_text(part) if part.strip() else part)
        for k, part in enumerate(parts)
    )


def sanitized_output(text: str, sanitizer) -> str | None:
    """`text` if nothing in it still looks like an identifier; None (and why, on stderr)
    otherwise: a sanitized command prints nothing rather than a leak."""
    from ..sanitize.sanitizer import leak_note

    found = sanitizer.leaks(text)
    if not found:
        return text
    say(
        f"the output could not be sanitized with confidence ({leak_note(found)} "
        "left); nothing printed. Please report this (without the output)."
    )
    return None


def output_problem(path: str, option: str = "-o", sanitize: bool = False) -> str | None:
    """Why `path` cannot be written (said before any work: a usage error, exit 2), or None;
    the path named as stderr names it (`said_path`).

    It is opened for appending, as the write will open it, and removed again when this made
    it, so the answer is the file system's own (no such directory, permission denied, a
    read-only file system, a directory). Standard output (`-`), a device or a pipe is left to
    the write itself: opening a pipe would wait for its reader."""
    if path in ("-", "/dev/stdout"):
        return None
    named = said_path(path, sanitize)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        mode = None
    except OSError as e:
        return f"{option} {named}: {e.strerror or e}"
    if mode is not None and stat.S_ISDIR(mode):
        return f"{option} {named}: is a directory"
    if mode is not None and not stat.S_ISREG(mode):
        return None
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOCTTY, 0o600)
    except OSError as e:
        return f"{option} {named}: cannot write: {e.strerror or e}"
    os.close(fd)
    if mode is None:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return None


def input_problem(path: str, option: str, sanitize: bool = False) -> str | None:
    """Why the file `path` named to be read cannot be (said before any work, exit 2), or
    None; the path named as stderr names it (`said_path`). `-` is standard input."""
    if path == "-":
        return None
    named = said_path(path, sanitize)
    if not os.path.lexists(path):
        return f"{option} {named}: no such file"
    if os.path.isdir(path):
        return f"{option} {named}: is a directory"
    if not os.access(path, os.R_OK):
        return f"{option} {named}: cannot read: permission denied"
    return None


def stop_without_nvml(tick) -> None:
    """An `on_tick` of the paced loop: no driver, or NVML failing as a whole, and sampling
    longer cannot change the answer (`diagnose`, `report`)."""
    from ..monitor.run import Done

    if any(e.source == "nvml" and e.gpu_index is None for e in tick.snapshot.errors):
        raise Done


def stopped_early(monitor, until_stopped: bool = False) -> int | None:
    """Say on stderr that the run was stopped before its span (a stop signal, a closed output:
    docs/architecture.md, "Stopping"), so what is printed next covers only what was seen; the
    exit status for it (None: the run covered its span)."""
    ending = getattr(monitor, "ending", None)
    if ending is None or not ending.early:
        return None
    from ..model import formats

    if ending.reason != "closed":
        n = ending.ticks
        say(
            f"stopped early ({ending.reason}) after {formats.count(n, 'sample')}: "
            "what follows covers them only"
        )
    return ending.exit_status(until_stopped)


def is_recording(feed) -> bool:
    """`feed` is a `recording.store.Recording`. Asked without importing that module (it brings
    the sanitizer along): a Recording exists only once its module is loaded."""
    store = sys.modules.get(f"{__package__.rsplit('.', 1)[0]}.recording.store")
    return store is not None and isinstance(feed, store.Recording)


def no_driver_error(snap: Snapshot):
    """Why no GPU is usable (no driver, none found, every GPU lost or unavailable), or None."""
    from ..collect.usable import no_usable_gpu

    return no_usable_gpu(snap)


def sample_once(
    feed: Sources,
    fast: bool,
    head: GpmHeadStart | None = None,
    host_head: HostHead | None = None,
) -> Snapshot:
    """One snapshot after the warm-up, holding every Xid event and error seen during it.

    What the Monitor's tick gives without the slow sources (`Monitor(feed, slow_sources=False)`
    returns the Sampler's snapshot as collected): two readings `WARMUP_S` apart (`fast`: one),
    taken by the paced loop. A stop signal after the first reading ends the warm-up with it.

    `host_head` (with `fast`): the host's first readings, taken as the command began
    (`collect/host_head.py`): the one reading comes at least `RATE_MIN_S` after them, and the
    host's CPU % and disk rates are averaged over that window.

    `head`: the GPM pair's first samples, taken before this was imported (`snapshot`). The
    second reading then comes NVML's minimum gap after them, and at least `RATE_MIN_S` after the
    first reading of the rest: the GPM wait overlaps the imports and the first reading instead of
    following them."""
    from dataclasses import replace

    from ..monitor.run import Done, Run, Stopped
    from ..monitor.sampler import Sampler

    sampler = Sampler(feed, interval=WARMUP_S, host_head=host_head)
    if head is not None:
        sampler.nvml.take_head(head)
    try:
        if fast:
            if host_head is not None:
                feed.clock.sleep(host_head.wait())
            return sampler.collect()
        snaps: list[Snapshot] = []
        if head is not None and head.last_at is not None:
            due = head.last_at + GPM_MIN_INTERVAL_S + HEAD_MARGIN_S

            def second(first: Snapshot) -> float:  # the wait after the first reading
                if any(g.gpm is not None for g in first.gpus):
                    # the imports outlasted NVML's gap: the first reading closed the head's pair
                    # and opened another, which the second needs whole
                    return max(0.0, first.timestamp + WARMUP_S - feed.clock.now())
                return max(RATE_MIN_S, due - feed.clock.now())

            def keep(snap: Snapshot) -> None:
                snaps.append(snap)
                if len(snaps) == 2:
                    raise Done

            paced = Run(sampler.collect, clock=feed.clock, interval=WARMUP_S, gap=second)
            ending = paced.subscribe(keep).run()
        else:
            paced = Run(sampler.collect, clock=feed.clock, interval=WARMUP_S, seconds=WARMUP_S)
            ending = paced.subscribe(snaps.append).run()
        if ending.signalled:  # stopped in the warm-up: no half-made answer, as any other run
            raise Stopped(ending)
    finally:
        sampler.close()
    xids, errors = [], {}
    for snap in snaps:
        xids.extend(snap.xid_events)
        for e in snap.errors:
            errors.setdefault((e.source, e.gpu_index, e.message), e)
    return replace(snaps[-1], xid_events=tuple(dict.fromkeys(xids)), errors=tuple(errors.values()))


def _n(v, fmt="{:.0f}", none="n/a") -> str:
    return none if v is None else fmt.format(v)


def _owner_label(snap: Snapshot, pid: int) -> str | None:
    info = snap.process(pid)
    return info.owner.label if info is not None and info.owner is not None else None


def _process_lines(snap: Snapshot) -> list[str]:
    """The GPU processes, with an OWNER column (its Slurm job, pod or container) where any of
    them runs for one."""
    procs = sorted(snap.gpu_processes, key=lambda p: (p.gpu_index, p.pid))
    owners = {gp.pid: _owner_label(snap, gp.pid) for gp in procs}
    width = max((len(o) for o in owners.values() if o), default=0)
    width = min(max(width, len("OWNER")), 28) if width else 0
    owner_head = f" {'OWNER':<{width}}" if width else ""
    lines = [f"{'PID':>8} {'USER':<10}{owner_head} {'GPU':>3} {'GPU MiB':>9} {'CPU%':>6}  COMMAND"]
    for gp in procs:
        info = snap.process(gp.pid)
        user = (info.user if info and info.user else "?")[:10]
        owner = f" {(owners[gp.pid] or '-')[:width]:<{width}}" if width else ""
        cpu = _n(info.cpu_pct if info else None)
        if info and info.cmdline:
            cmd = " ".join(info.cmdline)
        else:
            cmd = (info.name if info else None) or "(not readable)"
        mib = _n(None if gp.used_memory_bytes is None else gp.used_memory_bytes / 2**20)
        lines.append(
            f"{gp.pid:>8} {user:<10}{owner} {gp.gpu_index:>3} {mib:>9} {cpu:>6}  {cmd[:60]}"
        )
    return lines


def render_snapshot(snap: Snapshot) -> str:
    from ..model import formats
    from ..model.codec import iso_time

    gib = formats.gib
    s = snap.system
    lines = [
        f"{s.hostname}  driver {s.driver_version or 'n/a'}  max CUDA {s.driver_max_cuda or 'n/a'}"
        f"  NVML {s.nvml_version or 'n/a'}  {formats.count(len(snap.gpus), 'GPU')} "
        f" {iso_time(snap.timestamp)}"
    ]
    if snap.gpus:
        lines.append("")
        lines.append(
            f"{'GPU':>3}  {'Name':<24} {'Memory GiB':>15} {'Mem%':>5} {'Util':>5} {'MemCtl':>6}"
            f" {'Power W':>11} {'Temp':>5} {'SM MHz':>7}  Clock events"
        )
        for g in snap.gpus:
            name = (g.static.name or "?")[:24]
            if g.lost:
                lines.append(f"{g.index:>3}  {name:<24} LOST: the GPU stopped answering (Xid 79?)")
                continue
            mem = f"{gib(g.mem_used_bytes)}/{gib(g.mem_total_bytes)}"
            pw = f"{_n(g.power_w)}/{_n(g.static.power_limit_w)}"
            reasons = ", ".join(r for r in g.clock_event_reasons if r != "gpu_idle") or "-"
            lines.append(
                f"{g.index:>3}  {name:<24} {mem:>15} {_n(g.mem_used_pct):>4}% "
                f"{_n(g.util_gpu_pct, '{:.0f}%'):>5} {_n(g.util_mem_pct, '{:.0f}%'):>6} {pw:>11} "
                f"{_n(g.temperature_c, '{:.0f}C'):>5} {_n(g.sm_clock_mhz):>7}  {reasons}"
            )
            for m in g.mig_instances:
                lines.append(
                    f"{'':>3}  MIG {m.mig_index}: {(m.name or '?')[-28:]:<28}"
                    f" {gib(m.memory_used_bytes)}/{gib(m.memory_total_bytes)} GiB"
                )
    if snap.gpu_processes:
        lines += ["", *_process_lines(snap)]
    for x in snap.xid_events:
        lines.append(f"Xid {x.xid} on GPU {x.gpu_index if x.gpu_index is not None else '?'}")
    h = snap.host
    if h is not None:
        load = " ".join(f"{v:.2f}" for v in h.load_avg) if h.load_avg else "n/a"
        io = h.pressure.get("io")
        lines += [
            "",
            f"host: CPU {h.cpu_pct:.0f}% of {h.cpu_count} cores"
            f"  iowait {_n(h.iowait_pct, '{:.1f}')}%"
            f"  load {load}  memory {gib(h.mem_used_bytes)}/{gib(h.mem_total_bytes)} GiB"
            f"  swap {gib(h.swap_used_bytes)}/{gib(h.swap_total_bytes)} GiB"
            + (f"  io pressure {io.some_avg10:.1f}%" if io else ""),
        ]
    for e in snap.errors:
        where = f" (GPU {e.gpu_index})" if e.gpu_index is not None else ""
        lines.append(f"! {e.source}{where}: {e.message}")
        lines.append(f"  next: {e.next_step}")
    return "\n".join(lines)
