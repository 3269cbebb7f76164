"""Pane 5, Driver: the driver -> CUDA runtime -> framework chain, host layer upward.

The kernel module and the user-space library (the slow source `Snapshot.driver_chain`, read
every few seconds), the driver's maximum CUDA (NVML), the CUDA runtimes processes loaded (their
/proc/<pid>/maps: a runtime too new for the driver never reaches a GPU, so only its maps show
it), and the verdict with the text users see and the next step. `gputop-diag driver` prints the
same with the libraries' paths, nvcc and --probe-python.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult

from ...collect.cuda_libs import unreadable_why
from ...driver.compat import (
    MODULE_NOT_VISIBLE,
    MODULE_NOT_VISIBLE_WHY,
    current_chain,
    facts_from_snapshot,
    judge_chain,
    runtime_verdict,
    status_of,
)
from ...model import ProcessCuda, Snapshot
from ...widgets import DiffText
from ..feed import Update
from .base import Pane, View

_VERDICT = {"too_new": "TOO NEW", "mvc": "minor-version compat", "compat": "forward compat"}
_STATUS = {
    "ok": ("OK", ""),
    "warnings": ("WARNINGS", "bold"),
    "broken": ("BROKEN", "bold reverse"),
    "no_driver": ("NO DRIVER", "bold"),
}


def _libs(p: ProcessCuda) -> str:
    parts = []
    for lib in p.libraries:
        if lib.kind == "torch_cuda":
            continue
        name = "libcuda" if lib.kind == "cuda" else lib.kind
        gone = ", replaced on disk" if lib.deleted else ""
        parts.append(f"{name} {lib.version or '?'} ({lib.origin}{gone})")
    if p.framework:
        parts.insert(0, f"{p.framework} (torch.version.cuda {p.framework_cuda or '?'})")
    return ", ".join(parts)


class DriverPane(Pane):
    def compose(self) -> ComposeResult:
        yield DiffText(id="driver-text")

    def show(self, u: Update, view: View) -> None:
        self.query_one("#driver-text", DiffText).update(render(u.snapshot, view))


def render(snap: Snapshot, view: View) -> Text:
    s = snap.system
    chain = current_chain(snap)
    stale = chain is None and snap.driver_chain is not None
    t = Text()
    t.append(
        "kernel module → user-space library → driver's max CUDA → CUDA runtime → framework\n\n"
    )
    facts = facts_from_snapshot(snap)

    def row(label: str, value: str, where: str = "") -> None:
        t.append(f"{label:<19} ", style="dim")
        t.append(value, style="bold")
        if where:
            t.append(f"  {where}", style="dim")
        t.append("\n")

    if chain is None:
        why = "the driver changed since the last read: " if stale else ""
        row("kernel module", "…", f"{why}read with the slow sources (every 10 s)")
    elif chain.module_loaded:
        row(
            "kernel module",
            f"{chain.module_version or '?'} ({chain.module_flavour or '?'})",
            "/proc/driver/nvidia/version",
        )
    elif facts is not None and facts.nvml_answered:
        row("kernel module", MODULE_NOT_VISIBLE, MODULE_NOT_VISIBLE_WHY)
    else:
        row("kernel module", "not loaded", "no /proc/driver/nvidia")
    library = (chain.library_version if chain else None) or s.driver_version
    row(
        "NVML library",
        library or "not found",
        f"NVML {s.nvml_version}" if s.nvml_version else "libnvidia-ml.so.<version> on disk",
    )
    dmax = s.driver_max_cuda
    if dmax is None and facts is not None and facts.driver_max:
        dmax = f"{facts.driver_max[0]}.{facts.driver_max[1]} (from the driver's version)"
    row("driver's max CUDA", dmax or "n/a", "the newest CUDA runtime this driver can run")
    if chain is not None:
        hidden = f"; {chain.unreadable} {unreadable_why()}" if chain.unreadable else ""
        row(
            "CUDA runtimes",
            f"{len(chain.processes)} process(es)",
            f"their /proc/<pid>/maps, of {chain.scanned} read{hidden}",
        )
        _processes(t, snap, facts, view)
    t.append("\n")
    if not snap.nvml_available:
        t.append(
            "NVML did not answer: the chain is read below it (module, library on disk, maps); "
            "see the banner.\n",
            style="bold",
        )
    problems = judge_chain(facts) if facts is not None else ()
    if facts is not None:
        status = status_of(problems)
        if any(p.code == "no_driver" for p in problems):
            status = "no_driver"
        label, style = _STATUS[status]
        t.append("verdict: ", style="dim")
        t.append(f" {label} " if style else label, style=style)
        t.append("\n")
    for p in problems[: 1 if view.short else 3]:
        mark = "!" if p.severity == "critical" else "·"
        t.append(f"{mark} {p.layer}: {p.text}\n", style="bold" if p.severity == "critical" else "")
        t.append(f"  users see: {p.error_text}\n")
        t.append(f"  next: {p.next_step}\n", style="dim")
    if not view.short:
        t.append(
            "\nDebug from the host layer upward; after a driver upgrade, reboot or reload the "
            "module before testing. `gputop-diag driver` adds the libraries' paths, nvcc and "
            "--probe-python PATH (torch.version.cuda).",
            style="dim",
        )
    t.rstrip()
    return t


def _processes(t: Text, snap: Snapshot, facts, view: View) -> None:
    chain = current_chain(snap)
    on_gpu = {p.pid for p in snap.gpu_processes}
    groups: dict[tuple, list[int]] = {}
    for p in chain.processes:
        rt = p.library("cudart")
        cu = p.library("cuda")
        version = p.framework_cuda or (rt.version if rt else None)
        v = runtime_verdict(
            version,
            facts.driver_max if facts else None,
            facts.module_version if facts else None,
            bool(cu and cu.origin == "compat"),
        )
        user = "" if view.sanitize else (p.user or "?")
        key = (p.name or "?", user, p.pid in on_gpu, v.status if v else None, _libs(p))
        groups.setdefault(key, []).append(p.pid)
    limit = 2 if view.short else 5
    for k, ((name, user, gpu, status, libs), pids) in enumerate(groups.items()):
        if k == limit:
            t.append(f"  (+{len(groups) - limit} more: gputop-diag driver)\n", style="dim")
            break
        who = f"pid {pids[0]}" if len(pids) == 1 else f"{len(pids)} processes (pid {pids[0]}…)"
        owner = f" ({user})" if user else ""
        t.append(f"  {who} {name}{owner}, {'on a GPU' if gpu else 'on no GPU'}: ")
        shown = _VERDICT.get(status, "ok" if status == "ok" else "?")
        t.append(shown + "\n", style="bold" if status == "too_new" else "")
        t.append(f"    {libs}\n", style="dim")
