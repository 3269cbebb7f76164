"""The GPU process table's rows: what a command line shows, filters, sort orders.

Pure functions over a Snapshot, so the table's content is testable without a terminal. The
filters are nvitop's (`--only GPU…`, `--user`, `--pid`) plus htop's free text and the owner's
terms (`job:`, `pod:`, `ctr:`); the sort keys are htop's habits (memory first, `o` cycles, `O`
reverses), and the selected GPU's processes always come first.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass, field, replace

from gputop_diag.model import GIB, MIB, Owner, Snapshot
from gputop_diag.tui.process_owner import (
    owner_matches,
    owner_sort_key,
    owner_term,
    owner_text,
    owner_values,
)


def command_text(cmdline: tuple[str, ...] | None, name: str | None) -> str:
    """The command as a person reads it: the program's base name, then its arguments.

    `/opt/conda/envs/train/bin/python3.11 -u train.py --lr 3e-4` shows as
    `python3.11 -u train.py --lr 3e-4`: the environment's path says nothing the script name
    doesn't, and it pushes the script out of sight.
    """
    if cmdline:
        args = list(cmdline)
        if len(args) == 1 and " " in args[0]:  # a process that rewrote its title
            return args[0]
        return " ".join([os.path.basename(args[0]) or args[0], *args[1:]])
    return name or "(not readable)"


@dataclass(frozen=True)
class ProcessFilter:
    """Which processes (and GPUs) to show. Empty means everything."""

    gpus: frozenset[int] = field(default_factory=frozenset)  # --only: the GPUs shown
    users: frozenset[str] = field(default_factory=frozenset)
    pids: frozenset[int] = field(default_factory=frozenset)
    text: str = ""  # a part of the command line, the user, the owner or the pid
    jobs: frozenset[str] = field(default_factory=frozenset)  # Slurm job ids (`424242`, `.0`)
    pods: frozenset[str] = field(default_factory=frozenset)  # NS/NAME, NAME, NS/ or uid prefix
    containers: frozenset[str] = field(default_factory=frozenset)  # id prefix or name

    @property
    def active(self) -> bool:
        return bool(self.gpus or self.users or self.pids or self.text or self.owned_by)

    @property
    def owned_by(self) -> bool:
        """Whether the filter names an owner (`job:`, `pod:`, `ctr:`)."""
        return bool(self.jobs or self.pods or self.containers)

    def shows_gpu(self, index: int) -> bool:
        return not self.gpus or index in self.gpus

    def spec(self) -> str:
        """The filter as the filter prompt takes it (`parse(f.spec()) == f`)."""
        parts = []
        if self.gpus:
            parts.append("gpu:" + ",".join(map(str, sorted(self.gpus))))
        if self.users:
            parts.append("user:" + ",".join(sorted(self.users)))
        if self.pids:
            parts.append("pid:" + ",".join(map(str, sorted(self.pids))))
        for key, values in (("job", self.jobs), ("pod", self.pods), ("ctr", self.containers)):
            if values:
                parts.append(f"{key}:" + ",".join(sorted(values)))
        if self.text:
            parts.append(self.text)
        return " ".join(parts)

    def describe(self) -> str:
        """For the header and the table title: `GPU 0,2 · user alice · "train"`."""
        parts = []
        if self.gpus:
            parts.append(f"GPU {','.join(map(str, sorted(self.gpus)))}")
        if self.users:
            parts.append(f"user {','.join(sorted(self.users))}")
        if self.pids:
            parts.append(f"pid {','.join(map(str, sorted(self.pids)))}")
        for key, values in (("job", self.jobs), ("pod", self.pods), ("ctr", self.containers)):
            if values:
                parts.append(f"{key} {','.join(sorted(values))}")
        if self.text:
            parts.append(f'"{self.text}"')
        return " · ".join(parts)


class FilterError(ValueError):
    """A filter the prompt cannot read; the message says what was wrong."""


def _numbers(value: str, what: str) -> frozenset[int]:
    try:
        return frozenset(int(v) for v in value.replace(" ", "").split(",") if v)
    except ValueError:
        raise FilterError(f"{what} takes numbers: {value!r}") from None


def parse_filter(spec: str) -> ProcessFilter:
    """`gpu:0,2 user:alice pid:4242 job:424242 pod:NAME ctr:ID train` -> ProcessFilter; words
    without a `key:` match the command line, the user, the owner or the pid. An empty spec
    clears every filter."""
    gpus: set[int] = set()
    users: set[str] = set()
    pids: set[int] = set()
    owners: dict[str, set[str]] = {"job": set(), "pod": set(), "ctr": set()}
    words = []
    for token in spec.split():
        key, sep, value = token.partition(":")
        key = key.lower()
        if sep and key in ("gpu", "gpus", "only"):
            gpus |= _numbers(value, "gpu:")
        elif sep and key in ("user", "users", "u"):
            users |= {v for v in value.split(",") if v}
        elif sep and key in ("pid", "pids", "p"):
            pids |= _numbers(value, "pid:")
        elif sep and (term := owner_term(key)) is not None:
            try:
                owners[term] |= owner_values(value, term)
            except ValueError as e:
                raise FilterError(str(e)) from None
        else:
            words.append(token)
    return ProcessFilter(
        frozenset(gpus),
        frozenset(users),
        frozenset(pids),
        " ".join(words),
        jobs=frozenset(owners["job"]),
        pods=frozenset(owners["pod"]),
        containers=frozenset(owners["ctr"]),
    )


@dataclass(frozen=True)
class ProcRow:
    """One GPU process on one GPU, as the table shows it."""

    key: str  # "gpu:pid", stable across ticks
    gpu_index: int
    gpu_label: str  # "0", or "0:1" in MIG instance 1
    pid: int
    user: str
    command: str
    gpu_mem_bytes: int | None
    share_pct: float | None  # of the GPU's (or the MIG instance's) memory
    sm_pct: float | None  # the driver's per-process SM samples, where it gives them
    cpu_pct: float | None
    rss_bytes: int | None
    elapsed_s: float | None = None  # since the process started
    mem_pct: float | None = None  # its RSS, % of the host's memory (htop's %MEM)
    ppid: int | None = None
    parent_name: str | None = None
    parent_user: str | None = None
    owner: Owner | None = None  # its pod, container or Slurm job (collect/owners.py)
    depth: int = 0  # the tree view: how deep under the first parent shown
    tree_prefix: str = ""  # the tree view: "├─ ", "│  └─ ", drawn before the command
    is_parent: bool = False  # the tree view: a parent of GPU processes, not one itself


def elapsed_text(seconds: float | None) -> str:
    """htop's TIME+ layout for the time since a process started: `12:05` (minutes:seconds)
    under an hour, `5h03:10` under a day, `3d04h` from a day on (htop's Row_printTime)."""
    if seconds is None or seconds < 0:
        return "n/a"
    s = int(seconds)
    if s < 3600:
        return f"{s // 60}:{s % 60:02d}"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60:02d}:{s % 60:02d}"
    return f"{s // 86400}d{s % 86400 // 3600:02d}h"


def process_rows(snap: Snapshot) -> list[ProcRow]:
    """Every GPU process of `snap`, unfiltered, in NVML's order. Under --sanitize `snap` is
    already the sanitized one (users and arguments are pseudonyms)."""
    totals = {g.index: g.mem_total_bytes or 0 for g in snap.gpus}
    migs = {
        (g.index, m.gpu_instance_id, m.compute_instance_id): m
        for g in snap.gpus
        for m in g.mig_instances
    }
    host_total = snap.host.mem_total_bytes if snap.host is not None else None
    rows = []
    for p in snap.gpu_processes:
        mig = migs.get((p.gpu_index, p.gpu_instance_id, p.compute_instance_id))
        info = snap.process(p.pid)
        cmdline = info.cmdline if info is not None else None
        name = info.name if info is not None else None
        user = (info.user if info else None) or "?"
        command = command_text(cmdline, name)
        used = p.used_memory_bytes
        total = mig.memory_total_bytes if mig is not None else totals.get(p.gpu_index)
        rows.append(
            ProcRow(
                key=f"{p.gpu_index}:{p.pid}",
                gpu_index=p.gpu_index,
                gpu_label=str(p.gpu_index) if mig is None else f"{p.gpu_index}:{mig.mig_index}",
                pid=p.pid,
                user=user,
                command=command,
                gpu_mem_bytes=used,
                share_pct=100.0 * used / total if used and total else None,
                sm_pct=p.sm_util_pct,
                cpu_pct=info.cpu_pct if info else None,
                rss_bytes=info.rss_bytes if info else None,
                elapsed_s=(
                    snap.timestamp - info.start_time
                    if info is not None and info.start_time is not None
                    else None
                ),
                mem_pct=(
                    100.0 * info.rss_bytes / host_total
                    if info is not None and info.rss_bytes is not None and host_total
                    else None
                ),
                ppid=info.ppid if info else None,
                parent_name=info.parent_name if info else None,
                parent_user=info.parent_user if info else None,
                owner=info.owner if info else None,
            )
        )
    return rows


def matches(row: ProcRow, f: ProcessFilter) -> bool:
    if f.gpus and row.gpu_index not in f.gpus:
        return False
    if f.users and row.user not in f.users:
        return False
    if f.pids and row.pid not in f.pids:
        return False
    if not owner_matches(row.owner, f.jobs, f.pods, f.containers):
        return False
    if f.text:
        hay = f"{row.pid} {row.user} {owner_text(row.owner) or ''} {row.command}".lower()
        return all(w in hay for w in f.text.lower().split())
    return True


# sort name -> (column label, descending by default)
SORTS: dict[str, tuple[str, bool]] = {
    "gpu_mem": ("GPU MEM", True),
    "sm": ("SM%", True),
    "cpu": ("CPU%", True),
    "rss": ("RSS", True),
    "mem_pct": ("%MEM", True),
    "time": ("TIME", True),  # the longest-running first
    "pid": ("PID", False),
    "gpu": ("GPU", False),
    "user": ("USER", False),
    "owner": ("OWNER", False),  # the jobs, pods and containers in order, then the rest
    "command": ("COMMAND", False),
}


@dataclass(frozen=True)
class SortOrder:
    column: str = "gpu_mem"
    reverse: bool = False  # against the column's natural direction

    @property
    def descending(self) -> bool:
        return SORTS[self.column][1] != self.reverse

    def label(self, plain: bool = False) -> str:
        arrow = ("v" if self.descending else "^") if plain else ("▼" if self.descending else "▲")
        return f"{SORTS[self.column][0]} {arrow}"

    def next(self, step: int = 1, shown: Collection[str] | None = None) -> SortOrder:
        """The next column in `o`'s cycle; `shown`: only the columns drawn at this width (a
        narrow table has no SM% column to sort by)."""
        names = [n for n in SORTS if shown is None or n in shown or n == self.column]
        k = names.index(self.column) if self.column in names else 0
        for _ in names:
            k = (k + step) % len(names)
            if shown is None or names[k] in shown:
                return SortOrder(names[k])
        return self

    def flipped(self) -> SortOrder:
        return replace(self, reverse=not self.reverse)


def _value(row: ProcRow, column: str):
    """The sort value; missing figures sort last whichever the direction."""
    if column == "owner":  # a process without a job, pod or container sorts last
        return owner_sort_key(row.owner)
    v = {
        "gpu_mem": row.gpu_mem_bytes,
        "sm": row.sm_pct,
        "cpu": row.cpu_pct,
        "rss": row.rss_bytes,
        "mem_pct": row.mem_pct,
        "time": row.elapsed_s,
        "pid": row.pid,
        "gpu": row.gpu_index,
        "user": row.user.lower(),
        "command": row.command.lower(),
    }[column]
    return v


def ordered(rows: list[ProcRow], order: SortOrder, selected_gpu: int | None) -> list[ProcRow]:
    """The selected GPU's processes first, then by `order` (ties by GPU, then pid); rows
    without the figure last."""
    present = [r for r in rows if _value(r, order.column) is not None]
    absent = [r for r in rows if _value(r, order.column) is None]
    present.sort(key=lambda r: (r.gpu_index, r.pid))
    present.sort(key=lambda r: _value(r, order.column), reverse=order.descending)
    absent.sort(key=lambda r: (r.gpu_index, r.pid))
    out = present + absent
    if selected_gpu is not None:
        out.sort(key=lambda r: r.gpu_index != selected_gpu)  # stable: order kept within
    return out


# How far a row on screen may be from where an exact sort puts it before the table is re-sorted:
# within a process's hold step (panes/memory.py ROW_STEPS) the order on screen is as good as the
# figures on screen, and a re-sort rewrites the whole table over SSH.
ORDER_SLACK: dict[str, tuple[float, float]] = {  # column -> (points, share of the value)
    "gpu_mem": (0.0, 0.02),
    "sm": (10.0, 0.0),
    "cpu": (10.0, 0.0),
    "rss": (0.0, 0.10),
    "mem_pct": (0.0, 0.10),
    "time": (2.0, 0.0),  # every row's TIME moves with the clock: only a start moves a row
}


def nearly_sorted(rows: list[ProcRow], order: SortOrder, selected_gpu: int | None) -> bool:
    """Whether `rows`, in the order on screen, may stay so: the selected GPU's processes first,
    rows without the figure last, and each row's figure within ORDER_SLACK of the figure an
    exact sort puts at its place. Measured against the exact order, not the neighbour, so
    small steps do not add up (50, 59, 68 under "descending" is out of order)."""
    if selected_gpu is not None:
        firsts = [r.gpu_index == selected_gpu for r in rows]
        if firsts != sorted(firsts, reverse=True):
            return False
    points, share = ORDER_SLACK.get(order.column, (0.0, 0.0))
    exact = ordered(rows, order, selected_gpu)
    for shown, due in zip(rows, exact, strict=True):
        va, vb = _value(shown, order.column), _value(due, order.column)
        if va is None or vb is None:
            if (va is None) != (vb is None):
                return False  # a row without the figure above one with it
            continue
        if not isinstance(va, int | float) or not isinstance(vb, int | float):
            if va != vb:  # names and owners: no slack
                return False
            continue
        if abs(va - vb) > max(points, share * max(abs(va), abs(vb))):
            return False
    return True


def size_text(b: int | float | None) -> str:
    """`43.4G`, `812M`: GiB with one decimal from 1 GiB up, MiB below."""
    if b is None:
        return "n/a"
    if b >= GIB:
        return f"{b / GIB:.1f}G"
    return f"{b / MIB:.0f}M"


@dataclass
class ProcessControls:
    """What the keys change about the GPU processes shown: the filter (`f`, Esc, `g`), the sort
    order (`o`, `O`, a click on a header) and how the histories move (`G`)."""

    filter: ProcessFilter = field(default_factory=ProcessFilter)
    sort: SortOrder = field(default_factory=SortOrder)
    sweep: bool = True  # histories sweep (cheap over SSH); `G` makes them scroll

    def only_gpu(self, selected: int | None) -> ProcessFilter | None:
        """`g`: the filter for only the selected GPU, or every GPU again; None: no change."""
        f = self.filter
        if f.gpus:
            return replace(f, gpus=frozenset())
        if selected is not None:
            return replace(f, gpus=frozenset({selected}))
        return None

    def sort_by(self, column: str) -> bool:
        """Sort by `column`; the same column again reverses the order. False: no such column."""
        if column not in SORTS:
            return False
        self.sort = self.sort.flipped() if self.sort.column == column else SortOrder(column)
        return True

    def toggle_sweep(self) -> str:
        """`G`; what the toast says."""
        self.sweep = not self.sweep
        if self.sweep:
            return "histories sweep: the newest sample overwrites the oldest at the marker"
        return "histories scroll: newest at the right (more bytes over SSH)"


def tree_rows(rows: list[ProcRow], plain: bool = False) -> list[ProcRow]:
    """`rows` (in their order) as a tree, as nvitop's and htop's tree views draw it: each GPU
    process under its parent — a row of its own when the parent uses no GPU (a launcher:
    torchrun, srun, a shell) — and a GPU process started by another under that one. The
    command carries the branch (`├─ `, `└─ `; ASCII with `plain`)."""
    mid, end, bar, gap = ("|- ", "`- ", "|  ", "   ") if plain else ("├─ ", "└─ ", "│  ", "   ")
    by_pid: dict[int, ProcRow] = {}
    for r in rows:
        by_pid.setdefault(r.pid, r)
    kids: dict[int, list[ProcRow]] = {}
    roots: list[ProcRow] = []
    for r in rows:
        parent = by_pid.get(r.ppid) if r.ppid is not None else None
        if parent is not None and parent is not r and by_pid[r.pid] is r:
            kids.setdefault(parent.pid, []).append(r)
        else:
            roots.append(r)
    out: list[ProcRow] = []

    def walk(r: ProcRow, lead: str, last: bool, depth: int) -> None:
        out.append(replace(r, depth=depth, tree_prefix=lead + (end if last else mid)))
        below = kids.get(r.pid, []) if by_pid[r.pid] is r else []
        for k, child in enumerate(below):
            walk(child, lead + (gap if last else bar), k == len(below) - 1, depth + 1)

    groups: dict[int | None, list[ProcRow]] = {}
    for r in roots:
        launcher = r.ppid if r.ppid not in (None, 0, 1) else None
        groups.setdefault(launcher, []).append(r)
    for ppid, members in groups.items():
        if ppid is None:
            for r in members:
                out.append(replace(r, depth=0, tree_prefix=""))
                below = kids.get(r.pid, []) if by_pid[r.pid] is r else []
                for k, child in enumerate(below):
                    walk(child, "", k == len(below) - 1, 1)
            continue
        first = members[0]
        out.append(
            ProcRow(
                key=f":{ppid}",
                gpu_index=first.gpu_index,
                gpu_label="",
                pid=ppid,
                user=first.parent_user or "",
                command=first.parent_name or "(parent)",
                gpu_mem_bytes=None,
                share_pct=None,
                sm_pct=None,
                cpu_pct=None,
                rss_bytes=None,
                is_parent=True,
            )
        )
        for k, r in enumerate(members):
            walk(r, "", k == len(members) - 1, 1)
    return out
