"""Pane 5, Driver: the driver -> CUDA runtime -> framework chain, host layer upward, and the
node and job health checks.

The kernel module and the user-space library (the slow source `Snapshot.driver_chain`, read
every few seconds), on NVSwitch systems the fabric manager (the health checks' fabric findings,
`driver.compat.fabric_from_snapshot`), the driver's maximum CUDA (NVML), the CUDA runtimes
processes loaded (their /proc/<pid>/maps: a runtime too new for the driver never reaches a GPU,
so only its maps show it), and the verdict with the text users see and the next step.
`gputop-diag driver` prints the same with the libraries' paths, nvcc and --probe-python.

Below it, Health: the findings of the last health read (`Snapshot.health`, the Monitor's slow
source, every 30 s) that are not ok, worst first, each with its evidence and where it was read,
the classes it bears on and its next step, a command kept whole (broken only between its words,
with ` \\` where it goes on); then the checks that were ok. `gputop-diag health` prints the same.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone

from rich.text import Text
from textual.app import ComposeResult

from gputop_diag.driver.compat import (
    FABRIC_STATE_WORDS,
    MODULE_NOT_VISIBLE,
    MODULE_NOT_VISIBLE_WHY,
    FabricFacts,
    current_chain,
    fabric_from_snapshot,
    facts_from_snapshot,
    judge_chain,
    runtime_verdict,
    status_of,
)
from gputop_diag.driver.kernels import gpus_named
from gputop_diag.model import ProcessCuda, Snapshot
from gputop_diag.model.formats import count
from gputop_diag.model.health import SEVERITIES, Finding
from gputop_diag.monitor.health import HEALTH_EVERY_S
from gputop_diag.monitor.view import Update
from gputop_diag.tui.panes.base import Pane, View, hang_text, pane_width
from gputop_diag.tui.side_panel import wrap_words
from gputop_diag.widgets import DiffText

_VERDICT = {"too_new": "TOO NEW", "mvc": "minor-version compat", "compat": "forward compat"}
_STATUS = {
    "ok": ("OK", ""),
    "warnings": ("WARNINGS", "bold"),
    "broken": ("BROKEN", "bold reverse"),
    "no_driver": ("NO DRIVER", "bold"),
}
# the fabric manager's row: its state's style (its words are `gputop-diag driver`'s)
_FABRIC_STYLE = {"broken": "bold reverse"}
# the health section: each severity's word (readable without colour) and its style
_SEVERITY = {
    "critical": ("CRITICAL", "bold reverse"),
    "warning": ("WARNING", "bold"),
    "info": ("INFO", ""),
}
EVIDENCE_SHOWN = 4  # evidence lines per finding (2 on a short terminal); `gputop-diag health`
WIDE_FROM = 60  # pane width from which findings' details line up after the severity word


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
        # wrapped here, with hanging indents: the label column, a bullet, `next: `
        width = pane_width(self)
        text = hang_text(render(u, view, width), width)
        self.query_one("#driver-text", DiffText).update(text)
        self.check_width(width)


def render(u: Update, view: View, width: int = 0) -> Text:
    """The pane's text; the health section and the next steps wrapped to `width` (0: not
    wrapped), the rest left to `hang_text`."""
    snap = u.snapshot
    s = snap.system
    chain = current_chain(snap)
    stale = chain is None and snap.driver_chain is not None
    # from the health findings as shown (under --sanitize their text is already the session's
    # pseudonyms, by the health rules: `sanitize/health.py`)
    fabric = fabric_from_snapshot(snap)
    t = Text()
    t.append(
        "kernel module → "
        + ("fabric manager → " if fabric is not None else "")
        + "user-space library → driver's max CUDA → CUDA runtime → framework → kernels\n\n"
    )
    facts = facts_from_snapshot(snap)

    def row(label: str, value: str, where: str = "", style: str = "bold") -> None:
        t.append(f"{label:<19} ", style="dim")
        t.append(value, style=style)
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
    if fabric is not None:  # NVSwitch systems only: between the module and NVML
        value, where, style = _fabric_row(fabric)
        row("fabric manager", value, where, style)
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
        hidden = f"; {chain.unreadable} {u.maps_unreadable_why}" if chain.unreadable else ""
        row(
            "CUDA runtimes",
            count(len(chain.processes), "process", "processes"),
            f"their /proc/<pid>/maps, of {chain.scanned} read{hidden}",
        )
        _processes(t, snap, facts, view)
    if facts is not None:
        _kernel_images(t, facts, row)
    t.append("\n")
    if not snap.nvml_available:
        t.append(
            "NVML did not answer: the chain is read below it (module, library on disk, maps); "
            "see the banner.\n",
            style="bold",
        )
    problems = judge_chain(facts, fabric) if facts is not None else ()
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
        # a command in it is broken only between its words, with ` \` where it goes on
        steps = wrap_words(p.next_step, width - 8, width - 8, copyable=True) if width else None
        for k, line in enumerate(steps or [p.next_step]):
            t.append(f"  {'next: ' if k == 0 else ' ' * 6}{line}\n", style="dim")
    if not view.short:
        t.append(
            "\nDebug from the host layer upward; after a driver upgrade, reboot or reload the "
            "module before testing. `gputop-diag driver` adds the libraries' paths, nvcc and "
            "--probe-python PATH (torch.version.cuda).\n",
            style="dim",
        )
    t.append("\n")
    render_health(t, snap, u.replaying, view, width)
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


def _kernel_images(t: Text, facts, row) -> None:
    """The last layer: each mapped torch build's GPU architectures (its libtorch_cuda.so's
    .nv_fatbin) against the GPUs, GPUs of one capability and outcome as one line; where a
    library is mapped and was not read (a recording from before), that it was not."""
    if facts.kernels_read is False and not facts.kernels:
        row("kernel images", "not read", "libtorch_cuda.so's architectures: not in this read")
        return
    for k in facts.kernels:
        row("kernel images", " ".join(k.build.arch_list), f"{k.build.who}, {k.build.source}")
        groups: dict[tuple, list[int]] = {}
        for g, c in k.checks:
            verdict = (
                "?"
                if c is None
                else "NO KERNEL IMAGE"
                if not c.runs
                else f"PTX only ({c.by})"
                if c.jit
                else f"ok ({c.by})"
            )
            groups.setdefault((g.name or "?", g.capability, verdict), []).append(g.index)
        for (name, cc, verdict), gpus in groups.items():
            t.append(f"  {gpus_named(gpus)} {name} ({cc[0]}.{cc[1]}): ")
            t.append(verdict + "\n", style="bold reverse" if verdict == "NO KERNEL IMAGE" else "")


def _fabric_row(fabric: FabricFacts) -> tuple[str, str, str]:
    """The fabric manager's state, what was found (its first finding: each of them, with its
    evidence, is under Health below) and the state's style."""
    value = FABRIC_STATE_WORDS.get(fabric.state, fabric.state)
    style = _FABRIC_STYLE.get(fabric.state, "bold")
    more = len(fabric.ids) - 1 if fabric.state != "ok" else 0
    if more <= 0:
        return value, fabric.text, style
    return value, f"{fabric.text.split('; ')[0]} (+{more} more under Health)", style


# -- health ---------------------------------------------------------------------------------------
def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=timezone.utc).strftime("%H:%M:%S")


def render_health(t: Text, snap: Snapshot, replaying: bool, view: View, width: int) -> None:
    """The Health section: the findings that are not ok, worst first, then the checks that were
    ok; before the first read, or in a recording made without it, why there is nothing."""
    report = snap.health
    every = f"every {HEALTH_EVERY_S:.0f} s"
    if report is None:
        t.append("Health: ", style="bold")
        t.append("not in this recording" if replaying else f"not read yet ({every})")
        t.append("\n")
        return
    t.append(f"Health (read {_when(report.facts.timestamp)} UTC, {every})\n", style="bold")
    order = {sev: k for k, sev in enumerate(SEVERITIES)}
    found = sorted(
        (f for f in report.findings if f.severity != "ok"), key=lambda f: order[f.severity]
    )
    pad = 10 if not width or width >= WIDE_FROM else 2
    for f in found:
        _finding(t, f, pad, view, width)
    ok = [f.id for f in report.findings if f.severity == "ok"]
    checks = "check" if len(ok) == 1 else "checks"
    line = f"{len(ok)} {checks} ok" + (f": {', '.join(ok)}" if ok else "")
    _hung(t, line, len(f"{len(ok)} {checks} ok: "), width, "dim")


def _hung(t: Text, line: str, indent: int, width: int, style: str = "") -> None:
    """`line` wrapped at spaces to `width`, its continuation lines `indent` columns in (and
    only so far: a break at a double space leaves no space to start the next line)."""
    pieces = hang_text(Text(line), width, lambda _: indent).plain.split("\n")
    for k, piece in enumerate(pieces):
        piece = piece.rstrip(" ")
        t.append((" " * indent + piece.lstrip(" ") if k else piece) + "\n", style=style)


def _finding(t: Text, f: Finding, pad: int, view: View, width: int) -> None:
    word, style = _SEVERITY.get(f.severity, (f.severity.upper(), ""))
    head = Text(word, style=style)
    head.append(" " * max(1, pad - len(word)))
    head.append(f.title, style="bold" if f.severity != "info" else "")
    # the title hangs under itself; the details under the title (wide) or indented (narrow)
    t.append_text(hang_text(head, width, lambda _: max(pad, len(word) + 1)))
    t.append("\n")
    inset = " " * pad
    shown = 2 if view.short else EVIDENCE_SHOWN
    for e in f.evidence[:shown]:
        _hung(t, f"{inset}· {e.text}  ({e.source})", pad + 2, width)
    if len(f.evidence) > shown:
        more = len(f.evidence) - shown
        _hung(t, f"{inset}· (+{more} more: gputop-diag health)", pad + 2, width, "dim")
    classes = ", ".join(c.replace("_", " ") for c in f.bears_on) or "no bottleneck class"
    layer = f"; driver-chain layer: {f.layer.replace('_', ' ')}" if f.layer else ""
    _hung(t, f"{inset}bears on: {classes}{layer}", pad + len("bears on: "), width, "dim")
    if f.next_step:
        for line in _next_lines(f.next_step, pad, width):
            t.append(line + "\n")


_COMMENT = re.compile(r"\s+#\s+")


def _next_lines(step: str, pad: int, width: int) -> list[str]:
    """`next: ` and a health next step (`command  # comment`) in lines of `width`: the
    command broken only between its words (a quoted phrase is one word), each line it goes on
    from ending with ` \\`; a comment that does not fit after it on lines of its own, each
    starting with `# ` (pasted, none of it runs)."""
    first = " " * pad + "next: "
    if not width:
        return [first + step]
    command, comment = _split_comment(step)
    words = _quoted_words(command)
    indent = len(first)
    if max(map(len, words), default=0) + 2 > width - indent:
        indent = min(indent, 2)  # a word wider than the hanging room: start further left
    lines = _packed(words, width - len(first), width - indent, " \\")
    out = [first + lines[0]] + [" " * indent + line for line in lines[1:]]
    if comment:
        tail = f"  # {comment}"
        if len(out[-1]) + len(tail) <= width:
            out[-1] += tail
        else:
            room = width - indent - 2
            out += [" " * indent + "# " + line for line in _packed(comment.split(), room, room)]
    return out


def _split_comment(step: str) -> tuple[str, str]:
    """`command  # comment` as its command and its comment ("" where it has none)."""
    parts = _COMMENT.split(step, maxsplit=1)
    return (parts[0], parts[1]) if len(parts) == 2 else (step, "")


def _quoted_words(command: str) -> list[str]:
    """The command's words, a quoted phrase (`'GSP Firmware'`) as one word."""
    words: list[str] = []
    quote = ""
    for w in command.split():
        if quote:
            words[-1] += " " + w
        else:
            words.append(w)
        for ch in w:
            if ch in "'\"" and (not quote or ch == quote):
                quote = "" if quote else ch
    return words


def _packed(words: list[str], first_room: int, room: int, mark: str = "") -> list[str]:
    """`words` in lines (the first `first_room` wide, the others `room`); a line the words go
    on from ends with `mark`, room kept for it. A word wider than a line stands alone."""
    lines: list[str] = []
    line = ""
    for k, w in enumerate(words):
        avail = room if lines else first_room
        last = k == len(words) - 1
        if not line or len(line) + 1 + len(w) + (0 if last else len(mark)) <= avail:
            line = f"{line} {w}" if line else w
            continue
        lines.append(line + mark)
        line = w
    lines.append(line)
    return lines
