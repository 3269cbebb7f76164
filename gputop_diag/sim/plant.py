"""Identifiers planted in the simulated machine, to try the sanitizer against what a real machine
prints (tests/test_sanitize_planted.py): the host's name, the shell's environment, the accounts
in /etc/passwd, each process's owner, name (comm), command line or rewritten title, environment
and working directory, each GPU's UUID, serial and bus id as NVML gives them, kernel-log lines,
Slurm's jobs (names, users, partitions, accounts, nodes), the health checks' inputs (the job's
environment variables, the data mount its workers wait on), the interpreter's answer to
`driver --probe-python`, and what a probe inside the job's ranks writes (the sync call sites'
files, lines and calls; its notes) in a scenario with a probe.

A plant is a JSON document (`Plant.to_json`); `build()` applies one named by
$GPUTOP_DIAG_SIM_PLANT (a file), so whole commands run on a planted machine as on any other.
Everything planted goes through the simulator's own interfaces: the code under test is the
real code.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from ..sources import CommandResult, Sources

PLANT_ENV = "GPUTOP_DIAG_SIM_PLANT"


@dataclass
class PlantedProcess:
    index: int  # which of the machine's processes (in pid order)
    user: str | None = None
    name: str | None = None  # /proc/PID/comm (first 15 characters kept, as the kernel does)
    cmdline: list[str] | None = None
    environ: dict[str, str] | None = None  # added to the process's environment
    cwd: str | None = None
    threads: list[str] | None = None  # thread names, in order


@dataclass
class PlantedGpu:
    index: int
    uuid: str | None = None  # "GPU-…"
    serial: str | None = None
    bus: list[int] | None = None  # [domain, bus, device]


@dataclass
class Plant:
    hostname: str | None = None
    user: str | None = None  # who runs the tool
    environ: dict[str, str] = field(default_factory=dict)  # added to the shell's
    passwd: str | None = None  # /etc/passwd
    processes: list[PlantedProcess] = field(default_factory=list)
    gpus: list[PlantedGpu] = field(default_factory=list)
    kernel_lines: list[str] = field(default_factory=list)  # logged at the scenario's start
    slurm: list[dict[str, Any]] = field(default_factory=list)  # jobs, as scenarios give them
    probe: dict[str, Any] | None = None  # {returncode, stdout, stderr} of the python probe
    # The in-job probe's records (scenarios with `probe`): [site, call, share of the sync time]
    # per call site, and notes written after its hello.
    probe_sites: list[list[Any]] = field(default_factory=list)
    probe_notes: list[str] = field(default_factory=list)
    # The health checks' inputs (sim/health_procs.py): variables added to the environment of
    # the job's ranks and workers, and the data mount its workers wait on in D state
    # [mount point, file system type, source such as "server:/export"].
    health_env: dict[str, str] = field(default_factory=dict)
    health_mount: list[str] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> Plant:
        doc = dict(doc)
        doc["processes"] = [PlantedProcess(**p) for p in doc.get("processes", [])]
        doc["gpus"] = [PlantedGpu(**g) for g in doc.get("gpus", [])]
        return cls(**doc)


def load(path: str) -> Plant:
    with open(path, encoding="utf-8") as f:
        return Plant.from_json(json.load(f))


class _PlantedProcFS:
    """/etc/passwd and the kernel's host name, over the simulated /proc."""

    def __init__(self, inner: Any, files: dict[str, str]) -> None:
        self._inner = inner
        self._files = files

    def read_text(self, path: str) -> str:
        if path in self._files:
            return self._files[path]
        return self._inner.read_text(path)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _PlantedProcess:
    def __init__(self, inner: Any, cwd: str | None) -> None:
        self._inner = inner
        self._cwd = cwd

    def cwd(self) -> str:
        return self._cwd if self._cwd is not None else self._inner.cwd()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _PlantedPsutil:
    """The simulated psutil with each planted process's working directory."""

    def __init__(self, inner: Any, cwds: dict[int, str]) -> None:
        self._inner = inner
        self._cwds = cwds

    def Process(self, pid: int | None = None) -> Any:  # noqa: N802 - psutil's name
        return _PlantedProcess(self._inner.Process(pid), self._cwds.get(pid))

    def process_iter(self, attrs=None, ad_value=None):
        for p in self._inner.process_iter(attrs, ad_value):
            yield _PlantedProcess(p, self._cwds.get(p.pid))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _plant_probe(m: Any, plant: Plant) -> None:
    """The planted call sites and notes in every rank's probe file, as the probe writes them."""
    if plant.probe_sites and m.spec.get("probe") is not None:
        sites = tuple(tuple(s) for s in plant.probe_sites)
        m.spec = {**m.spec, "probe": {**m.spec["probe"], "sites": sites}}
    if plant.probe_notes:
        head = m._probe_head

        def planted_head(p: Any, w: dict, world: int) -> list[dict]:
            records = head(p, w, world)
            t = records[0]["t"]
            return [*records, *(dict(kind="note", t=t, text=n) for n in plant.probe_notes)]

        m._probe_head = planted_head


def _plant_health(m: Any, plant: Plant) -> None:
    """The planted variables in the job's environments, the planted data mount in mountinfo."""
    jobs = getattr(getattr(m, "health", None), "jobs", None)
    if jobs is None:
        return
    if plant.health_env:
        for p in m.procs.values():
            if p.role in ("rank", "worker"):
                p.environ = {**p.environ, **plant.health_env}
    if plant.health_mount:
        d_state = {**jobs.cfg.get("d_state", {}), "mount": tuple(plant.health_mount)}
        jobs.cfg = {**jobs.cfg, "d_state": d_state}


def apply(sources: Sources, plant: Plant) -> Sources:
    """`sources` (a simulated machine) with `plant` in it."""
    m = sources.sim
    if plant.user:
        m.user = plant.user
    procs = [m.procs[pid] for pid in sorted(m.procs)]
    cwds: dict[int, str] = {}
    for pp in plant.processes:
        if not procs:
            break
        p = procs[pp.index % len(procs)]
        if pp.user is not None:
            p.user = pp.user
        if pp.name is not None:
            p.name = pp.name
        if pp.cmdline is not None:
            p.cmdline = tuple(pp.cmdline)
        if pp.environ:
            p.environ = {**p.environ, **pp.environ}
        if pp.cwd is not None:
            cwds[p.pid] = pp.cwd
        for th, name in zip(p.threads, pp.threads or (), strict=False):
            th.name = name
    for pg in plant.gpus:
        if pg.index >= len(m.gpus):
            continue
        g = m.gpus[pg.index]
        g.uuid = pg.uuid or g.uuid
        g.serial = pg.serial or g.serial
        g.bus = tuple(pg.bus) if pg.bus else g.bus
    if plant.kernel_lines:
        m._extra_lines += [(m.clock.start + 1.0 + k, t) for k, t in enumerate(plant.kernel_lines)]
    m.kernel_lines = m._kernel_lines()  # the GPUs' bus ids are in the driver's lines
    if plant.slurm:
        m.slurm = [*m.slurm, *plant.slurm]
    if plant.probe is not None:
        m.probe_answer = CommandResult(
            plant.probe.get("returncode", 0),
            plant.probe.get("stdout", ""),
            plant.probe.get("stderr", ""),
        )
    _plant_probe(m, plant)
    _plant_health(m, plant)
    files = {}
    if plant.passwd is not None:
        files["/etc/passwd"] = plant.passwd
    if plant.hostname:
        files["/proc/sys/kernel/hostname"] = plant.hostname + "\n"
        sources.hostname = lambda: plant.hostname
        sources.run_command._host = plant.hostname
        sources.run_command._slurm._host = plant.hostname
    sources.procfs = _PlantedProcFS(sources.procfs, files)
    sources.psutil = _PlantedPsutil(sources.psutil, cwds)
    sources.environ.update(plant.environ)
    return sources
