"""The one Monitor: the tick every view runs — sample, attach the slow sources, classify.

Each tick samples the machine (the Sampler), attaches the latest answer of the slow sources
(Slurm's queue and the kernel log, asked every `SLOW_SOURCES_EVERY_S`, not every tick) to the
snapshot *before* it enters the history, classifies the last `WINDOW_S` seconds with the previous
verdict for hysteresis, and returns a frozen `Tick`. One read of the kernel log
(`KernelLogWatch`: the journal, else dmesg, else kern.log) gives both the OOM kills and the Xid
lines: an Xid NVML did not already report joins the snapshot's `xid_events` (source
"kernel-log"), so the alerts, the Xid pane and a recording see it; a kernel log nobody may read
is an error on the snapshot with the way to get access. `xid_triage` is the Xid triage
(`xid.triage`) of everything seen, joined with the sampled history, and of the kernel
log before the run once `xid_history()` has read it (in the background: the Xid pane asks).
The probe files of the processes a tick tracks (the GPU processes and the watched job's, read
each tick by `collect/probe.py`) ride in `Snapshot.probes`: figures measured inside the job,
which the classifier prefers to those it infers from outside.
The live view, the headless commands and `record` all run this one loop, so they see the same
numbers and verdicts; and because the evidence rides inside each snapshot, a replayed recording
(`Monitor(None)` fed the recorded snapshots) reaches the same diagnosis.

The Monitor is the one owner of a run's state: the history, the interval, whether the view is
paused, the run's Xid events (`MAX_XID_EVENTS`, newest kept). Every `Tick` it returns is frozen;
`tick(series=True)` also cuts the histories the live view draws (`monitor/series.py`) under the
same lock, so no reader ever iterates the history while a tick appends to it.

No Textual here: each Tick becomes what the live view shows in `monitor/view.py` (`Feeder`).
"""

from __future__ import annotations

import dataclasses
import subprocess
import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..collect.cuda_libs import ChainMemo, read_chain
from ..collect.kernlog.files import TUI_BUDGET
from ..collect.kernlog.scan import XidScan, scan
from ..collect.kernlog.watch import KernelLogWatch
from ..collect.probe import ProbeReader
from ..collect.slurm import SQUEUE_TIMEOUT_S, collect_scheduler_evidence
from ..diagnose.classify import classify, with_plan
from ..diagnose.features import SLURM_TIMEOUT
from ..diagnose.history import HISTORY_S, WINDOW_S, History
from ..diagnose.types import Diagnosis
from ..health import with_findings
from ..model import (
    CollectorError,
    DriverChain,
    JobState,
    OomKill,
    SchedulerEvidence,
    Snapshot,
    XidEvent,
)
from ..sources import Sources
from ..xid.types import XidTriage, gpu_refs
from .health import HealthWatch
from .run import Done, Ending, Run, StopSignals
from .sampler import Sampler
from .series import Series, SeriesCutter
from .share import shared
from .slow import SlowRead
from .xid_live import HISTORY_SINCE_S, kernel_xid_events, live_triage, unreadable_error

if TYPE_CHECKING:  # the planner and recordings load only where used
    from ..collect.job import JobWatch
    from ..planner.configs import ReadConfig
    from ..recording.store import Recording
    from ..xid.events import KernelEvent

# squeue is a round trip to the controller and journalctl reads the journal: every 10 s.
SLOW_SOURCES_EVERY_S = 10.0
# A Slurm controller that let `squeue` run into its timeout (out of reach) is asked again after
# this, not every SLOW_SOURCES_EVERY_S: each ask held a process for the whole timeout (5 s).
SQUEUE_RETRY_S = 60.0
MAX_XID_EVENTS = 500  # the Xid events of this run the triage keeps (the newest)


WINDOW_WAIT_S = 5.0  # how long `window()` waits for a tick in flight before it gives up


class TickStuck(RuntimeError):
    """A tick did not end in time: the history cannot be read between two ticks."""


@dataclass(frozen=True, slots=True)
class Tick:
    """What one tick produced."""

    snapshot: Snapshot  # with the slow-source evidence attached
    diagnosis: Diagnosis  # of the last WINDOW_S seconds, hysteresis applied
    count: int  # ticks so far, this one included
    xid_events: tuple[XidEvent, ...] = ()  # this run's, newest first (MAX_XID_EVENTS at most)
    xid_triage: XidTriage | None = None  # the triage of them (and of the log before the run)
    xid_scan: XidScan | None = None  # the kernel log before the run, once read
    series: Series | None = None  # the histories the live view draws (`tick(series=True)`)


class Monitor:
    """Sampler + slow sources + classifier, one tick at a time (thread-safe: one tick runs
    at a time, so a collector thread restarted by the live view never races the last one).

    `Monitor(sources)` samples `sources` on `tick()`; `feed(snapshot)` takes a snapshot made
    elsewhere and attaches the slow sources itself unless the snapshot carries them.
    `Monitor(None)` replays: it only takes `feed()`, queries nothing and uses the evidence
    recorded in each snapshot. `tick_s` is for snapshots coarser than one a second (a node read
    back from Prometheus' scrapes): the window judged and the history kept stretch with it, and
    the classifier is told the tick. `live`: a view draws each tick, so even the first waits
    for no slow command (the health checks' first PCI scan comes in a tick later); without it
    the first tick's health report is whole. `plan`: the model the job trains or serves
    (`--model-config`), whose memory plan a capacity verdict's checks give (`with_plan`), as
    `diagnose --model-config` does. A live view on a wall clock asks the slow sources in a
    thread of their own (`monitor/slow.py`): `squeue` against a controller that does not answer
    holds its 5 s timeout, and no tick, the first included, waits for it; each tick attaches
    the latest answers, and the kernel log's new Xid lines join the first tick after their read.
    `threaded_slow`: so does a headless run that ticks on (`watch --no-tui`, the exporter),
    whose status lines and scrapes must not stop for a hung `squeue`, after its first read,
    which its first tick holds as every headless command's does (default: `live`).
    """

    def __init__(
        self,
        sources: Sources | None,
        *,
        interval: float = 1.0,
        slow_sources: bool = True,
        history_s: float = HISTORY_S,
        job: JobWatch | None = None,
        tick_s: float = 1.0,
        live: bool = False,
        plan: ReadConfig | None = None,
        threaded_slow: bool | None = None,
    ) -> None:
        self.tick_s = tick_s
        self.plan = plan
        history_s *= tick_s
        self.sources = sources
        self.slow_sources = slow_sources and self.sources is not None
        self._sampler: Sampler | None = None
        self.interval = interval  # seconds between two ticks (the live view's + and - set it)
        self.paused = False  # the live view's space: no tick until resumed (r still ticks)
        self.history = History(window_s=history_s)  # the one history of this run
        self.diagnosis: Diagnosis | None = None
        self.last: Tick | None = None
        self.ticks = 0
        self.interrupted = False  # set by `run_for()` when a stop signal ended it early
        self.ending: Ending | None = None  # how `run_for()` ended
        self._lock = threading.Lock()
        self._series = SeriesCutter()  # the live view's histories, carried tick to tick
        self._slow_at: float | None = None
        self._jobs: tuple[SchedulerEvidence, ...] | None = None
        self._squeue_timed_out_at: float | None = None  # when squeue last ran out of time
        self._chain: DriverChain | None = None
        self._chain_memo = ChainMemo()  # each process's maps: when new, then once a minute
        self._ooms: tuple[OomKill, ...] | None = None
        self._slow_errors: dict[str, CollectorError] = {}
        self._klog = KernelLogWatch(self.sources) if self.slow_sources else None
        # a live view on a wall clock: the slow sources in their own thread (class docstring)
        realtime = getattr(getattr(sources, "clock", None), "realtime", False)
        threaded = live if threaded_slow is None else threaded_slow
        self._live = live  # the first read in the thread too (else in the first tick)
        self._slow_read = SlowRead() if self.slow_sources and threaded and realtime else None
        self._slow_fresh = False  # this tick brings the slow sources' new answers
        self._klog_found: tuple = ()  # the kernel log's health findings, last computed
        # node and job health, every HEALTH_EVERY_S (its static parts every 5 min)
        self._health = HealthWatch(self.sources, wait_first=not live) if self.slow_sources else None
        self._klog_seen: deque[tuple] = deque(maxlen=4 * MAX_XID_EVENTS)
        # the kernel log's Xid lines of this run, for the triage (`live_triage`); replaced whole
        # by the slow read, so a tick reads one tuple or the next
        self._klog_lines: tuple[KernelEvent, ...] = ()
        # every Xid event of this run (the newest MAX_XID_EVENTS), with the tick that brought it
        self._xids: deque[tuple[int, XidEvent]] = deque(maxlen=MAX_XID_EVENTS)
        self._xids_newest_first: tuple[XidEvent, ...] = ()
        self._on_xid_history: Callable[[], None] | None = None
        self.xid_triage: XidTriage | None = None  # frozen; replaced when something changes
        self._history_scan: XidScan | None = None
        self._history_thread: threading.Thread | None = None
        # The watched job (`gputop-diag watch`): read each tick into `Snapshot.job`; a Slurm
        # job's record is the scheduler evidence, asked with the slow sources.
        self.job = job
        # What the probes inside the tracked processes measured: read each tick.
        environ = _probe_environ(sources) if sources is not None else None
        self._probes = ProbeReader(environ, sources.procfs) if environ is not None else None

    @property
    def replaying(self) -> bool:
        return self.sources is None

    @property
    def sampler(self) -> Sampler:
        """The Sampler, made on first use (a monitor that is only fed never opens NVML)."""
        if self._sampler is None:
            if self.sources is None:
                raise RuntimeError("a replaying Monitor does not sample; use feed()")
            self._sampler = Sampler(self.sources)  # collects only: the history is ours
        return self._sampler

    @property
    def xid_events(self) -> tuple[XidEvent, ...]:
        """This run's Xid events, newest first (a later tick's first; within a tick, by time)."""
        return self._xids_newest_first

    @property
    def xid_scan(self) -> XidScan | None:
        """The kernel log before the run, once `xid_history()` has read it."""
        return self._history_scan

    # -- one tick ------------------------------------------------------------------------------
    def tick(self, *, series: bool = False) -> Tick:
        """Sample now, attach the slow sources, append, classify (`series`: and cut the
        histories the live view draws)."""
        with self._lock:
            snap = self._attach(self.sampler.collect())
            if self.job is not None:
                snap = dataclasses.replace(snap, job=self._job_state(snap))
            if self._health is not None:  # a reader's failure is a finding, never a crash
                watched = snap.job.root_pids if snap.job is not None else ()
                read = lambda: self._health.poll(snap, watched)  # noqa: E731
                report = self.sampler.calling(read)
                if self._klog is not None:  # the kernel log's findings (xid/health.py) beside
                    report = with_findings(report, self._klog_findings(snap.timestamp))
                snap = dataclasses.replace(snap, health=report)
            return self._add(self._with_probes(snap), series)

    def _job_state(self, snap: Snapshot):
        try:
            return self.job.sample(snap)
        except Exception as e:  # noqa: BLE001 - a failing read of the job must not stop ticks
            return JobState(
                target=self.job.target,
                label=self.job.label,
                problem=f"reading the job failed: {type(e).__name__}: {e}",
            )

    def _with_probes(self, snap: Snapshot) -> Snapshot:
        """The probe files of the processes this tick tracks: the GPU processes and the watched
        job's (`collect/probe.py`); what was refused is an error on the snapshot."""
        if self._probes is None:
            return snap
        pids = {p.pid for p in snap.gpu_processes}
        if snap.job is not None:
            pids |= {p.pid for p in snap.job.processes} | set(snap.job.root_pids)
        try:
            read = self._probes.read(pids)
        except Exception as e:  # noqa: BLE001 - a failing read of the probes must not stop ticks
            error = CollectorError(
                source="probe",
                message=f"reading the probe files failed: {type(e).__name__}: {e}",
                next_step="the outside figures go on; report this with `gputop-diag report`",
            )
            return dataclasses.replace(snap, probes=(), errors=snap.errors + (error,))
        return dataclasses.replace(snap, probes=read.states, errors=snap.errors + read.errors)

    def feed(self, snap: Snapshot, *, series: bool = False) -> Tick:
        """Take a snapshot made elsewhere (a recording, a test): attach the slow sources unless
        it carries them (or this monitor replays), append, classify."""
        with self._lock:
            if snap.slow_sources_at is None:
                snap = self._attach(snap)
            return self._add(snap, series)

    def window(self, wait_s: float = WINDOW_WAIT_S) -> tuple[list[Snapshot], Diagnosis | None]:
        """The snapshots held (oldest first) and the diagnosis of the last one, read between
        two ticks. TickStuck when a tick has not ended within `wait_s` (an NVML call that does
        not return)."""
        if not self._lock.acquire(timeout=wait_s):
            raise TickStuck(
                f"a tick has been waiting for the driver for over {wait_s:g} s (a GPU that "
                "stopped answering?); try again once the view updates"
            )
        try:
            return list(self.history.snapshots()), self.diagnosis
        finally:
            self._lock.release()

    def _attach(self, snap: Snapshot) -> Snapshot:
        self._slow_fresh = False
        if not self.slow_sources:
            return snap
        if self._slow_read is not None and (self._live or self._slow_at is not None):
            return self._attach_read(snap)
        at = self._slow_at
        if at is None or not 0 <= snap.timestamp - at < SLOW_SOURCES_EVERY_S:
            self._slow_at = snap.timestamp
            self._slow_fresh = True
            kernel_xids = self._read_slow(snap, self._run_xids())
            if kernel_xids:
                snap = dataclasses.replace(snap, xid_events=snap.xid_events + kernel_xids)
            if self._slow_read is not None:  # the ticks after it carry it until a read ends
                self._slow_read.seed(self._published(snap, ())[1])
        return dataclasses.replace(
            snap,
            scheduler_jobs=self._jobs,
            kernel_ooms=self._ooms,
            driver_chain=self._chain,
            slow_sources_at=self._slow_at,
            errors=snap.errors + tuple(self._slow_errors.values()),
        )

    def _read_slow(self, snap: Snapshot, run_xids: tuple[XidEvent, ...]) -> tuple[XidEvent, ...]:
        """Ask Slurm, read the driver chain and the kernel log: their answers replace the last
        ones; the kernel log's Xid lines that are new are returned."""
        if self.job is not None and self.job.slurm_id is not None:
            # the watched job, whoever's it is
            self._jobs = self._ask("slurm", self.job.scheduler_evidence, self._jobs)
        else:
            self._ask_squeue(snap.timestamp)
        self._chain = self._driver_chain()
        return self._kernel_log(snap, run_xids)

    def _ask_squeue(self, now: float) -> None:
        """This user's Slurm jobs; a controller that let the last `squeue` time out is asked
        again only `SQUEUE_RETRY_S` later (its last answer stands until then)."""
        at = self._squeue_timed_out_at
        if at is not None and 0 <= now - at < SQUEUE_RETRY_S:
            return
        timed_out = []

        def run(argv, timeout):
            try:
                return self.sources.run_command(argv, timeout)
            except subprocess.TimeoutExpired:
                timed_out.append(argv[0])
                raise

        sources = dataclasses.replace(self.sources, run_command=run)
        query = lambda: collect_scheduler_evidence(sources)  # noqa: E731
        self._jobs = self._ask("slurm", query, self._jobs)
        self._squeue_timed_out_at = now if timed_out else None
        if timed_out:  # not "no job queued": no answer (the last one stands, if any)
            self._slow_errors["slurm"] = CollectorError(
                source="slurm",
                message=f"squeue did not answer within {SQUEUE_TIMEOUT_S:g} s: the Slurm "
                "controller is out of reach",
                next_step="check `scontrol ping`; Slurm is asked again in a minute",
                code=SLURM_TIMEOUT,
            )

    def _attach_read(self, snap: Snapshot) -> Snapshot:
        """The live view's ticks: start a read of the slow sources in its thread when one is
        due and none runs; attach the answers of the last read that ended."""
        read = self._slow_read
        at = self._slow_at
        due = at is None or not 0 <= snap.timestamp - at < SLOW_SOURCES_EVERY_S
        if due and not read.running:
            self._slow_at = snap.timestamp
            run_xids = self._run_xids()  # taken here: the ticks append to them
            read.start(lambda: self._published(snap, self._read_slow(snap, run_xids)))
        answers = read.take()
        if answers is None:  # no read has ended yet
            return snap
        kernel_xids, self._slow_fresh, fields = answers
        if kernel_xids:
            snap = dataclasses.replace(snap, xid_events=snap.xid_events + kernel_xids)
        fields["errors"] = snap.errors + fields["errors"]
        return dataclasses.replace(snap, **fields)

    def _published(self, snap: Snapshot, kernel_xids: tuple[XidEvent, ...]) -> tuple:
        """What a read in the thread hands the ticks: the new Xid events, and the fields every
        later snapshot carries until the next read ends."""
        fields = {
            "scheduler_jobs": self._jobs,
            "kernel_ooms": self._ooms,
            "driver_chain": self._chain,
            "slow_sources_at": snap.timestamp,
            "errors": tuple(self._slow_errors.values()),
        }
        return kernel_xids, fields

    def _klog_findings(self, now: float) -> tuple:
        """The kernel log's health findings; while a read of it runs in its thread, the last
        ones computed (the log's messages are that read's to change)."""
        read = self._slow_read
        if read is not None and read.running:
            return self._klog_found
        self._klog_found = self._klog.health_findings(now)
        return self._klog_found

    def _driver_chain(self) -> DriverChain | None:
        """The kernel module, the NVML library on disk and the CUDA runtimes every readable
        process loaded (a runtime too new for the driver never reaches a GPU: only its maps
        show it), with each mapped libtorch_cuda.so's GPU architectures (read once per file
        version: `ChainMemo.archs`)."""
        try:
            chain = read_chain(self.sources, memo=self._chain_memo, archs=True).chain()
        except Exception as e:  # noqa: BLE001 - a failing slow source must not stop ticks
            self._slow_errors["driver-chain"] = CollectorError(
                source="driver-chain",
                message=f"reading the driver chain failed: {type(e).__name__}: {e}",
                next_step="`gputop-diag driver` shows each layer it can read",
            )
            return self._chain
        self._slow_errors.pop("driver-chain", None)
        return chain

    def _kernel_log(self, snap: Snapshot, run_xids: tuple[XidEvent, ...]) -> tuple[XidEvent, ...]:
        """Read the last window of the kernel log once: its OOM kills become `self._ooms`, its
        Xid lines that are new (not NVML's, nor this run's `run_xids`) are returned for this
        snapshot."""
        try:
            parsed = self._klog.poll(snap.timestamp - WINDOW_S, gpu_refs(snap))
            new, lines = kernel_xid_events(parsed.events, snap, run_xids, self._klog_seen)
        except Exception as e:  # noqa: BLE001 - a failing slow source must not stop ticks
            self._slow_errors["kernel-log"] = CollectorError(
                source="kernel-log",
                message=f"the kernel-log query failed: {type(e).__name__}: {e}",
                next_step="the diagnosis goes on with the last answer; "
                "report this with `gputop-diag report`",
            )
            self._ooms = self._ooms if self._ooms is not None else ()
            return ()
        if self._klog.readable:
            self._slow_errors.pop("kernel-log", None)
        else:
            self._slow_errors["kernel-log"] = unreadable_error(self._klog.reports)
        self._ooms = tuple(parsed.ooms)
        if lines:
            self._klog_lines = (self._klog_lines + lines)[-MAX_XID_EVENTS:]
        return new

    def _ask(self, source: str, query: Callable[[], list], before: tuple | None) -> tuple:
        """A slow source's answer; on a failure the last answer stands and the snapshot says so
        (the collectors return [] for the failures they expect; this guards the rest)."""
        try:
            answer = tuple(query())
        except Exception as e:  # noqa: BLE001 - a failing slow source must not stop ticks
            self._slow_errors[source] = CollectorError(
                source=source,
                message=f"the {source} query failed: {type(e).__name__}: {e}",
                next_step="the diagnosis goes on with the last answer; "
                "report this with `gputop-diag report`",
            )
            return before if before is not None else ()
        self._slow_errors.pop(source, None)
        return answer

    def _add(self, snap: Snapshot, series: bool = False) -> Tick:
        last = self.history.latest  # what repeats from the last tick is held once
        if last is not None:
            snap = shared(snap, last)
        self.history.append(snap)
        window = self.history.snapshots(WINDOW_S * self.tick_s)
        self.diagnosis = classify(window, self.diagnosis, tick_s=self.tick_s)
        if self.plan is not None:  # the plan of the job's model in capacity's checks
            self.diagnosis = with_plan(self.diagnosis, window, self.plan, tick_s=self.tick_s)
        self.ticks += 1
        if snap.xid_events:
            self._xids.extend((self.ticks, x) for x in snap.xid_events)
            self._xids_newest_first = tuple(
                x
                for _, x in sorted(
                    self._xids, key=lambda tx: (tx[0], tx[1].timestamp), reverse=True
                )
            )
        fresh = self._slow_fresh or snap.slow_sources_at == snap.timestamp
        self._slow_fresh = False
        if snap.xid_events or fresh or self.xid_triage is None:
            self.xid_triage = live_triage(
                self._history_scan,
                self._run_xids(),
                self.history.snapshots(),
                snap,
                self._klog_lines,
            )
        self.last = Tick(
            snap,
            self.diagnosis,
            self.ticks,
            self._xids_newest_first,
            self.xid_triage,
            self._history_scan,
            self._series.cut(self.history, self.diagnosis, WINDOW_S) if series else None,
        )
        return self.last

    def _run_xids(self) -> tuple[XidEvent, ...]:
        return tuple(x for _, x in self._xids)

    # -- the kernel log before this run -------------------------------------------------------
    def xid_history(
        self, wait: float | None = None, on_read: Callable[[], None] | None = None
    ) -> XidScan | None:
        """The kernel log's driver events of the last `HISTORY_SINCE_S` (before and during this
        run), read once in a background thread started by the first call; None until it is
        done (`wait`: seconds to wait for it), and always None when replaying. `on_read` is
        called (in that thread) once the read is done and the triage holds it."""
        if self.sources is None:
            return None
        with self._lock:
            if on_read is not None:
                self._on_xid_history = on_read
            if self._history_thread is None:
                since = self.sources.clock.now() - HISTORY_SINCE_S
                self._history_thread = threading.Thread(
                    target=self._read_history, args=(since,), name="xid-history", daemon=True
                )
                self._history_thread.start()
        if wait is not None:
            self._history_thread.join(wait)
        return self._history_scan

    def _read_history(self, since: float) -> None:
        try:
            found = scan(self.sources, since=since, budget=TUI_BUDGET)
        except Exception as e:  # noqa: BLE001 - said in the pane, never a dead thread
            found = XidScan((), (), (), since, self.sources.clock.now(), 0.0, failure=str(e))
        self._history_scan = found
        with self._lock:  # the next tick would; a paused view should not wait for one
            last = self.history.latest
            if last is not None:
                self.xid_triage = live_triage(
                    found, self._run_xids(), self.history.snapshots(), last, self._klog_lines
                )
            on_read = self._on_xid_history
        if on_read is not None:
            on_read()

    # -- headless loops ------------------------------------------------------------------------
    def run_for(
        self, seconds: float | None, on_tick: Callable[[Tick], None] | None = None
    ) -> Tick | None:
        """Tick now and every `interval` for `seconds` (None: until stopped) through the one
        paced loop (`monitor/run.py`); instant under the simulator. At least two ticks: the
        rates need two readings."""
        paced = Run(self.tick, clock=self.sources.clock, interval=self.interval, seconds=seconds)
        paced.at_least = 2
        if on_tick is not None:
            paced.subscribe(on_tick)
        self.ending = paced.run()
        self.interrupted = self.ending.early
        return self.last

    def replay(
        self,
        snapshots: Iterable[Snapshot],
        seconds: float | None = None,
        on_tick: Callable[[Tick], None] | None = None,
    ) -> Tick | None:
        """Feed recorded snapshots, the first `seconds` of them (None: all). Not paced: a
        recording is read as fast as it can be; a stop signal ends it after the snapshot in
        hand, as it ends a paced run."""
        start = None
        reason = "done"
        with StopSignals() as signals:
            try:
                for snap in snapshots:
                    if start is None:
                        start = snap.timestamp
                    if seconds is not None and snap.timestamp - start > seconds + 1e-6:
                        break
                    t = self.feed(snap)
                    if on_tick is not None:
                        on_tick(t)
                    signals.came_back()
                    if signals.name is not None:
                        break
            except KeyboardInterrupt:
                signals.name = signals.name or "SIGINT"
            except Done:
                pass
            reason = signals.name or reason
        self.ending = Ending(reason, self.ticks)
        self.interrupted = self.ending.early
        return self.last

    def close(self) -> None:
        if self._sampler is not None:
            self._sampler.close()


def _probe_environ(sources: Sources) -> dict[str, str] | None:
    """The environment that names the probe directory ($XDG_RUNTIME_DIR). A simulated machine
    keeps its probe files in a runtime directory of its own: the real one is never read under
    the simulator, whose /proc would call every real process dead (None: no probe files)."""
    if not sources.simulated or "XDG_RUNTIME_DIR" in sources.environ:
        return sources.environ
    runtime = getattr(sources.sim, "runtime_dir", None)
    return None if runtime is None else {**sources.environ, "XDG_RUNTIME_DIR": runtime}


def run(
    feed: Sources | Recording,
    *,
    interval: float,
    seconds: float | None,
    on_tick: Callable[[Tick], None] | None = None,
    slow_sources: bool = True,
    job: JobWatch | None = None,
) -> Monitor:
    """The headless commands' loop: sample `feed` for `seconds` (a `Recording`: replay its
    first `seconds`). A stop signal or a closed output ends it early with what was seen
    (`interrupted`, and how in `ending`); before the first tick a Ctrl-C propagates. An
    `on_tick` raising `StopSampling` ends it after that tick. The Monitor's `last` is the final
    tick (None: a recording without snapshots)."""
    if not isinstance(feed, Sources):  # a Recording
        monitor = Monitor(None)
        monitor.replay(feed.snapshots(), seconds, on_tick)
    else:
        monitor = Monitor(feed, interval=interval, slow_sources=slow_sources, job=job)
        try:
            monitor.run_for(seconds, on_tick)
        finally:
            monitor.close()
    if monitor.last is None and monitor.ending is not None and monitor.ending.signalled:
        raise KeyboardInterrupt
    return monitor


StopSampling = Done  # raised by an `on_tick` callback: nothing more to learn
