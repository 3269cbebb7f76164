"""Probe files (`probe/schema.py`): what the probes inside the tracked processes measured.

The Monitor asks once a tick for the processes it tracks (the GPU processes and the watched job's
processes). Each is known by its pid and its start time (/proc/<pid>/stat field 22), and its file
is named by both, so a pid the kernel gave to a new process never matches the old one's file.
A file is followed like a log: the offset read so far is kept, a line still being written waits
for the next tick, a file the writer rotated (`<name>.1`) is read to its end before the new one,
and a line that is not a record (damaged, binary, of the wrong shape) is skipped and counted,
never a failure.

Nothing here trusts the directory. It must be ours and writable by nobody else; a file must be
a regular file we own, opened relative to the directory without following a symlink
(O_NOFOLLOW) and without blocking (a FIFO put there never hangs a tick), so another user can
neither feed us figures nor make us read their files. A dead process's file is removed (ours
only, once it has been still for `DEAD_GRACE_S`). No sockets, no server: files only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import json
import math
import os
import re
import stat
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from statistics import fmean, median, quantiles
from typing import Any

from ..model import (
    STEP_PARTS,
    CollectorError,
    ProbeMemory,
    ProbeProgress,
    ProbeSample,
    ProbeShape,
    ProbeState,
    ProbeSteps,
    ProbeTransfer,
    SyncSite,
)
from ..probe import schema as S

# A file is at most S.MAX_BYTES (the writer rotates it), so one read takes at most two of them.
# The newest READ_CHUNK bytes of a backlog are read whole; before them only the records that
# are not steps (hello, model, sync sites, notes), found without parsing every step line.
READ_CHUNK = 1024 * 1024
MAX_BACKLOG = 2 * S.MAX_BYTES
MAX_LINE = 64 * 1024  # a longer line is no record: skipped and counted
STEPS_KEPT = 256
# The ranks' medians (step, own work, wait, input, sync: diagnose/ranks.py compares them) are over
# a longer window than the split's means: the newest RANK_WINDOW_S, up to RANK_STEPS_KEPT steps,
# so that a few seconds of a busy host's noise in one rank never outvote the rest (a median moves
# only when more than half the window moves).
RANK_WINDOW_S = 30.0
RANK_MIN_STEPS = 40  # ...or the newest 40 steps where 30 s hold fewer (steps of a second or more)
RANK_STEPS_KEPT = 1000
# The steps aggregated: those of the last minute (the classifier's window), the newest 100 at
# most, so a fast loop and a slow one both give a recent figure.
STEP_WINDOW_S = 60.0
MAX_WINDOW_STEPS = 100
MAX_SITES = 8
MAX_NOTES = 5
TEXT_CHARS = 300  # of a note or a call site kept (a note's word cut in half is dropped)
DEAD_GRACE_S = 30.0  # a dead process's file is removed once it has not changed for this long
# A process that ended without a goodbye (killed, crashed) is still reported, as gone, this long
# after it was last seen: its ranks' table names it.
GONE_KEPT_S = 120.0
# The stack of a process whose current step has run this long (half the hang floor of
# diagnose/ranks.py, so that a hang is named with its stack), and STACK_AFTER_STEPS of its
# median steps, is asked for once per stall (probe/stacks.py): its Python stack, and those of
# the ranks waiting for it.
STACK_AFTER_S = 5.0
STACK_AFTER_STEPS = 5
MAX_STACK_LINES = 40
MAX_STACK_BYTES = 64 * 1024
_THREAD_LINE = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_STEP_LINE = re.compile(rb'"kind"\s*:\s*"step"')
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_PART_FIELDS = {
    "t_input": "t_input_s",
    "t_sync": "t_sync_s",
    "t_comm": "t_comm_s",
    "t_gpu": "t_gpu_s",
    "t_host": "t_host_s",
}
_STEP_FIELDS = (*_PART_FIELDS.values(), "t_comm_exposed_s", "sync_count")
_MEM_FIELDS = {
    "allocated": "allocated_bytes",
    "reserved": "reserved_bytes",
    "peak": "peak_bytes",
    "inactive_split": "inactive_split_bytes",
    "retries": "alloc_retries",
    "ooms": "ooms",
}
_MODEL_FIELDS = ("params_bytes", "grads_bytes", "optimizer_bytes", "kv_cache_bytes")
_NEXT_STEP = "the probe writes its files there itself (mode 0700); remove or fix what is there"


@dataclass(frozen=True, slots=True)
class ProbeRead:
    """One tick's read: the states of the tracked processes that have a probe file, and what
    was refused."""

    states: tuple[ProbeState, ...] = ()
    errors: tuple[CollectorError, ...] = ()


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _opt(v: Any, ok: Callable[[Any], bool]) -> bool:
    return v is None or ok(v)


def _seconds(v: Any) -> bool:
    return _num(v) and v >= 0


@dataclass(slots=True)
class _Step:
    step: int
    t: float
    wall_s: float
    values: dict[str, float | None]
    measured: frozenset[str]
    coll_seq: int | None = None


@dataclass
class _Records:
    """What one process's records said so far."""

    pid: int
    start_ticks: int
    hello: dict[str, Any] = field(default_factory=dict)
    steps: deque[_Step] = field(default_factory=lambda: deque(maxlen=STEPS_KEPT))
    # (t, wall, exposed communication or None, input or None, sync or None) of each step
    ranked: deque[tuple] = field(default_factory=lambda: deque(maxlen=RANK_STEPS_KEPT))
    memory: ProbeMemory | None = None
    model: dict[str, int | None] = field(default_factory=dict)
    sites: tuple[SyncSite, ...] = ()
    notes: list[str] = field(default_factory=list)
    updated: float | None = None
    ended: bool = False
    malformed: int = 0
    progress: ProbeProgress | None = None
    thread: int | None = None  # the stepping thread's ident, from its progress records
    stack_signal: int | None = None
    stack: str | None = None
    stack_at: float | None = None
    exit_error: str | None = None
    sample: ProbeSample | None = None
    _aggregated_key: tuple | None = None
    _aggregated_steps: ProbeSteps | None = None

    def take(self, rec: Any) -> bool:
        """Apply one record; False when it is not one (the caller counts it)."""
        if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str):
            return False
        t = rec.get("t")
        if not _num(t):
            return False
        take = _TAKE.get(rec["kind"])
        if take is None:  # a kind a later probe writes: not ours to judge
            return True
        if not take(self, rec, float(t)):
            return False
        self.updated = t if self.updated is None else max(self.updated, t)
        return True

    def _hello(self, rec: dict, t: float) -> bool:
        schema, measures = rec.get("schema"), rec.get("measures")
        if not isinstance(schema, str) or not schema.startswith("gputop-diag.probe/"):
            return False
        if rec.get("pid") != self.pid or rec.get("start_ticks") != self.start_ticks:
            return False  # a file that names another process than its name says
        if measures is not None and not (
            isinstance(measures, dict) and all(isinstance(v, bool) for v in measures.values())
        ):
            return False
        if schema != S.SCHEMA:
            self._note(f"written by a probe of another version ({schema}); this reads {S.SCHEMA}")
        self.hello = {
            "python": rec.get("python") if isinstance(rec.get("python"), str) else None,
            "torch": rec.get("torch") if isinstance(rec.get("torch"), str) else None,
            "cuda": rec.get("cuda") is True,
            "rank": rec.get("rank") if _count(rec.get("rank")) else None,
            "world": rec.get("world") if _count(rec.get("world")) else None,
            "local_rank": rec.get("local_rank") if _count(rec.get("local_rank")) else None,
            "node": _text(rec.get("node"), 253),
            "cuda_device": rec.get("cuda_device") if _count(rec.get("cuda_device")) else None,
            "run_id": _text(rec.get("run_id"), 128),
            "measures": tuple(k for k, v in (measures or {}).items() if v and k in _KNOWN),
            "arch_list": _arch_list(rec.get("arch_list")),
            "torch_cuda": _text(rec.get("torch_cuda"), 32),
        }
        self.stack_signal = _signal(rec.get("stack_signal"))
        return True

    def _step(self, rec: dict, t: float) -> bool:
        n, wall, measured, mem = rec.get("step"), rec.get("wall_s"), rec.get("measured"), None
        if not _count(n) or not _num(wall) or wall <= 0:
            return False
        if not all(_opt(rec.get(k), _seconds) for k in _STEP_FIELDS):
            return False
        if not isinstance(measured, list) or not all(isinstance(m, str) for m in measured):
            return False
        raw = rec.get("mem")
        if raw is not None:
            if not isinstance(raw, dict) or not all(_opt(raw.get(k), _count) for k in _MEM_FIELDS):
                return False
            mem = ProbeMemory(**{name: raw.get(k) for k, name in _MEM_FIELDS.items()})
        parts = {m.removesuffix("_s") for m in measured}
        if "t_comm_exposed" in parts:
            parts.add("t_comm")
        if rec.get("sampled") is True:  # slowed by the sampling: its memory only
            if mem is not None:
                self.memory = mem
            return True
        coll = rec.get("coll_seq")
        values = {k: (None if rec.get(k) is None else float(rec[k])) for k in _STEP_FIELDS}
        self.steps.append(
            _Step(n, t, float(wall), values, frozenset(parts), coll if _count(coll) else None)
        )
        exposed = values["t_comm_exposed_s"] if "t_comm" in parts else None
        self.ranked.append((t, float(wall), exposed, values["t_input_s"], values["t_sync_s"]))
        if mem is not None:
            self.memory = mem
        if self.progress is not None and n > self.progress.step:  # stepping again
            self.progress = self.stack = self.stack_at = None
        return True

    def _progress(self, rec: dict, t: float) -> bool:
        step, stalled = rec.get("step"), rec.get("stalled_s")
        entered, done, in_s = rec.get("entered"), rec.get("done"), rec.get("in_s")
        if not (_count(step) and _seconds(stalled) and _count(entered) and _count(done)):
            return False
        if not _opt(in_s, _seconds) or not _opt(rec.get("bytes"), _count):
            return False
        if self.steps and self.steps[-1].step > step:
            return True  # older than the newest step (a record written late)
        self.progress = ProbeProgress(
            at=t,
            step=step,
            stalled_s=float(stalled),
            entered=entered,
            done=done,
            op=_text(rec.get("op"), 80),
            nbytes=rec.get("bytes"),
            in_s=None if in_s is None else float(in_s),
        )
        thread = rec.get("thread")
        self.thread = thread if _count(thread) else None
        self.stack_signal = _signal(rec.get("stack_signal"))
        return True

    def _sync_sites(self, rec: dict, t: float) -> bool:
        sites = rec.get("sites")
        if not isinstance(sites, list):
            return False
        out = []
        for s in sites:
            if not (
                isinstance(s, dict)
                and isinstance(s.get("site"), str)
                and isinstance(s.get("call"), str)
                and _count(s.get("count"))
                and _seconds(s.get("seconds"))
            ):
                return False
            out.append(
                SyncSite(
                    s["site"][:TEXT_CHARS], s["call"][:TEXT_CHARS], s["count"], float(s["seconds"])
                )
            )
        out.sort(key=lambda s: s.seconds, reverse=True)
        self.sites = tuple(out[:MAX_SITES])
        return True

    def _model(self, rec: dict, t: float) -> bool:
        if not all(_opt(rec.get(k), _count) for k in _MODEL_FIELDS):
            return False
        self.model = {k: rec.get(k) for k in _MODEL_FIELDS}
        return True

    def _note(self, rec: dict | str, t: float | None = None) -> bool:
        text = rec.get("text") if isinstance(rec, dict) else rec
        if not isinstance(text, str):
            return False
        text = _cut_whole(" ".join(text.split()))
        if text and text not in self.notes:
            self.notes = [*self.notes, text][-MAX_NOTES:]
        return True

    def _sample(self, rec: dict, t: float) -> bool:
        sample = sample_of(rec, t)
        if sample is None:
            return False
        if self.sample is None or sample.step >= self.sample.step:
            self.sample = sample
        return True

    def _bye(self, rec: dict, t: float) -> bool:
        self.ended = True
        return True

    def _exit(self, rec: dict, t: float) -> bool:
        text = rec.get("error")
        text = _cut_whole(" ".join(text.split())) if isinstance(text, str) else ""
        self.exit_error = text or "an uncaught exception"
        return True

    def _aggregated(self) -> ProbeSteps | None:
        """`_aggregate` of the steps, again only once a step was added: a tick reads every
        probe, and most ticks bring none (medians over up to RANK_STEPS_KEPT steps)."""
        key = (len(self.steps), self.steps[-1].step if self.steps else None, len(self.ranked))
        if key != self._aggregated_key:
            self._aggregated_key = key
            self._aggregated_steps = _aggregate(self.steps, self.ranked)
        return self._aggregated_steps

    def state(self) -> ProbeState | None:
        """The process's state as of its records; None before any line."""
        if self.updated is None and not self.malformed:
            return None
        h = self.hello
        return ProbeState(
            pid=self.pid,
            start_ticks=self.start_ticks,
            python=h.get("python"),
            torch=h.get("torch"),
            cuda=h.get("cuda", False),
            rank=h.get("rank"),
            world=h.get("world"),
            local_rank=h.get("local_rank"),
            node=h.get("node"),
            cuda_device=h.get("cuda_device"),
            run_id=h.get("run_id"),
            can_measure=h.get("measures", ()),
            steps=self._aggregated(),
            memory=self.memory,
            params_bytes=self.model.get("params_bytes"),
            grads_bytes=self.model.get("grads_bytes"),
            optimizer_bytes=self.model.get("optimizer_bytes"),
            kv_cache_bytes=self.model.get("kv_cache_bytes"),
            sync_sites=self.sites,
            notes=tuple(self.notes),
            updated_at=self.updated,
            ended=self.ended,
            malformed_lines=self.malformed,
            progress=self.progress,
            stack_signal=self.stack_signal,
            stack=self.stack,
            stack_at=self.stack_at,
            exit_error=self.exit_error,
            sample=self.sample,
            arch_list=h.get("arch_list", ()),
            torch_cuda=h.get("torch_cuda"),
        )


def _cut_whole(text: str) -> str:
    """`text` cut to TEXT_CHARS without the word the cut falls in: every surface sanitizes the
    note after this, and an identifier cut in half (a token's first characters, a host name's
    first labels) matches no rule and no seed ("…" says something was left out)."""
    if len(text) <= TEXT_CHARS:
        return text
    kept = text[: TEXT_CHARS - 1]
    if not kept[-1].isspace() and not text[TEXT_CHARS - 1].isspace():  # inside a word
        kept = kept.rpartition(" ")[0]
    return kept.rstrip() + "…" if kept.strip() else ""


_KNOWN = frozenset((*STEP_PARTS, "memory"))
_TAKE: dict[str, Callable[[_Records, dict, float], bool]] = {
    "hello": _Records._hello,
    "step": _Records._step,
    "sync_sites": _Records._sync_sites,
    "model": _Records._model,
    "note": _Records._note,
    "bye": _Records._bye,
    "progress": _Records._progress,
    "exit": _Records._exit,
    "sample": _Records._sample,
}
MAX_SHAPES = 12
_ARCH = re.compile(r"(?:sm|compute)_\d{2,3}[af]?")


def _arch_list(v: Any) -> tuple[str, ...]:
    if not isinstance(v, list):
        return ()
    return tuple(a for a in v[:64] if isinstance(a, str) and _ARCH.fullmatch(a))


def _transfer(v: Any) -> ProbeTransfer | None:
    if not isinstance(v, dict):
        return None
    count, nbytes, seconds = v.get("count"), v.get("bytes"), v.get("seconds")
    pinned, nb = v.get("pinned_bytes", 0), v.get("non_blocking", 0)
    if not (_count(count) and _count(nbytes) and _seconds(seconds)):
        raise ValueError("transfer")
    if not (_count(pinned) and _count(nb)):
        raise ValueError("transfer")
    return ProbeTransfer(count, nbytes, float(seconds), pinned, nb)


def _shape(v: Any) -> ProbeShape:
    dims = v.get("dims") if isinstance(v, dict) else None
    if not isinstance(dims, dict) or not dims or not all(_count(n) for n in dims.values()):
        raise ValueError("shape")
    names = "".join(str(k)[:1] for k in dims)
    bad = v.get("misaligned")
    if not (isinstance(v.get("op"), str) and isinstance(v.get("dtype"), str)):
        raise ValueError("shape")
    if not (_count(v.get("count")) and _count(v.get("flops")) and isinstance(bad, list)):
        raise ValueError("shape")
    site = v.get("site")
    return ProbeShape(
        op=v["op"][:40],
        dtype=v["dtype"][:40],
        dims=tuple(dims.values()),
        dim_names=names,
        count=v["count"],
        flops=v["flops"],
        misaligned=tuple(str(b)[:1] for b in bad if str(b)[:1] in names),
        site=site[:TEXT_CHARS] if isinstance(site, str) and site else None,
    )


def sample_of(rec: dict, t: float) -> ProbeSample | None:
    """A "sample" record (probe/sample.py) as the model's ProbeSample; None when malformed."""
    step, wall = rec.get("step"), rec.get("wall_s")
    if not (_count(step) and _seconds(wall)):
        return None
    try:
        figures = {k: rec.get(k, 0) for k in ("flops", "matmul_flops", "misaligned_flops")}
        if not all(_count(v) for v in figures.values()):
            return None
        dtypes = rec.get("dtype_flops") or {}
        shapes = rec.get("shapes") or []
        transfers = rec.get("transfers") or {}
        batch = rec.get("batch") or {}
        if not all(isinstance(x, dict) for x in (dtypes, transfers, batch)):
            return None
        if not isinstance(shapes, list) or not all(_count(v) for v in dtypes.values()):
            return None
        samples, tokens, loss = batch.get("samples"), batch.get("tokens"), rec.get("loss")
        if not (_opt(samples, _count) and _opt(tokens, _count) and _opt(loss, _num)):
            return None
        cap = rec.get("capability")
        capability = None
        if isinstance(cap, list) and len(cap) == 2 and all(_count(c) for c in cap):
            capability = (cap[0], cap[1])
        autocast = rec.get("autocast") or {}
        scaler = rec.get("grad_scaler")
        return ProbeSample(
            step=step,
            at=t,
            wall_s=float(wall),
            dtype_flops=tuple(
                sorted(((str(k)[:40], v) for k, v in dtypes.items()), key=lambda kv: -kv[1])
            ),
            shapes=tuple(_shape(v) for v in shapes[:MAX_SHAPES]),
            h2d=_transfer(transfers.get("h2d")),
            d2h=_transfer(transfers.get("d2h")),
            samples=samples,
            tokens=tokens,
            batch_from=_text(batch.get("from"), 80),
            loss=None if loss is None else float(loss),
            backward=rec.get("backward") is True,
            grad_scaler=scaler if isinstance(scaler, bool) else None,
            autocast=tuple(
                (str(k)[:16], str(v)[:40]) for k, v in autocast.items() if isinstance(k, str)
            )
            if isinstance(autocast, dict)
            else (),
            matmul_precision=_text(rec.get("matmul_precision"), 16),
            allow_tf32=rec.get("allow_tf32") if isinstance(rec.get("allow_tf32"), bool) else None,
            capability=capability,
            device_name=_text(rec.get("device_name"), 96),
            **figures,
        )
    except (ValueError, TypeError, AttributeError):
        return None


def _text(v: Any, limit: int) -> str | None:
    return v[:limit] if isinstance(v, str) and v else None


def _signal(v: Any) -> int | None:
    return v if _count(v) and 0 < v < 65 else None


def _aggregate(steps: deque[_Step], ranked: deque[tuple]) -> ProbeSteps | None:
    """The mean of each part over the latest steps (a part is measured when every one of them
    measured it), and the medians the ranks are compared by, over the longer rank window."""
    if not steps:
        return None
    newest = steps[-1]
    window = [s for s in steps if s.t >= newest.t - STEP_WINDOW_S][-MAX_WINDOW_STEPS:]

    def mean(key: str) -> float | None:
        vals = [v for s in window if (v := s.values[key]) is not None]
        return fmean(vals) if vals else None

    measured = frozenset.intersection(*(s.measured for s in window))
    return ProbeSteps(
        steps=len(window),
        last_step=newest.step,
        last_at=newest.t,
        wall_s=fmean(s.wall_s for s in window),
        t_input_s=mean("t_input_s"),
        t_sync_s=mean("t_sync_s"),
        sync_count=mean("sync_count"),
        t_comm_s=mean("t_comm_s"),
        t_comm_exposed_s=mean("t_comm_exposed_s"),
        t_gpu_s=mean("t_gpu_s"),
        t_host_s=mean("t_host_s"),
        measured=tuple(p for p in STEP_PARTS if p in measured),
        coll_seq=newest.coll_seq,
        **_rank_medians(ranked, newest.t),
    )


def _rank_medians(ranked: deque[tuple], newest: float) -> dict[str, Any]:
    rows = [r for r in ranked if r[0] >= newest - RANK_WINDOW_S]
    if len(rows) < RANK_MIN_STEPS:  # long steps: the newest RANK_MIN_STEPS, however old
        rows = list(ranked)[-RANK_MIN_STEPS:]
    if not rows:
        return {}
    walls = [r[1] for r in rows]
    waits = [r[2] for r in rows if r[2] is not None]
    full = len(waits) == len(rows)  # communication measured in every step of the window

    def mid(k: int) -> float | None:
        vals = [r[k] for r in rows if r[k] is not None]
        return median(vals) if vals else None

    return {
        "wall_p50_s": median(walls),
        "wall_p95_s": _p95(walls),
        "own_p50_s": median(r[1] - r[2] for r in rows) if full else None,
        "wait_p50_s": median(waits) if full else None,
        "input_p50_s": mid(3),
        "sync_p50_s": mid(4),
        "median_steps": len(rows),
    }


def _p95(values: list[float]) -> float:
    if len(values) < 2:
        return values[0]
    return quantiles(values, n=20, method="inclusive")[-1]


@dataclass
class _Follow:
    """Where reading one process's file stands."""

    records: _Records
    ident: tuple[int, int] | None = None  # (st_dev, st_ino) of the file followed
    offset: int = 0
    partial: bytes = b""  # a line still being written
    overlong: bool = False  # inside a line past MAX_LINE: skip to its end

    def restart(self) -> None:
        if self.partial.strip() or self.overlong:
            self.records.malformed += 1  # a generation that ended inside a line
        self.offset, self.partial, self.overlong = 0, b"", False


class _Refused(Exception):
    """A path in the probe directory that is not ours to read."""


class ProbeReader:
    """Follows the probe files of the processes asked for, one `read(pids)` a tick.

    `environ` gives the directory (`probe_dir`: $XDG_RUNTIME_DIR/gputop-diag); `procfs` reads
    /proc/<pid>/stat for each process's start time; `uid` is whose files are ours (default:
    this process's)."""

    def __init__(
        self,
        environ: dict[str, str],
        procfs: Any,
        *,
        uid: int | None = None,
        now: Callable[[], float] = time.time,
    ) -> None:
        self.uid = os.getuid() if uid is None else uid
        self.directory = S.probe_dir(environ, self.uid)
        self.procfs = procfs
        self._now = now  # the file system's clock, for the age of a dead process's file
        self._files: dict[tuple[int, int], _Follow] = {}
        self._gone: dict[tuple[int, int], tuple[ProbeState, float]] = {}
        # (pid, start ticks) -> (the stall's step, the stack file's size when it was asked for)
        self._asked: dict[tuple[int, int], tuple[int, int]] = {}

    def read(self, pids: Iterable[int]) -> ProbeRead:
        try:
            dfd = os.open(self.directory, _OPEN_DIR)
        except FileNotFoundError:  # no probe ever ran for this user
            self._files.clear()
            return ProbeRead()
        except OSError as e:
            self._files.clear()
            why = _why(e)
            with contextlib.suppress(OSError):  # O_DIRECTORY says ENOTDIR for a symlink
                if stat.S_ISLNK(os.lstat(self.directory).st_mode):
                    why = _why(OSError(errno.ELOOP, "symlink"))
            return ProbeRead(errors=(self._refused(self.directory, why),))
        try:
            problem = self._directory_problem(os.fstat(dfd))
            if problem is not None:
                self._files.clear()
                return ProbeRead(errors=(self._refused(self.directory, problem),))
            return self._read(dfd, pids)
        finally:
            os.close(dfd)

    def _directory_problem(self, st: os.stat_result) -> str | None:
        if st.st_uid != self.uid:
            return f"the directory belongs to uid {st.st_uid}, not to us (uid {self.uid})"
        if st.st_mode & 0o022:
            return f"others may write there (mode {stat.S_IMODE(st.st_mode):04o}, not 0700)"
        return None

    def _refused(self, path: str, why: str) -> CollectorError:
        return CollectorError(
            source="probe",
            message=f"probe figures not read from {path}: {why}",
            next_step=_NEXT_STEP,
        )

    def _read(self, dfd: int, pids: Iterable[int]) -> ProbeRead:
        live: dict[tuple[int, int], None] = {}
        for pid in sorted(set(pids)):
            ticks = self._start_ticks(pid)
            if ticks is not None:
                live[(pid, ticks)] = None
        now = self._now()
        for key in [k for k in self._files if k not in live]:  # ended, or no longer tracked
            f = self._files.pop(key)
            if self._start_ticks(key[0]) == key[1]:
                continue  # it runs: no longer tracked
            with contextlib.suppress(_Refused, OSError):  # what it wrote last: a "bye", an "exit"
                self._follow(dfd, S.file_name(*key), f)
            ended = f.records
            if ended.steps and not ended.ended:
                state = ended.state()  # it died without a goodbye: reported as gone a while
                if state is not None:
                    gone = dataclasses.replace(state, gone=True, gone_at=now)
                    self._gone[key] = (gone, now)
        for key, (_, since) in list(self._gone.items()):
            if now - since > GONE_KEPT_S or key in live:
                del self._gone[key]
        for key in [k for k in self._asked if k not in live]:
            del self._asked[key]
        states, errors = [], []
        states.extend(state for state, _ in self._gone.values())
        for key in live:
            f = self._files.get(key) or _Follow(_Records(*key))
            try:
                found = self._follow(dfd, S.file_name(*key), f)
            except _Refused as e:
                self._files.pop(key, None)
                errors.append(self._refused(os.path.join(self.directory, e.args[0]), e.args[1]))
                continue
            if not found:
                continue
            self._files[key] = f
            self._stack(dfd, key, f.records)
            state = f.records.state()
            if state is not None:
                states.append(state)
        self._remove_dead(dfd, live)
        return ProbeRead(tuple(states), tuple(errors))

    def _stack(self, dfd: int, key: tuple[int, int], records: _Records) -> None:
        """Ask a stalled process for its stacks once per stall (the signal its probe named),
        and read what it wrote into its stack file since."""
        progress = records.progress
        if progress is None:
            self._asked.pop(key, None)
            return
        name = S.stack_file_name(*key)
        asked = self._asked.get(key)
        if asked is not None and asked[0] == progress.step:
            if records.stack is None:
                records.stack = self._read_stack(dfd, name, asked[1], records.thread)
                if records.stack is not None:
                    records.stack_at = self._now()
            return
        steps = records.steps
        typical = median(s.wall_s for s in steps) if steps else 0.0
        if records.stack_signal is None:
            return
        if progress.stalled_s < max(STACK_AFTER_S, STACK_AFTER_STEPS * typical):
            return
        try:
            size = os.stat(name, dir_fd=dfd, follow_symlinks=False).st_size
            os.kill(key[0], records.stack_signal)
        except OSError:
            return
        self._asked[key] = (progress.step, size)

    def _read_stack(self, dfd: int, name: str, offset: int, thread: int | None) -> str | None:
        """The stepping thread's stack from what faulthandler appended after `offset`."""
        try:
            opened = self._open(dfd, name)
        except _Refused:
            return None
        if opened is None:
            return None
        fd, st = opened
        try:
            if st.st_size <= offset:
                return None
            start = max(offset, st.st_size - MAX_STACK_BYTES)
            data = os.pread(fd, st.st_size - start, start)
        finally:
            os.close(fd)
        return stack_of_thread(data.decode("utf-8", "replace"), thread)

    def _start_ticks(self, pid: int) -> int | None:
        try:
            return S.start_ticks_of(self.procfs.read_text(f"/proc/{pid}/stat"))
        except (OSError, ValueError):
            return None

    def _open(self, dfd: int, name: str) -> tuple[int, os.stat_result] | None:
        """A file of the directory opened for reading: None when there is none; _Refused when
        it is a symlink, not a regular file, or another user's."""
        try:
            fd = os.open(name, _OPEN, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise _Refused(name, _why(e)) from None
        st = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(st.st_mode):
            problem = "not a regular file"
        elif st.st_uid != self.uid:
            problem = f"it belongs to uid {st.st_uid}, not to us"
        if problem is not None:
            os.close(fd)
            raise _Refused(name, problem)
        return fd, st

    def _follow(self, dfd: int, name: str, f: _Follow) -> bool:
        """Read what was added to the process's file since the last tick; False: no file."""
        opened = self._open(dfd, name)
        if opened is None:
            return False
        fd, st = opened
        try:
            ident = (st.st_dev, st.st_ino)
            if f.ident is None:  # first sight: the older generation first, when kept
                self._read_rotated(dfd, name + ".1", f, None)
            elif f.ident != ident:  # rotated since the last tick: the rest of the old file
                self._read_rotated(dfd, name + ".1", f, f.ident)
            f.ident = ident
            if st.st_size < f.offset:  # truncated, or replaced in place
                f.restart()
            self._read_to_end(fd, st.st_size, f)
        finally:
            os.close(fd)
        return True

    def _read_rotated(
        self, dfd: int, name: str, f: _Follow, expect: tuple[int, int] | None
    ) -> None:
        try:
            opened = self._open(dfd, name)
        except _Refused:
            opened = None  # never read; the current file is still ours to follow
        if opened is not None:
            fd, st = opened
            try:
                if expect is None:
                    f.offset = 0
                    self._read_to_end(fd, st.st_size, f)
                elif (st.st_dev, st.st_ino) == expect:
                    self._read_to_end(fd, st.st_size, f)
            finally:
                os.close(fd)
        f.restart()

    def _read_to_end(self, fd: int, size: int, f: _Follow) -> None:
        if size - f.offset > MAX_BACKLOG:  # cannot happen with the writer's bound; be safe
            f.offset, f.partial, f.overlong = size - MAX_BACKLOG, b"", True
        chunks = []
        while f.offset < size:
            data = os.pread(fd, min(size - f.offset, READ_CHUNK), f.offset)
            if not data:
                break
            chunks.append(data)
            f.offset += len(data)
        if chunks:
            self._lines(f, b"".join(chunks))

    def _lines(self, f: _Follow, data: bytes) -> None:
        buf = f.partial + data
        lines = buf.split(b"\n")
        skip_first = f.overlong  # the rest of a line already counted
        f.partial, f.overlong = lines.pop(), False
        if skip_first and not lines:  # still inside it
            f.partial, f.overlong = b"", True
        elif len(f.partial) > MAX_LINE:
            f.partial, f.overlong = b"", True
            f.records.malformed += 1
        cheap_until = len(buf) - READ_CHUNK  # before this, step lines are skipped unparsed
        pos = 0
        for k, line in enumerate(lines):
            start, pos = pos, pos + len(line) + 1
            if k == 0 and skip_first:
                continue
            line = line.strip()
            if not line:
                continue
            if len(line) > MAX_LINE:
                f.records.malformed += 1
                continue
            if start < cheap_until and _STEP_LINE.search(line):
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past reason
                f.records.malformed += 1
                continue
            if not f.records.take(rec):
                f.records.malformed += 1

    def _remove_dead(self, dfd: int, live: dict[tuple[int, int], None]) -> None:
        """Remove the files of processes that ended (ours, regular, still for a while): their
        probe files and their stack files."""
        try:
            names = os.listdir(dfd)
        except OSError:
            return
        now = self._now()
        for name in names:
            key = S.parse_file_name(name.removesuffix(".1")) or S.parse_stack_file_name(name)
            if key is None or key in live or self._start_ticks(key[0]) == key[1]:
                continue  # not a probe file, or its process runs
            with contextlib.suppress(OSError):
                st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode) or st.st_uid != self.uid:
                    continue
                if now - st.st_mtime >= DEAD_GRACE_S:
                    os.unlink(name, dir_fd=dfd)


def stack_of_thread(text: str, thread: int | None) -> str | None:
    """One thread's frames from a faulthandler dump ("Thread 0x...", "Current thread 0x..."
    headers, then its frames, most recent call first): the thread `thread` (its ident), else the
    thread that took the signal (the main thread)."""
    blocks: dict[str, list[str]] = {}
    current = None
    header = None
    for line in text.splitlines():
        m = _THREAD_LINE.match(line)
        if m:
            header = m.group(1).lower()
            blocks[header] = []
            if line.startswith("Current"):
                current = header
        elif header is not None and line.strip():
            blocks[header].append(line.strip())
    wanted = f"{thread:#x}" if thread is not None else None
    frames = blocks.get(wanted) if wanted is not None else None
    if not frames and current is not None:
        frames = blocks.get(current)
    if not frames:
        return None
    return "\n".join(frames[:MAX_STACK_LINES])


def _why(e: OSError) -> str:
    if e.errno == errno.ELOOP:
        return "it is a symbolic link (never followed)"
    if e.errno == errno.ENOTDIR:
        return "not a directory"
    return e.strerror or type(e).__name__
