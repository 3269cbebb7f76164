"""The probe of one process: its step boundaries, its records, its file, its fork and exit.

A process earns a file when it steps (or, started by hand, at once): under `watch --probe` every
Python process loads the probe, and the launcher, the helpers and the DataLoader workers never
step, so they write nothing. The "hello" is written just before the first other record, when
the job has imported torch and set up its ranks. The step whose start the probe did not see
(the first boundary, unless a DataLoader was asked for data before it) has no record.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
import threading
import time
import weakref
from collections import deque
from types import ModuleType
from typing import Any

from . import gpu, sizes
from .accounts import Accounts, top_sites
from .imports import after_import
from .install import TorchHooks, describe
from .sample import StepSampler, sample_every_s
from .schema import SCHEMA, probe_dir, start_ticks_of
from .stacks import Stacks
from .writer import ProbeFile

SITES_EVERY_S = 2.0  # "sync_sites" at most this often (and at exit)
MODEL_EVERY_S = 30.0  # the "model" record is recomputed this often; written when it changes
# A "progress" record (schema.py) once the current step is this old, then at most this often:
# a rank blocked in a collective, or stuck, says where it is while it takes no step.
PROGRESS_AFTER_S = 2.0
PROGRESS_EVERY_S = 2.0


def _r(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds, 6)


def _own_start_ticks() -> int:
    try:
        with open("/proc/self/stat") as f:
            return start_ticks_of(f.read()) or 0
    except OSError:
        return 0


class Probe:
    def __init__(self, by_hand: bool, environ: dict[str, str] | None = None) -> None:
        self.directory = probe_dir(environ)
        self.acc = Accounts(threading.get_ident(), (os.path.dirname(__file__) + os.sep,))
        self.earned = by_hand  # may write a file before its first step
        self.disabled = False
        self.torch: ModuleType | None = None
        self.hooks: Any = None  # install.TorchHooks once torch is imported
        self.watcher: Any = None
        self.file: ProbeFile | None = None
        self.hello_record: dict | None = None
        self.held_notes: list[dict] = []
        self.noted: set[str] = set()
        self.stacks = Stacks()
        self.sampler: StepSampler | None = None  # once torch is imported (sample.py)
        self._reset_steps()

    def _reset_steps(self) -> None:
        self.n = 0
        self.manual = False
        self.primary: weakref.ref | None = None
        self.late: deque = deque()  # (step figures, start event, end event) waiting for t_gpu
        self.last_event: Any = None
        self.syncs_total = 0
        self.sites_written_at: float | None = None
        self.sites_written_total = 0
        self.model_at: float | None = None
        self.model_last: dict | None = None
        self.boundary_at: float | None = None  # perf_counter of the newest boundary
        self.progress_at: float | None = None

    # -- life -----------------------------------------------------------------------------------

    def install(self) -> None:
        self.watcher = after_import("torch", self._on_torch)
        atexit.register(self.at_exit)

    def _on_torch(self, torch: ModuleType) -> None:
        self.torch = torch
        hooks = TorchHooks(torch, self.acc, self._on_optimizer_step, self.note)
        self.acc.internal = hooks.internal_paths()
        hooks.install()
        self.hooks = hooks
        self.sampler = StepSampler(torch, self.acc, self.note, sample_every_s())

    def uninstall(self) -> None:
        """Tests and the benchmark: every hook out, the file finished."""
        self.at_exit()
        atexit.unregister(self.at_exit)
        if self.sampler is not None:
            self.sampler.stop()
        if self.watcher is not None:
            self.watcher.remove()
        if self.hooks is not None:
            self.hooks.uninstall()

    def after_fork_in_child(self) -> None:
        """A forked child (a DataLoader worker, a forked rank) is a new process: it must not write
        into its parent's file, and writes its own only if it steps itself."""
        if self.file is not None:
            self.file.abandon_after_fork()
            self.file = None
        self.hello_record = None
        self.held_notes = []
        self.earned = False
        self.stacks.abandon_after_fork()
        if self.sampler is not None:
            self.sampler.stop(restart=True)
        self.acc.owner = threading.get_ident()
        self.acc.begin(None)
        self.acc.sites.clear()
        self.acc.issued.clear()
        self._reset_steps()

    def at_exit(self) -> None:
        try:
            if self.disabled:
                return
            self._drain_late(force=True)
            if not self.earned:
                return
            self._write_sites(time.perf_counter(), force=True)
            uncaught = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
            if uncaught is None:  # "bye" means a normal exit (schema.py)
                self.emit({"kind": "bye", "t": time.time()})
            elif self.file is not None or self.n:  # "exit": the error it died of
                self.emit({"kind": "exit", "t": time.time(), "error": _exit_text(uncaught)})
            else:  # a job started by hand that died before its first step still says hello
                self._open_file(time.time())
        except Exception:
            pass
        finally:
            if self.file is not None:
                self.file.close()

    # -- step boundaries ------------------------------------------------------------------------

    def _on_optimizer_step(self, optimizer: Any) -> None:
        now = time.perf_counter()
        primary = self.primary() if self.primary is not None else None
        if primary is None:  # the first optimizer to step marks the steps; others are ignored
            self.primary = weakref.ref(optimizer)
        elif primary is not optimizer:
            return
        if not self.manual:
            self.boundary(now, optimizer)

    def manual_step(self) -> None:
        now = time.perf_counter()
        self.manual = True  # probe.step() marks the steps from now on, not the optimizer
        optimizer = self.primary() if self.primary is not None else None
        self.boundary(now, optimizer)

    def boundary(self, now: float, optimizer: Any) -> None:
        """The step path: the figures go out as a tuple; the background thread makes the record
        (a step's cache-cold Python costs tens of microseconds per dict and JSON line)."""
        if self.disabled:
            return
        acc = self.acc
        if acc.owner != threading.get_ident():
            acc.owner = threading.get_ident()  # the thread that steps is the one measured
        self.n += 1
        self.boundary_at = now
        if not self.earned and not self._earn():
            return
        sampler = self.sampler
        sampled = sampler is not None and sampler.active is not None
        sample = sampler.end(self.n, now) if sampled else None
        step = None
        if acc.open_t is not None:
            acc.close_buckets()
            step = (
                self.n,
                time.time(),
                now - acc.open_t,
                acc.t_input,
                acc.t_sync,
                acc.n_sync,
                acc.t_comm,
                acc.t_comm_exposed,
                self._measures(),
                acc.coll_entered,
                sampled,  # run under the sampler's dispatch mode: slower than the others
                None,  # t_gpu, once its events are done
                None,  # the allocator's figures
            )
        self.syncs_total += acc.n_sync
        acc.begin(now)
        if len(acc.issued) > 256:  # async collectives never waited for
            acc.issued.clear()
        if gpu.cuda_in_use(self.torch) or self.late:
            self._gpu_boundary(step)
        elif step is not None:
            self.emit(step)
        if sample is not None:
            self.emit(sample)
        if optimizer is not None:
            self._maybe_model(optimizer, now)
        self._write_sites(now, force=False)
        if sampler is not None and sampler.due(self.n, now) and not gpu.capturing_any(self.torch):
            sampler.begin(self.n, time.perf_counter())

    def _earn(self) -> bool:
        """A process that steps writes a file, unless it is a DataLoader worker."""
        if _in_dataloader_worker():
            self.disabled = True
            self.acc.depth = 1  # every hook passes straight through from here on
            return False
        self.earned = True
        return True

    def _measures(self) -> tuple[bool, bool, bool]:
        """Whether t_input, t_sync, t_comm are measured now."""
        parts = self.hooks.parts if self.hooks is not None else {}
        return (
            bool(parts.get("t_input")),
            bool(parts.get("t_sync")),
            bool(parts.get("t_comm")) and not self.acc.ddp and not self._device_comm(),
        )

    def _device_comm(self) -> bool:
        if self.acc.device_comm:
            self.note(
                "probe: t_comm is not measured: the collectives run on the GPU (NCCL) and "
                "return once queued; their time shows where the host next waits for the GPU"
            )
        return self.acc.device_comm

    def _gpu_boundary(self, step: tuple | None) -> None:
        event = mem = None
        cuda = gpu.cuda_in_use(self.torch)
        if cuda and gpu.capturing(self.torch):  # inside the job's CUDA graph capture: no
            if step is not None:  # event recorded or queried, nothing drained until it ends
                self.late.append((step[:-1] + (None,), None, None))
            self.last_event = None
            return
        if cuda:
            try:
                event = gpu.mark(self.torch)
                mem = gpu.memory(self.torch) if step is not None else None
            except Exception as exc:
                self.note(f"probe: CUDA events or memory statistics failed ({describe(exc)})")
        if step is not None:
            self.late.append((step[:-1] + (mem,), self.last_event, event))
        self.last_event = event
        self._drain_late(force=False)

    def _drain_late(self, force: bool) -> None:
        while self.late:
            step, start, end = self.late[0]
            seconds = None
            if start is not None and end is not None:
                try:
                    seconds = gpu.elapsed_s(start, end)
                except Exception:
                    start = end = None
                if seconds is None and end is not None and not force:
                    if len(self.late) <= gpu.MAX_LATE_STEPS:
                        return
            self.late.popleft()
            self.emit(step if seconds is None else step[:-2] + (seconds, step[-1]))

    def _maybe_model(self, optimizer: Any, now: float) -> None:
        if self.model_at is not None and now - self.model_at < MODEL_EVERY_S:
            return
        self.model_at = now
        try:
            figures = sizes.model_bytes(optimizer, self.torch.is_tensor)
        except Exception as exc:
            self.note(f"probe: model sizes failed ({type(exc).__name__})")
            return
        if figures != self.model_last:
            self.model_last = figures
            self.emit({"kind": "model", "t": time.time(), **figures})

    def _write_sites(self, now: float, force: bool) -> None:
        total = self.syncs_total + self.acc.n_sync
        if not self.acc.sites or total == self.sites_written_total:
            return
        if not force and self.sites_written_at is not None:
            if now - self.sites_written_at < SITES_EVERY_S:
                return
        self.sites_written_at = now
        self.sites_written_total = total
        sites = top_sites(self.acc.sites, os.getcwd())
        self.emit({"kind": "sync_sites", "t": time.time(), "sites": sites})

    # -- records --------------------------------------------------------------------------------

    def note(self, text: str) -> None:
        if text in self.noted:
            return
        self.noted.add(text)
        record = {"kind": "note", "t": time.time(), "text": text}
        if self.earned:
            self.emit(record)
        else:
            self.held_notes.append(record)

    def emit(self, record: dict | tuple) -> None:
        if self.disabled or not self.earned:
            return
        if self.file is None and not self._open_file(_t_of(record)):
            return
        self.file.write(record)

    def _open_file(self, t: float) -> bool:
        """The file, begun with the hello and the notes held so far (no I/O here: writer.py)."""
        if self.file is not None:
            return True
        if self.disabled or not self.earned or not self._earn():
            return False
        ticks = _own_start_ticks()
        self.stacks.register(self.directory, os.getpid(), ticks)
        self.file = ProbeFile(
            self.directory, os.getpid(), ticks, self._hello, render=step_record, idle=self.progress
        )
        hello = self._hello()
        hello["t"] = min(hello["t"], t)
        self.file.write(hello)
        for note in self.held_notes:
            self.file.write(note)
        self.held_notes = []
        return True

    def _hello(self) -> dict:
        if self.hello_record is None:
            self.hello_record = self._hello_fields()
        return {**self.hello_record, "t": time.time()}

    def _hello_fields(self) -> dict:
        torch = self.torch
        cuda = gpu.cuda_in_use(torch)
        has_input, has_sync, has_comm = self._measures()
        parts = {"t_input": has_input, "t_sync": has_sync, "t_comm": has_comm}
        rank, world = _rank_and_world(torch)
        return {
            "kind": "hello",
            "schema": SCHEMA,
            "pid": os.getpid(),
            "start_ticks": _own_start_ticks(),
            "argv": list(sys.argv),
            "python": ".".join(str(p) for p in sys.version_info[:3]),
            "torch": getattr(torch, "__version__", None) if torch is not None else None,
            "cuda": cuda,
            "rank": rank,
            "world": world,
            "local_rank": _int_env("LOCAL_RANK"),
            # the run all of a job's ranks share, on every node (torchrun's rendezvous id)
            "run_id": os.environ.get("TORCHELASTIC_RUN_ID") or None,
            "node": _node(),
            "cuda_device": gpu.current_device(torch) if cuda else None,
            "stack_signal": self.stacks.signal,
            # the GPU architectures torch was built for (sample.py reads the device's own)
            "arch_list": gpu.arch_list(torch),
            "torch_cuda": getattr(getattr(torch, "version", None), "cuda", None),
            # t_gpu: GPU busy time needs CUPTI or the profiler, not measured (schema.py)
            "measures": {**parts, "t_gpu": False, "memory": cuda},
        }

    def progress(self) -> None:
        """Run by the writer's thread every flush: once the current step is PROGRESS_AFTER_S
        old, a "progress" record says where the stepping thread is (in which collective, since
        when), so a rank that stopped, and the ranks that wait for it, can be told apart."""
        last = self.boundary_at
        now = time.perf_counter()
        if last is None or self.disabled or now - last < PROGRESS_AFTER_S:
            return
        if self.progress_at is not None and now - self.progress_at < PROGRESS_EVERY_S:
            return
        self.progress_at = now
        acc = self.acc
        entered, done, at = acc.coll_entered, acc.coll_done, acc.coll_at
        waiting = entered > done and at is not None
        self.emit(
            {
                "kind": "progress",
                "t": time.time(),
                "step": self.n,
                "stalled_s": _r(now - last),
                "entered": entered,
                "done": done,
                "op": acc.coll_op,
                "bytes": acc.coll_bytes,
                "in_s": _r(now - at) if waiting else None,
                "thread": acc.owner,
                "stack_signal": self.stacks.signal if self.stacks.still_ours() else None,
            }
        )


def _exit_text(exc: BaseException) -> str:
    """The error a rank died of, in a line: its type and first line, without the C++ source
    location torch's messages start with ("[../gloo/transport/tcp/pair.cc:537] "), cut at a
    word (the reader cuts it again for the surfaces)."""
    first = str(exc).splitlines()[0] if str(exc) else ""
    first = re.sub(r"\[[^\]\s]*\.(?:cc|cpp|c|h|hpp):\d+\]\s*", "", first)
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text if len(text) <= 400 else text[:400].rsplit(" ", 1)[0] + "…"


def _int_env(name: str) -> int | None:
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def _node() -> str | None:
    try:
        return os.uname().nodename or None
    except Exception:
        return None


def _t_of(record: dict | tuple) -> float:
    return record["t"] if isinstance(record, dict) else record[1]


def _in_dataloader_worker() -> bool:
    """Inside a DataLoader worker process (forked or spawned): `get_worker_info()` is set there
    (https://pytorch.org/docs/stable/data.html#torch.utils.data.get_worker_info)."""
    try:
        data = sys.modules.get("torch.utils.data")
        return data is not None and data.get_worker_info() is not None
    except Exception:
        return False


def step_record(step: tuple) -> dict:
    """The "step" record of a boundary's figures (schema.py); run by the writer's thread."""
    n, t, wall, t_input, t_sync, n_sync, t_comm, exposed, measures, coll, sampled, t_gpu, mem = step
    has_input, has_sync, has_comm = measures
    measured = [name for name, on in (("t_input", has_input), ("t_sync", has_sync)) if on]
    if has_comm:
        measured.append("t_comm")
    blocked = (t_input if has_input else 0.0) + (t_sync if has_sync else 0.0)
    blocked += exposed if has_comm else 0.0
    return {
        "kind": "step",
        "t": t,
        "step": n,
        "wall_s": _r(wall),
        "t_input_s": _r(t_input) if has_input else None,
        "t_sync_s": _r(t_sync) if has_sync else None,
        "sync_count": n_sync if has_sync else None,
        "t_comm_s": _r(t_comm) if has_comm else None,
        "t_comm_exposed_s": _r(exposed) if has_comm else None,
        "t_gpu_s": None,  # busy time: not measurable from step-boundary events
        "gpu_span_s": _r(t_gpu),  # the stream's span between the boundaries, gaps included
        "t_host_s": _r(max(wall - blocked, 0.0)),
        "measured": measured,
        "mem": mem,
        "coll_seq": coll,
        "sampled": sampled,
    }


def _rank_and_world(torch: ModuleType | None) -> tuple[int | None, int | None]:
    try:
        dist = torch.distributed if torch is not None else None
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    try:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except (KeyError, ValueError):
        return None, None
