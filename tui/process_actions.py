"""What the process table's keys do beyond the table (`ProcessTable.Wanted`): Enter opens the
process's details, `T`/`K`/`I` ask before sending a signal (to the tagged processes at once,
where some are tagged). A small object the app holds: it reads the app's latest tick and the
Monitor's history (`monitor/view.py`), acts and reads a process's environment through the
app's control seam (`monitor/control.py`, `ProcessControl`: the reused-pid guard, who may
signal), and pushes the screens of `process_screens.py`. Under --sanitize every line drawn goes
through the session's sanitizer.
"""

from __future__ import annotations

import signal
import textwrap
from typing import Any

from rich.text import Text

from gputop_diag.model import GpuProcess, ProcessInfo
from gputop_diag.model.formats import count
from gputop_diag.monitor.control import DETAIL_ENV_PREFIXES
from gputop_diag.monitor.view import process_memory
from gputop_diag.tui.process_owner import owner_lines
from gputop_diag.tui.procs import command_text, elapsed_text, size_text
from gputop_diag.widgets import history

HISTORY_S = 600.0  # the GPU memory history shown: the Monitor keeps ten minutes
HISTORY_CELLS = 60
SIGNALS = {"SIGTERM": signal.SIGTERM, "SIGKILL": signal.SIGKILL, "SIGINT": signal.SIGINT}
REPLAY_SAYS = "a replay shows recorded data: there is no process here to signal"


def hanging(text: str, width: int, indent: int = 2, hang: int = 6) -> list[str]:
    """`text` wrapped to `width` with a hanging indent: the first line at `indent`, the rest
    at `hang`, so a continued line never reads as a new item. Words longer than a line are
    cut (a path), never lost."""
    return textwrap.wrap(
        text,
        width=max(hang + 8, width),
        initial_indent=" " * indent,
        subsequent_indent=" " * hang,
        break_long_words=True,
        break_on_hyphens=False,
        drop_whitespace=True,
    ) or [" " * indent]


def pid_of(key: str) -> int:
    """The pid of a row key: "gpu:pid" (a GPU process), ":pid" (a parent in the tree)."""
    return int(key.rsplit(":", 1)[1])


class ProcessActions:
    def __init__(self, app: Any) -> None:
        self.app = app
        # pid -> (its host info, its GPU rows, when) as last seen: the details of a process
        # that ended say what it was
        self._seen: dict[int, tuple[ProcessInfo | None, tuple[GpuProcess, ...], float]] = {}
        self._parents: set[int] = set()  # pids asked about from the tree's launcher rows

    def handle(
        self,
        what: str,
        key: str | None,
        signal_name: str | None = None,
        tagged: tuple[int, ...] = (),
    ) -> None:
        if key is None:
            return
        pid = pid_of(key)
        if key.startswith(":"):  # the tree view's launcher row: not a GPU process
            self._parents.add(pid)
        if what == "detail":
            from gputop_diag.tui.process_screens import ProcessDetailScreen  # when first asked

            self.app.push_screen(ProcessDetailScreen(lambda width: self.detail(pid, width)))
        elif what == "signal" and signal_name in SIGNALS:
            if tagged:
                self.ask_signal_tagged(tagged, signal_name)
            else:
                self.ask_signal(pid, signal_name)

    def _parent_alive(self, pid: int) -> bool:
        return self.app.control.running(pid)

    def _kids(self, pid: int) -> list[ProcessInfo]:
        """A launcher's GPU processes in the latest tick: they carry its name and user."""
        u = self.app.latest
        return [] if u is None else [p for p in u.snapshot.processes if p.ppid == pid]

    def _parent_of(self, pid: int) -> tuple[str, tuple[int, ...]]:
        """A launcher's name and its GPU processes, from the latest tick."""
        kids = self._kids(pid)
        name = next((p.parent_name for p in kids if p.parent_name), None) or "?"
        return name, tuple(sorted({p.pid for p in kids}))

    def _parent_user(self, pid: int) -> str:
        return next((p.parent_user for p in self._kids(pid) if p.parent_user), None) or "?"

    # -- text ---------------------------------------------------------------------------------
    def _shown(self, text: str) -> str:
        """`text` as drawn: under --sanitize through the session's sanitizer."""
        s = self.app.sanitizer
        return text if s is None else (s.text(text) or "")

    def _look(self, pid: int) -> tuple[ProcessInfo | None, tuple[GpuProcess, ...], float, bool]:
        """(host info, GPU rows, when seen, still running) of `pid` in the latest tick, else as
        last seen."""
        u = self.app.latest
        if u is not None:
            snap = u.snapshot
            gpus = tuple(p for p in snap.gpu_processes if p.pid == pid)
            info = snap.process(pid)
            if gpus or info is not None:
                self._seen[pid] = (info, gpus, snap.timestamp)
                return info, gpus, snap.timestamp, True
        info, gpus, at = self._seen.get(pid, (None, (), 0.0))
        return info, gpus, at, False

    def detail(self, pid: int, width: int) -> Text:
        if pid in self._parents:
            return self._parent_detail(pid, width)
        info, gpus, at, running = self._look(pid)
        u = self.app.latest
        now = u.snapshot.timestamp if u is not None else at
        t = Text()

        def head(title: str) -> None:
            t.append(f"\n{self._shown(title)}\n", style="bold")

        def line(text: str, indent: int = 2, hang: int = 6) -> None:
            for part in hanging(self._shown(text), width, indent, hang):
                t.append(part + "\n")

        name = (info.name if info else None) or "?"
        user = (info.user if info else None) or "?"
        t.append(self._shown(f"PROCESS {pid}  {name}  user {user}") + "\n", style="bold")
        if not running:
            ago = f" {now - at:.0f} s ago" if at else ""
            t.append(f"ENDED: no longer running (last seen{ago})\n", style="bold reverse")
        facts = [f"GPU {p.gpu_index}: {size_text(p.used_memory_bytes)}" for p in gpus]
        if info is not None:
            if info.cpu_pct is not None:
                facts.append(f"CPU {info.cpu_pct:.0f}%")
            if info.rss_bytes is not None:
                facts.append(f"RSS {size_text(info.rss_bytes)}")
            if info.start_time is not None:
                facts.append(f"running {elapsed_text(at - info.start_time)}")
            if info.ppid:
                facts.append(f"parent {info.ppid} {info.parent_name or ''}".rstrip())
        line("  ".join(facts) or "no figures", 0, 4)
        head("OWNER")
        for text in owner_lines(info.owner if info else None, pid):
            line(text)
        head("COMMAND")
        cmdline = info.cmdline if info else None
        if cmdline:
            line(" ".join(cmdline))
        else:
            line(command_text(None, info.name if info else None) + "  (command line not readable)")
        head("ENVIRONMENT (" + ", ".join(p + "*" for p in DETAIL_ENV_PREFIXES) + ")")
        for text in self._environment(pid, running):
            line(text)
        head("THREADS")
        if info is not None and info.num_threads is not None:
            line(f"{info.num_threads} threads" + ("; busiest:" if info.busiest_threads else ""))
            for th in info.busiest_threads:  # a line each: a name with spaces stays by its tid
                line(f"  {th.cpu_pct or 0:>3.0f}%  tid {th.tid}  {th.name}")
        else:
            line("not readable")
        head(f"CHILDREN ({len(info.children) if info else 0})")
        for c in (info.children if info else ())[:32]:
            cpu = "" if c.cpu_pct is None else f"  {c.cpu_pct:.0f}% CPU"
            line(f"{c.pid}  {c.name}{cpu}")
        if info is None or not info.children:
            line("none")
        head(f"GPU MEMORY (last {HISTORY_S / 60:.0f} min, a cell a tick)")
        values = self._memory_history(pid)
        known = [v for v in values if v is not None]
        if known:
            top = max(known)
            glyphs = history(values, min(HISTORY_CELLS, width - 4), self.app.plain, top)
            t.append(f"  {glyphs}\n")
            line(f"now {size_text(values[-1])}  min {size_text(min(known))}  max {size_text(top)}")
        else:
            line("no GPU memory recorded for this pid")
        t.append("\nEsc closes\n")
        return t

    def _parent_detail(self, pid: int, width: int) -> Text:
        """A launcher of GPU processes (torchrun, srun, a shell): it holds no GPU memory and
        is not sampled; its environment is read, its GPU processes listed."""
        name, kids = self._parent_of(pid)
        running = self._parent_alive(pid)
        t = Text()
        user = self._parent_user(pid)
        t.append(self._shown(f"PROCESS {pid}  {name}  user {user}") + "\n", style="bold")
        t.append("the parent of GPU processes; it uses no GPU itself\n")
        if not running:
            t.append("ENDED: no longer running\n", style="bold reverse")
        t.append(
            self._shown("\nENVIRONMENT (" + ", ".join(p + "*" for p in DETAIL_ENV_PREFIXES) + ")")
            + "\n",
            style="bold",
        )
        for text in self._environment(pid, running):
            for part in hanging(self._shown(text), width):
                t.append(part + "\n")
        t.append(f"\nGPU PROCESSES UNDER IT ({len(kids)})\n", style="bold")
        for part in hanging(" ".join(map(str, kids)) or "none", width):
            t.append(part + "\n")
        t.append("\nEsc closes\n")
        return t

    def _environment(self, pid: int, running: bool) -> list[str]:
        control = self.app.control
        if control.replaying:
            return ["not recorded: a replay shows recorded data"]
        if not running:
            return ["not readable: the process has ended"]
        found, why = control.environment(pid)
        if why is not None:
            return [f"not readable: {why}"]
        return [f"{k}={v}" for k, v in found] or ["none of these is set"]

    def _memory_history(self, pid: int) -> list[float | None]:
        return process_memory(self.app.monitor, pid, HISTORY_S)

    # -- signals ------------------------------------------------------------------------------
    def _target(self, pid: int) -> tuple[str, float | None, bool]:
        """(its command, when it started, still running) of a process to signal."""
        if pid in self._parents:
            control = self.app.control
            command = self._parent_of(pid)[0]
            running = self._parent_alive(pid) or control.replaying
            # gone or unreadable: None, and said when sending
            return command, control.started(pid), running
        info, _, _, running = self._look(pid)
        command = command_text(info.cmdline if info else None, info.name if info else None)
        return command, (info.start_time if info is not None else None), running

    def ask_signal(self, pid: int, name: str) -> None:
        # `started`: which process the user chose, should its pid be reused
        command, started, running = self._target(pid)
        what = self._shown(f"pid {pid} ({command})")
        control = self.app.control
        why = (
            REPLAY_SAYS
            if control.replaying
            else (f"pid {pid} has ended" if not running else control.may_signal(pid))
        )
        t = Text()
        if why is None:
            t.append(f"Send {name} to {what}?\n\n", style="bold")
            t.append("y sends it; any other key cancels")
        else:
            t.append(f"{name} cannot be sent to {what}:\n", style="bold")
            t.append(self._shown(why) + "\n\nnothing was sent; any key closes")

        def answered(send: bool | None) -> None:
            if control.replaying or why is not None:
                return
            if not send:
                self.app.notify(f"{name} not sent", timeout=2)
                return
            _, said = control.send_signal(pid, int(SIGNALS[name]), started)
            self.app.notify(self._shown(said), timeout=4)

        from gputop_diag.tui.process_screens import SignalScreen  # loaded when first asked for

        self.app.push_screen(SignalScreen(t, why is None), answered)

    def ask_signal_tagged(self, pids: tuple[int, ...], name: str) -> None:
        """One question for every tagged process: those that may be signalled listed with
        their commands, the others with why not; `y` sends to the first ones."""
        control = self.app.control
        targets, refused = [], []
        for pid in pids:
            command, started, running = self._target(pid)
            why = (
                REPLAY_SAYS
                if control.replaying
                else (f"pid {pid} has ended" if not running else control.may_signal(pid))
            )
            line = self._shown(f"pid {pid} ({command})")
            if why is None:
                targets.append((pid, started, line))
            else:
                why = why.removeprefix(f"pid {pid} ")  # the line names it already
                refused.append(f"{line}: {self._shown(why)}")
        t = Text()
        if targets:
            tagged = count(len(targets), "tagged process", "tagged processes")
            t.append(f"Send {name} to {tagged}?\n", style="bold")
            for _, _, line in targets:
                t.append(f"  {line}\n")
        if refused:
            t.append(f"\n{name} cannot be sent to {len(refused)} of them:\n", style="bold")
            for line in refused:
                t.append(f"  {line}\n")
        ask = "y sends it; any other key cancels"
        t.append("\n" + (ask if targets else "nothing was sent; any key closes"))

        def answered(send: bool | None) -> None:
            if control.replaying or not targets:
                return
            if not send:
                self.app.notify(f"{name} not sent", timeout=2)
                return
            sig = int(SIGNALS[name])
            said = [control.send_signal(pid, sig, started) for pid, started, _ in targets]
            sent = sum(1 for ok, _ in said if ok)
            failed = [self._shown(text) for ok, text in said if not ok]
            tagged = count(len(targets), "tagged process", "tagged processes")
            summary = f"sent {name} to {sent} of {tagged}"
            self.app.notify("; ".join([summary, *failed]), timeout=6 if failed else 4)

        from gputop_diag.tui.process_screens import SignalScreen

        self.app.push_screen(SignalScreen(t, bool(targets)), answered)
