"""What one tick hands the live view: the Monitor's frozen tick, as the screen shows it.

The Monitor (`monitor/core.py`) owns the run's state — history, interval, pause, the run's Xid
events — and each `tick(series=True)` returns a frozen `Tick` with the histories the panes draw
already cut under its lock. A `Feeder` turns that Tick into an `Update`, the view model every
pane draws from; the view reads nothing else of the machine:

- under `--sanitize` the snapshot, the diagnosis and the Xid events pass through the session's
  one `Sanitizer` (one key for the whole session: an identifier keeps its pseudonym from tick to
  tick), seeded first with the machine's names and the working directory of each new GPU
  process; every surface is sanitized here, once, and the panes draw what the Update carries.
  The Monitor's history keeps what was sampled (the `s` report sanitizes it again, under the
  same key);
- the model's config.json the command line of each GPU's job names (`collect/model_config.py`,
  read once per process, here in the sampling thread, never while the screen draws);
- the device mapping (`collect.mapping.collect_mapping`), worked out on the snapshot as sampled
  (a pseudonymised UUID is no prefix of anything), its free text as shown;
- why some processes' maps were refused (`collect.cuda_libs.unreadable_why`), for who runs this.

The collector thread, a replay and a Prometheus feed all go through a Feeder, so every tick
reaches the screen the same way. No Textual here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ..collect.cuda_libs import unreadable_why
from ..collect.kernlog.scan import XidScan
from ..collect.mapping import DeviceMapping, DeviceRow, collect_mapping
from ..collect.model_config import ConfigFinder, ModelConfig, ModelConfigError, read_config_file
from ..collect.procs import process_cwd
from ..diagnose.types import Diagnosis
from ..mapping.owners import shown_name
from ..model import Snapshot, XidEvent
from ..model.formats import size
from ..sources import Sources
from ..xid.types import XidTriage
from .core import Monitor, Tick
from .series import GpuSeries, Series

if TYPE_CHECKING:  # the sanitizer loads under --sanitize only, a job's watch with a job
    from ..collect.job import JobWatch as JobWatch  # the view's name for it
    from ..sanitize.sanitizer import Sanitizer

# The names the live view uses from the layers below, as the view model's vocabulary.
__all__ = [
    "DeviceMapping",
    "Feeder",
    "MappingView",
    "ModelConfig",
    "ModelConfigError",
    "Sources",
    "Update",
    "XidScan",
    "first_host",
    "process_memory",
    "read_model_config",
]


@dataclass(frozen=True)
class MappingView:
    """The Mapping pane's content. Under --sanitize (`sanitized`) the rows carry no UUID, bus
    id, minor number or device node, and every text is already the session's pseudonyms."""

    rows: tuple[DeviceRow, ...]
    cuda: Mapping[str, str]  # each row's CUDA ordinal in this shell: a number, "-" or "?"
    cvd: str  # this shell's CUDA_VISIBLE_DEVICES as shown ("(unset: all)", "(empty: none)")
    order: str  # this shell's CUDA_DEVICE_ORDER
    findings: tuple[tuple[str, str], ...]  # (severity, text as shown)
    conclusions: tuple[str, ...]  # as shown (the pane shows them under --sanitize)
    sanitized: bool = False
    failure: str | None = None  # why the mapping could not be worked out (nothing else is set)
    # who holds the GPUs: (owner as shown, its GPUs, the GPU memory its processes hold)
    owners: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True)
class Update:
    snapshot: Snapshot
    diagnosis: Diagnosis | None = None
    gpus: dict[int, GpuSeries] = field(default_factory=dict)
    host_cpu: tuple[float | None, ...] = ()
    host_iowait: tuple[float | None, ...] = ()
    xid_events: tuple[XidEvent, ...] = ()  # every event seen so far, newest first
    ticks: int = 0  # snapshots seen so far
    sampled: Snapshot | None = None  # under --sanitize: the snapshot as sampled (None: as shown)
    xid_triage: XidTriage | None = None  # the Monitor's triage (the Xid pane draws it)
    xid_scan: XidScan | None = None  # the kernel log before the run, once read
    replaying: bool = False  # a recording (or a Prometheus feed): no kernel log of its own
    job_window: tuple[Snapshot, ...] = ()  # the watched job's ticks, as sampled (the Job pane)
    # the config.json the command line of each GPU's job names (the GPU's index; None: the
    # job of the whole machine), only those found
    model_configs: Mapping[int | None, ModelConfig] = field(default_factory=dict)
    mapping: MappingView | None = None  # the Mapping pane's content
    maps_unreadable_why: str = ""  # why some processes' maps were refused (the Driver pane)


class Feeder:
    """The live view's side of a `Monitor`: each tick (sampled, or a snapshot fed in) becomes
    an `Update`, sanitized when the session is. `find_configs`: look for the model config the
    jobs' command lines name (off where the view was given one)."""

    def __init__(
        self, monitor: Monitor, sanitizer: Sanitizer | None = None, *, find_configs: bool = True
    ) -> None:
        self.monitor = monitor
        self.sanitizer = sanitizer  # --sanitize: what the screen shows is pseudonyms
        self._seeded_pids: set[int] = set()
        self._xids: tuple[tuple[XidEvent, ...], tuple[XidEvent, ...]] = ((), ())
        sources = monitor.sources
        self._finder = ConfigFinder(sources) if find_configs and sources is not None else None
        self._mapped: tuple[tuple, MappingView] | None = None  # what the last mapping read
        if sanitizer is not None and sources is not None:
            from ..collect.identity import read_machine_names  # loaded with --sanitize

            sanitizer.seed_machine(read_machine_names(sources))  # the machine's names, this shell

    def tick(self) -> Update:
        """Sample once through the Monitor; the update."""
        return self.update(self.monitor.tick(series=True))

    def add(self, snap: Snapshot) -> Update:
        """A snapshot made elsewhere (a replay, a Prometheus feed) through the Monitor."""
        return self.update(self.monitor.feed(snap, series=True))

    def update(self, t: Tick) -> Update:
        snap, diagnosis, xids = t.snapshot, t.diagnosis, t.xid_events
        if self.sanitizer is not None:
            snap, diagnosis = self._sanitized(snap, diagnosis)
            xids = self._sanitized_xids(xids)
        s = t.series or Series()
        sampled = t.snapshot if snap is not t.snapshot else None
        return Update(
            snap,
            diagnosis,
            s.gpus,
            s.host_cpu,
            s.host_iowait,
            xids,
            t.count,
            sampled,
            t.xid_triage,
            t.xid_scan,
            self.monitor.replaying,
            s.job_window,
            self._configs(t.snapshot),
            self._mapping(t.snapshot),
            _maps_unreadable_why(t.snapshot, self.monitor.sources),
        )

    def with_xid_history(self, u: Update) -> Update:
        """`u` with the Monitor's triage and kernel-log scan as they stand now (the read of
        the log before the run ended after `u`'s tick)."""
        return replace(u, xid_triage=self.monitor.xid_triage, xid_scan=self.monitor.xid_scan)

    # -- sanitizing --------------------------------------------------------------------------
    def _sanitized_xids(self, xids: tuple[XidEvent, ...]) -> tuple[XidEvent, ...]:
        raw, shown = self._xids
        if xids is not raw:  # sanitized again only when an event arrived
            shown = self.sanitizer.xid_events(xids) if xids else ()
            self._xids = (xids, shown)
        return shown

    def _sanitized(
        self, snap: Snapshot, diagnosis: Diagnosis | None
    ) -> tuple[Snapshot, Diagnosis | None]:
        """`snap` and `diagnosis` with every identifier replaced by the session's pseudonym
        (a health finding's text by the health rules, `sanitize/health.py`); the working
        directory of each new GPU process seeds its project's name first."""
        s = self.sanitizer
        sources = self.monitor.sources
        if sources is not None:
            for p in snap.gpu_processes:
                if p.pid in self._seeded_pids:
                    continue
                self._seeded_pids.add(p.pid)
                cwd = process_cwd(sources.psutil, p.pid)
                if cwd is not None:
                    s.seed_cwd(cwd)
        return s.model(snap), None if diagnosis is None else s.model(diagnosis)

    # -- what the panes need beyond the snapshot ---------------------------------------------
    def _configs(self, snap: Snapshot) -> dict[int | None, ModelConfig]:
        """The model config each GPU's job names on its command line (the job: the process
        holding most of the GPU's memory; read once per process)."""
        if self._finder is None or not snap.gpu_processes:
            return {}
        out: dict[int | None, ModelConfig] = {}
        for gpu in (None, *(g.index for g in snap.gpus)):
            proc = snap.job_process(gpu)
            info = snap.process(proc.pid) if proc is not None else None
            if info is None:
                continue
            config = self._finder.find(proc.pid, info.cmdline)
            if config is not None:
                out[gpu] = config
        return out

    def _mapping(self, snap: Snapshot) -> MappingView:
        """The Mapping pane's content: made again only when what it is made of changed (the
        GPUs' identities and MIG instances, the GPU processes and what was read of them, the
        host's name, this shell's environment); most ticks it is the last tick's."""
        sources = self.monitor.sources  # this shell's environment, as the sources hold it now
        environ = dict(sources.environ) if sources is not None else {}
        read = (
            tuple((g.index, g.static, g.lost, g.mig_instances) for g in snap.gpus),
            snap.gpu_processes,
            snap.processes,
            snap.system.hostname,
            environ,
        )
        if self._mapped is not None and self._mapped[0] == read:
            return self._mapped[1]
        try:
            m = collect_mapping(snap, None, environ)
        except Exception as e:  # noqa: BLE001 - said in the pane; the other panes go on
            return MappingView((), {}, "", "", (), (), failure=f"{type(e).__name__}: {e}")
        view = mapping_view(m, self.sanitizer)
        self._mapped = (read, view)
        return view


def mapping_view(m: DeviceMapping, sanitizer: Sanitizer | None = None) -> MappingView:
    """The Mapping pane's content of `m`; with `sanitizer` (--sanitize) the layout's
    identifiers dropped and its text through the sanitizer."""
    shell = m.shell
    cuda = {}
    for r in m.rows:
        cell = shell.cell(r.key)
        if r.mig_index is not None and (shell.mig_unknown or shell.cvd is None):
            cell = "?"  # CUDA's numbering of MIG devices depends on the CUDA version
        cuda[r.key] = cell
    cvd = "(unset: all)" if shell.cvd is None else shell.cvd or "(empty: none)"
    if sanitizer is None:
        findings = tuple((f.severity, f.text) for f in m.findings)
        owners = tuple((u.name, u.gpus_text(), size(u.memory_bytes)) for u in m.owners)
        return MappingView(m.rows, cuda, cvd, shell.order, findings, m.conclusions, owners=owners)
    s = sanitizer
    if shell.cvd:
        cvd = s.cuda_visible_devices(shell.cvd) or f"({len(shell.entries)} entries)"
    findings = tuple((f.severity, s.text(f.public_text or f.text) or "") for f in m.findings)
    conclusions = tuple(s.text(c) or "" for c in m.conclusions)
    rows = tuple(
        replace(r, uuid=None, bus=None, minor=None, info={}, numa_node=None, cpu_affinity=None)
        for r in m.rows
    )
    owners = tuple((shown_name(u, s.text), u.gpus_text(), size(u.memory_bytes)) for u in m.owners)
    return MappingView(
        rows, cuda, cvd, shell.order, findings, conclusions, sanitized=True, owners=owners
    )


def _maps_unreadable_why(snap: Snapshot, sources: Sources | None) -> str:
    chain = snap.driver_chain
    if chain is None or not chain.unreadable:
        return ""
    return unreadable_why(sources.euid() if sources is not None else None)


def first_host(sources: Sources | None, replay: Any, sanitizer: Sanitizer | None) -> str:
    """The host the header names before the first tick: the machine's, else the recording's
    (`replay`: a `Recording`, or what reads like one; under --sanitize, its pseudonym)."""
    try:
        name = sources.hostname() if sources is not None else None
    except Exception:  # noqa: BLE001 - a name we cannot read is shown as no name
        name = None
    if name is None and replay is not None:
        name = replay.header.hostname
    if sanitizer is not None:
        return sanitizer.hostname(name) if name else "host"
    return name or "host0"


def read_model_config(path: str) -> ModelConfig:
    """`--model-config PATH`: the model's config.json (ModelConfigError: why it cannot be
    used, in one line)."""
    return read_config_file(path)


def process_memory(monitor: Monitor, pid: int, seconds: float) -> list[float | None]:
    """The GPU memory `pid` held at each tick of the last `seconds` the Monitor keeps (its
    GPUs together; None for a tick that did not list it), oldest first."""
    out: list[float | None] = []
    for snap in monitor.history.snapshots(seconds):
        used = [p.used_memory_bytes for p in snap.gpu_processes if p.pid == pid]
        known = [b for b in used if b is not None]
        out.append(float(sum(known)) if known else None)
    return out
