"""The help screen (`?`, `h`, F1): every key (read from the app's bindings), and what the view
means. Paragraphs wrap to the terminal's width; Esc, `?`, `h`, F1 or `q` close it."""

from __future__ import annotations

import textwrap

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen

from gputop_diag.tui.keys import PROCESS_KEYS_HELP
from gputop_diag.widgets import DiffText

ABOUT = """
The side panel names the current bottleneck (capacity, bandwidth, compute, input pipeline,
synchronization, communication, scheduler, or idle, balanced, insufficient data), the figures
that decided it, the checks to run next, the active alerts and why the other classes were
ruled out. It repaints when the verdict changes or a figure moves materially; figures held
since an earlier tick say how old they are. Under 100 columns it is a strip below the pane;
p shows all of it.

GPU "busy time" is NVML's utilization: the share of time any kernel ran, not SM use. The
histories use a fixed 0-100 % scale, so a line's height means the same on every row. They
sweep: each new sample overwrites the oldest at the marker on the ruler, so a second costs
a few cells over SSH; G makes them scroll instead (newest at the right).

Memory: GROWING means a steady rise after the job's ramp-up (the same computation as the
panel's memory-growth alert), not a job starting.

Saving: s writes the sanitized report of what the view holds (its last ten minutes: Markdown
and JSON, host and user names, UUIDs, bus ids and paths replaced, safe to paste into a public
issue); S writes the last snapshot as JSON with the Xid history, for local use. Both go to
--save-dir if given, else $XDG_STATE_HOME/gputop-diag or ~/.local/state/gputop-diag,
else /tmp; the toast says where. Under --sanitize the screen, the report and the snapshot all
show the same pseudonyms.

Processes: the selected GPU's first, then by the sort column (o: next column, O: reverse,
M memory, P CPU, N pid, or click a column's header). OWNER: the Slurm job, Kubernetes pod or
container a process runs for (job 424242, pod NS/NAME, ctr 8e1f0d2c), in the USER column's
place (the user where a process has none); where the pane has 160 columns (200 with the panel
hidden, p) a column of its own beside USER, and a process's pid in its own PID namespace
beside the host's (41216 (7)). Enter shows the whole owner. f (or \\, F4) filters: gpu:0,2
user:alice pid:4242 job:424242 (job.step for one step) pod:NAME (or NAMESPACE/NAME,
NAMESPACE/, a uid's start) ctr:ID (an id's start or a name) or words of the command line; g
shows only the selected GPU; Esc clears the filter. TIME is the time since the process
started (htop's layout: 12:05, 5h03:10,
3d04h); %MEM its resident memory as a share of the host's. A signal (T, K, I) is sent only
after y, and only to a process of your own (or any, as root); the confirmation says why not.
m tags a process (the cursor moves on; Space pauses here), U untags all: with processes
tagged, T, K and I ask once for all of them.
From 120 columns each GPU's line shows its temperature, power draw / limit and fan speed
(- for a board without fans), beside the memory figures (their short form beside the panel).
HOST: the host's CPU busy and iowait, memory and swap used, load over cores (30 rows and up).
"""

REPLAY_ABOUT = """
REPLAY: a recording (gputop-diag record) played at its recorded pace times the speed in the
header, through the same diagnosis as a live run; nothing is sampled. > and < change the speed
(0.25x to 16x), space pauses, . shows one more tick; at the end the last frame stays.
"""

CLOSE = "\nEsc, ?, h, F1 or q closes this help."


def paragraphs(text: str) -> str:
    """Source line breaks inside a paragraph removed, so the text wraps to the width."""
    return "\n\n".join(" ".join(p.split()) for p in text.strip().split("\n\n"))


def _action(action: str) -> tuple[str, tuple]:
    name, _, rest = action.partition("(")
    raw = [p.strip() for p in rest.rstrip(")").split(",") if p.strip()]
    params: list[object] = []
    for p in raw:
        if p.lstrip("-").isdigit():
            params.append(int(p))
        else:
            params.append(p.strip("'\""))
    return name, tuple(params)


def _key_line(t: Text, keys: str, does: str, key_width: int, width: int | None) -> None:
    """One key and what it does; a description longer than the line continues under itself
    (a hanging indent), never under the keys."""
    lead = 2 + key_width + 1
    t.append(f"  {keys:<{key_width}}", style="bold")
    if width is None or width - lead < 20:
        t.append(f" {does}\n")
        return
    lines = textwrap.wrap(does, width - lead, break_on_hyphens=False) or [""]
    t.append(f" {lines[0]}\n")
    for line in lines[1:]:
        t.append(" " * lead + line + "\n")


STARTED_JOB_KEYS_HELP = (
    ("q", "ask: y stops it and quits, d leaves it running and quits, n stays"),
    (
        "^c",
        "stop it as a shell would (SIGINT, again SIGTERM, then SIGKILL); the view quits "
        "with its exit status once it has ended",
    ),
    ("(hang-up)", "a closed terminal leaves it running; a line in its log says so"),
)


def keys_text(app, width: int | None = None) -> Text:
    """The help's text; `width`: the key lines wrapped to it with a hanging indent."""
    t = Text("gputop-diag: what limits this GPU workload right now\n\n", style="bold")
    t.append("Keys\n", style="bold")
    seen: set[str] = set()
    for b in app.BINDINGS:
        if not isinstance(b, Binding) or app.check_action(*_action(b.action)) is False:
            continue
        if b.action in seen:
            continue
        seen.add(b.action)
        keys = ", ".join(
            app.get_key_display(Binding(k, b.action, key_display=b.key_display if i == 0 else None))
            for i, k in enumerate(b.key.split(",")[:3])
        )
        _key_line(t, keys, b.tooltip or b.description, 14, width)
    quitter = getattr(app, "quitter", None)
    watch = getattr(quitter, "watch", None)
    if watch is not None and getattr(watch, "started", False):
        t.append("\nThe job this view started\n", style="bold")
        for keys, does in STARTED_JOB_KEYS_HELP:
            _key_line(t, keys, does, 14, width)
    t.append("\nThe process table (Memory pane)\n", style="bold")
    for keys, does in PROCESS_KEYS_HELP:
        _key_line(t, keys, does, 18, width)
    if getattr(app, "replay", None) is not None:
        t.append("  (a replay shows recorded data: no signal is sent, no environment is read)\n")
        t.append("\n" + paragraphs(REPLAY_ABOUT) + "\n")
    t.append("\n" + paragraphs(ABOUT) + "\n")
    t.append(CLOSE)
    return t


class HelpScreen(ModalScreen):
    BINDINGS = [Binding("escape,question_mark,q,h,f1", "dismiss", "close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield DiffText(keys_text(self.app), id="help-text")

    def on_mount(self) -> None:
        self.call_after_refresh(self._fill)

    def on_resize(self) -> None:
        self.call_after_refresh(self._fill)

    def _fill(self) -> None:
        """The key lines wrapped to the help's width, once it is laid out."""
        text = self.query_one("#help-text", DiffText)
        if text.size.width:
            text.update(keys_text(self.app, text.size.width))
