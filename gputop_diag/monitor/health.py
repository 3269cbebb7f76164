"""The health checks as a slow source of the Monitor (docs/health.md): `HealthWatch.poll(snap,
watched)` returns the latest health report, read again at most every `HEALTH_EVERY_S` of the
feed's clock, so that a tick never pays for a whole read.

What each pass reads, and how often:
- every pass (`HEALTH_EVERY_S`): the state of the GPU and watched processes and their trees
  (D state, and for those in it wchan, mounts, open files), NVML's persistence, GSP, PCIe link
  and fabric state, the GPUs' link and AER files, InfiniBand ports and the module list;
- once per process: its environment, kept by (pid, start time) and dropped when the process
  ends (a pid reused by another process is read again);
- at the start and then every `STATIC_EVERY_S`: the node's static parts, the PCI scan (vendor
  and class of every device, the bridges above the GPUs, `lspci -vvv` for ACS) and, on
  NVSwitch systems, `systemctl is-active nvidia-fabricmanager` and `nv-fabricmanager --version`.
  On a wall clock the refreshes run in a thread of their own, so that no tick waits for a slow
  or hung command (their timeouts are 10 s and 5 s), and so does the first scan for a live view
  (`wait_first=False`): until it is in, its checks are left out (never judged over empty facts),
  and the pass after it ends takes it in at once. A one-shot command's first pass reads it
  where it is due, so its first report is whole. On a clock that jumps (headless commands over
  the simulator, whose ticks take no time) every read runs where it is due.

A reader that raises becomes a finding ("health check failed: ...") and the part's last good
facts stand; nothing here stops a tick. The report returned is the recorded form
(`model.health.recorded`: the findings and when they were read), what a Snapshot carries.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import Any

from ..collect.health.fabric import read_fabric_manager, read_interconnect
from ..collect.health.nvml import read_nvml
from ..collect.health.pci import read_pci, reread_links
from ..collect.health.procs import EnvCache, read_processes
from ..health import judge
from ..model import Snapshot
from ..model.health import (
    SEVERITIES,
    FabricManagerFacts,
    Finding,
    HealthEvidence,
    HealthFacts,
    HealthReport,
    InterconnectFacts,
    NvmlFacts,
    PciFacts,
    ProcessFacts,
    recorded,
)
from ..sources import Sources

HEALTH_EVERY_S = 30.0  # a pass: processes, NVML, links, ports
STATIC_EVERY_S = 300.0  # the PCI scan, lspci and the fabric manager's service and version

# The checks each part's facts feed (the `check` of their findings): a part that failed before
# it was ever read has no facts, and its checks' verdicts over empty facts would mislead.
PART_CHECKS: dict[str, tuple[str, ...]] = {
    "processes": ("environment", "processes"),
    "pci": ("gpu_count", "pcie_link", "pcie_aer", "pcie_acs", "fabric_manager"),
    "nvml": ("gpu_count", "pcie_link", "persistence", "gsp_firmware", "fabric_manager"),
    "interconnect": ("infiniband",),
    "fabric_manager": ("fabric_manager",),
}
_EMPTY: dict[str, Any] = {
    "processes": ProcessFacts(),
    "pci": PciFacts(),
    "nvml": NvmlFacts(),
    "interconnect": InterconnectFacts(),
    "fabric_manager": FabricManagerFacts(),
}


class HealthWatch:
    """The health checks, read at most every `every_s` of `feed`'s clock (module docstring)."""

    def __init__(
        self,
        feed: Sources,
        *,
        with_acs: bool = True,
        every_s: float = HEALTH_EVERY_S,
        static_every_s: float = STATIC_EVERY_S,
        wait_first: bool = True,
    ) -> None:
        self.feed = feed
        self.with_acs = with_acs
        self.every_s = every_s
        self.static_every_s = static_every_s
        self.report: HealthReport | None = None  # the latest, in its recorded form
        self.facts: HealthFacts | None = None  # what the latest pass judged
        self.read_at: float | None = None  # feed clock of the latest pass
        self.static_at: float | None = None  # ... and of the latest static read
        self.passes = 0
        self.static_reads = 0
        self.last_pass_s: float | None = None  # wall seconds the latest pass took
        self._envs: EnvCache = {}
        self._good: dict[str, Any] = {}  # part -> its last facts read without an exception
        # the static read: in a thread on a wall clock (module docstring)
        self.background = bool(getattr(feed.clock, "realtime", False))
        self.wait_first = wait_first  # the first scan read where it is due (a one-shot report)
        self._static_lock = threading.Lock()
        self._static_thread: threading.Thread | None = None
        self._static_done: list[tuple[str, Any, BaseException | None]] | None = None

    def due(self, now: float | None = None) -> bool:
        """A pass is due: the first, one `every_s` after the last, or a static read has ended."""
        now = self.feed.clock.now() if now is None else now
        with self._static_lock:
            if self._static_done is not None:
                return True
        return self.read_at is None or not 0 <= now - self.read_at < self.every_s

    def static_pending(self) -> bool:
        """A static read is running in its thread."""
        t = self._static_thread
        return t is not None and t.is_alive()

    def join_static(self, timeout: float | None = None) -> bool:
        """Wait at most `timeout` for a static read in its thread: True when none runs. (At
        exit none is waited for: the thread is a daemon, and the command it may be waiting on
        has its own timeout.)"""
        t = self._static_thread
        if t is not None:
            t.join(timeout)
        return not self.static_pending()

    def poll(self, snap: Snapshot, watched: Iterable[int] = ()) -> HealthReport:
        """The latest report: read now when a pass is due, else the one read last."""
        now = self.feed.clock.now()
        if self.report is not None and not self.due(now):
            return self.report
        started = time.perf_counter()
        self.report = self._pass(snap, tuple(watched), now, started)
        self.read_at = now
        self.passes += 1
        self.last_pass_s = time.perf_counter() - started
        return self.report

    # -- one pass --------------------------------------------------------------------------------
    def _pass(self, snap: Snapshot, watched: tuple[int, ...], now: float, started: float):
        failed: list[tuple[str, BaseException]] = []
        static = self.static_at is None or not 0 <= now - self.static_at < self.static_every_s
        feed = self.feed
        gpu_pids: dict[int, tuple[int, ...]] = {}
        for p in snap.gpu_processes:
            gpu_pids[p.pid] = tuple(sorted({*gpu_pids.get(p.pid, ()), p.gpu_index}))

        def part(name: str, read: Callable[[], Any]) -> Any:
            try:
                facts = read()
            except Exception as e:  # noqa: BLE001 - a failing check must never stop a tick
                failed.append((name, e))
                return self._good.get(name, _EMPTY[name])
            self._good[name] = facts
            return facts

        procs = part(
            "processes",
            lambda: read_processes(feed.procfs, gpu_pids, watched, now, env_cache=self._envs),
        )
        # a static read that ended since the last pass: taken in, and none started again now
        ended = self._take_static(failed)
        # due, or never read whole yet (a failed scan is tried again at the next pass)
        static = static or "pci" not in self._good or "fabric_manager" not in self._good
        if static and ended is None and not self.static_pending():
            self.static_at = now
            self.static_reads += 1
            if self.background and not (self.wait_first and self.static_reads == 1):
                self._static_thread = threading.Thread(
                    target=self._static_read, name="health-static", daemon=True
                )
                self._static_thread.start()
            else:
                self._static_read()
                ended = self._take_static(failed)
        fresh = ended or set()
        if "pci" in fresh:
            pci = self._good["pci"]
        elif "pci" in self._good:  # between scans: the links' speeds and AER counters again
            pci = part("pci", lambda: reread_links(feed.procfs, self._good["pci"]))
        else:
            pci = _EMPTY["pci"]
        # A part never read whole (its scan still running, or failed and said so when its
        # failure came in) leaves its checks out, never judged over empty facts.
        pending = {name for name in ("pci", "fabric_manager") if name not in self._good}
        fm = self._good.get("fabric_manager", _EMPTY["fabric_manager"])
        # the sampler holds NVML open for the Monitor's whole run
        nvml = part("nvml", lambda: read_nvml(feed.nvml, snap, opened=True))
        inter = part("interconnect", lambda: read_interconnect(feed.procfs))
        facts = HealthFacts(
            timestamp=now,
            hostname=snap.system.hostname,
            processes=procs,
            pci=pci,
            nvml=nvml,
            interconnect=inter,
            fabric_manager=fm,
        )
        try:
            findings = judge(facts).findings
        except Exception as e:  # noqa: BLE001 - a judgement bug is said, not raised
            failed.append(("judgement", e))
            findings = ()
        unread = {
            c
            for name in {*(n for n, _ in failed), *pending}
            if name not in self._good
            for c in PART_CHECKS.get(name, ())
        }
        if unread:
            findings = tuple(f for f in findings if f.check not in unread)
        facts = replace(facts, read_s=time.perf_counter() - started)
        self.facts = facts
        order = {s: k for k, s in enumerate(SEVERITIES)}
        ranked = sorted((*map(_failure, failed), *findings), key=lambda f: order[f.severity])
        return recorded(HealthReport(tuple(ranked), facts))

    def _take_static(self, failed: list[tuple[str, BaseException]]) -> set[str] | None:
        """The parts of the static read that ended since the last pass, taken in (their
        failures added to `failed`); None when none ended."""
        with self._static_lock:
            done, self._static_done = self._static_done, None
        if done is None:
            return None
        fresh: set[str] = set()
        for name, facts, error in done:
            if error is not None:
                failed.append((name, error))
            else:
                self._good[name] = facts
                fresh.add(name)
        return fresh

    def _static_read(self) -> None:
        """The node's static parts (module docstring): the PCI scan, then the fabric manager
        over the NVSwitches it found; each part's facts or exception, taken by the next pass."""
        feed = self.feed
        out: list[tuple[str, Any, BaseException | None]] = []
        try:
            pci = read_pci(feed.procfs, feed.run_command, self.with_acs)
            out.append(("pci", pci, None))
        except Exception as e:  # noqa: BLE001 - a failing check must never stop a tick
            out.append(("pci", None, e))
            pci = self._good.get("pci", _EMPTY["pci"])
        try:
            fm = read_fabric_manager(feed.procfs, feed.run_command, pci.nvswitches)
            out.append(("fabric_manager", fm, None))
        except Exception as e:  # noqa: BLE001
            out.append(("fabric_manager", None, e))
        with self._static_lock:
            self._static_done = out


def _failure(failed: tuple[str, BaseException]) -> Finding:
    name, e = failed
    return Finding(
        "health.check_failed",
        "info",
        f"health check failed: {name}: {type(e).__name__}: {e}",
        (HealthEvidence(f"{type(e).__name__}: {e}", f"the {name} read"),),
        "gputop-diag health  # reads every check once; report this with `gputop-diag report`",
        (),
        name,
    )
