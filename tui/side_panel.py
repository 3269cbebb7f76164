"""The side panel: the current bottleneck in one word, its evidence, the checks, the alerts.

Three layouts: docked right in full (wide terminals, a third of the width); a strip of six
lines below the pane (under 100 columns; five on short terminals, three on tiny ones); the
strip expanded over the pane (`p` under 100 columns).

Over SSH the bytes written are the cost, and a median moving by 1 % is not news: the panel
repaints at once when the verdict, the alerts or the layout change, or when a figure moves
materially (5 points of a percentage, 10 % of anything else); a figure whose text changed
otherwise waits at most REFRESH_FIGURES_S (5 s), so at a 1 s interval what the panel shows is
never more than ~5 s behind the tick. Held figures are dated from the last tick that said the
same (a held figure the latest tick repeats word for word is current, not old); an age is shown
only when that is AGE_STEP_S (10 s) or more, so a figure is never stale unmarked and never
marked stale while it is current.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll

from gputop_diag.diagnose.lead import (
    THROTTLE_EXPLAINS,
    THROTTLE_KINDS,
    Lead,
    lead_of,
    next_step_of,
)
from gputop_diag.diagnose.render import confidence_text, shown_checks
from gputop_diag.diagnose.types import Alert, Diagnosis, Evidence
from gputop_diag.tui.panes.base import side_panel_width
from gputop_diag.widgets import DiffText

__all__ = [
    "THROTTLE_EXPLAINS",
    "THROTTLE_KINDS",
    "HeldFigures",
    "Lead",
    "SidePanel",
    "lead_of",
    "next_step_of",
    "render_full",
    "render_strip",
]

SEVERITY_MARK = {"critical": "!! ", "warning": "!  ", "info": "i  "}
REFRESH_FIGURES_S = 5.0  # a figure whose text changed, but not materially, waits at most this
AGE_STEP_S = 10.0  # held figures show their age in steps of this (a ticking age costs bytes)
MATERIAL_POINTS = 5.0  # a percentage that moved this much is news
MATERIAL_SHARE = 0.10  # any other figure: this share of its size
MAX_ALERTS = 6


def gpu_list(gpus: Sequence[int]) -> str:
    """`0-7`, `0,2,5-7`."""
    out: list[str] = []
    run: list[int] = []
    for g in sorted(gpus):
        if run and g == run[-1] + 1:
            run.append(g)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
        run = [g]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 2 else ",".join(map(str, run)))
    return ",".join(out)


def _scope(d: Diagnosis) -> str:
    parts = []
    if d.scope_gpus:
        parts.append(f"GPU{'s' if len(d.scope_gpus) > 1 else ''} {gpu_list(d.scope_gpus)}")
    if d.scope_job:
        parts.append(d.scope_job if d.scope_job.startswith("pid ") else f"job {d.scope_job}")
    return "  ".join(parts)


def seconds_to_verdict(d: Diagnosis, interval: float) -> float | None:
    """How long until there are enough samples for a verdict; None when time is not what is
    missing (no driver, every GPU lost)."""
    if d.primary != "insufficient_data":
        return None
    for e in d.evidence:
        if e.metric == "samples" and e.value is not None and e.threshold is not None:
            left = e.threshold - e.value
            if left > 0 and "samples so far" in e.text:
                return left * interval
    return None


def verdict_note(d: Diagnosis, interval: float) -> str:
    """`75% confident`, or why there is no figure: `no verdict yet: ~3 s to one`."""
    if d.has_confidence:
        return f"{d.confidence:.0%} confident"
    wait = seconds_to_verdict(d, interval)
    if wait is not None:
        return f"no verdict yet: ~{max(1, round(wait))} s to one"
    return confidence_text(d)


_SPAN = re.compile(r"(\d+) s\b")  # a time span a text states: `the last 4 s`, `median, 15 s`


def _spans_moved(a: str, b: str) -> bool:
    """Whether the spans two texts state differ by 2 s or more: a held `no kernels in the last
    4 s` beside `figures 10 s old` would say two things about the same moment."""
    sa, sb = _SPAN.findall(a), _SPAN.findall(b)
    if len(sa) != len(sb):
        return True
    return any(abs(int(x) - int(y)) >= 2 for x, y in zip(sa, sb, strict=True))


def material(a: Evidence, b: Evidence) -> bool:
    """Whether figure `b` differs from `a` enough to repaint a panel shown with `a`: its value
    moved materially, or the span its text states did."""
    if a.metric != b.metric or (a.value is None) != (b.value is None):
        return True
    if _spans_moved(a.text, b.text):
        return True
    if a.value is None or b.value is None:
        return a.text != b.text
    delta = abs(a.value - b.value)
    big = max(abs(a.value), abs(b.value))
    if a.unit == "%" and big > 1.5:
        return delta >= MATERIAL_POINTS
    return delta >= MATERIAL_SHARE * big and delta > 0


def figures_of(d: Diagnosis | None) -> tuple[Evidence, ...]:
    if d is None:
        return ()
    return (*d.evidence, *d.secondary_evidence, *(r.evidence for r in d.ruled_out))


_NUMBER = re.compile(r"\d+(\.\d+)?")


def _verdict_key(d: Diagnosis | None, interval: float) -> tuple | None:
    if d is None:
        return None
    return (
        d.primary,
        d.finding,
        d.candidate,
        d.secondary,
        round(d.confidence, 1),
        verdict_note(d, interval),
        tuple(a.text for a in d.faults),
        tuple(a.text for a in d.alerts),
        d.missing_evidence,
        d.scope_gpus,
        d.scope_job,
        tuple(_NUMBER.sub("#", c) for c in d.checks),  # a pid in a check is a held figure
        tuple(e.metric for e in figures_of(d)),
    )


def age_text(age_s: float) -> str:
    """`figures 10 s old` for held figures, "" for fresh ones."""
    if age_s < AGE_STEP_S:
        return ""
    return f"figures {int(age_s // AGE_STEP_S * AGE_STEP_S)} s old"


BREAK_AFTER = ",;=/|&:"  # where a word too long for a line may break (a command's options)


def _pieces(word: str, room: int) -> list[str]:
    """`word` in pieces of at most `room` cells, broken after punctuation where it can be
    (`--query-gpu=index,` / `utilization.gpu,`), mid-word only where nothing else fits."""
    out: list[str] = []
    while len(word) > room:
        cut = max((k + 1 for k, ch in enumerate(word[:room]) if ch in BREAK_AFTER), default=0)
        if cut < room // 3:
            cut = room
        out.append(word[:cut])
        word = word[cut:]
    out.append(word)
    return out


UNITS = frozenset({"%", "s", "ms", "min", "h", "W", "MHz", "GiB", "MiB", "GB/s", "°C", "cores"})
_GLUE = "\u00a0"  # holds a figure and its unit together while wrapping
# a quote that opens or closes a phrase (`'%n %G %t';`), not an apostrophe (`job's`,
# `pid 41200's`)
_QUOTE = re.compile(r"(?<![A-Za-z0-9])'|'(?![A-Za-z])")


def _glued(words: list[str], quotes: bool = False) -> list[str]:
    """`72 %` and `20.0 GiB` as one word each: a line never ends between a figure and its
    unit; with `quotes`, a quoted phrase (`'%n %G %t'`) is one word too."""
    out: list[str] = []
    open_quote = False
    for w in words:
        if out and open_quote:
            out[-1] += _GLUE + w
        elif out and w.rstrip(",.;:)") in UNITS and out[-1][-1:].isdigit():
            out[-1] += _GLUE + w
        else:
            out.append(w)
        if quotes and len(_QUOTE.findall(w)) % 2:
            open_quote = not open_quote
    return out


def wrap_words(text: str, first_room: int, room: int, copyable: bool = False) -> list[str]:
    """`text` in lines: the first `first_room` cells wide, the others `room`; broken at spaces
    (never between a figure and its unit), and a word longer than a line after its
    punctuation. `copyable`: a quoted phrase is never broken, and a command broken between
    its words ends the line with ` \\` so that it pastes as one command."""
    words = _glued(text.split(), quotes=copyable)
    marks = _command_marks(words) if copyable else [0] * len(words)
    return [line.replace(_GLUE, " ") for line in _wrap(words, first_room, room, marks)]


# The programs a next step tells the user to run: from one of these on, up to a word that ends
# with `;` or `,` or a word of prose, the words are one command.
COMMAND_WORDS = frozenset(
    {
        "nvidia-smi",
        "nsys",
        "ncu",
        "py-spy",
        "iostat",
        "cat",
        "ps",
        "squeue",
        "sinfo",
        "sprio",
        "sacct",
        "scontrol",
        "dcgmi",
        "gputop-diag",
        "journalctl",
        "sudo",
        "modprobe",
        "torchrun",
        "vllm",
        "python",
        "python3",
    }
)
_PROSE = frozenset(
    {"—", "then", "and", "while", "or", "to", "if", "after", "for", "on", "the", "with", "where"}
    | {"show", "shows", "compare", "see", "look", "in", "is", "are", "of", "a", "an"}
)
_ENV = re.compile(r"[A-Z][A-Z0-9_]*=\S")


def _command_marks(words: list[str]) -> list[int]:
    """For each word, the number of the command it belongs to (0: prose)."""
    marks: list[int] = []
    current = count = 0
    for w in words:
        bare = w.strip("`").split(_GLUE)[0]
        if current and (bare in _PROSE or bare.startswith("(")):
            current = 0
        elif not current and (bare in COMMAND_WORDS or _ENV.match(bare)):
            count += 1
            current = count
        marks.append(current)
        if w.endswith((";", ",", ":")) and "'" not in w[-2:]:
            current = 0
        elif w.endswith(".") and not w.endswith("..") and len(w) > 1:
            current = 0  # a sentence's end (`-n 50. Users see: …`): prose follows
    return marks


def _wrap(words: list[str], first_room: int, room: int, marks: list[int]) -> list[str]:
    lines: list[str] = []
    line = ""
    for k, word in enumerate(words):
        avail = first_room if not lines else room
        # a break after this word inside its command needs room for ` \`, unless the rest of
        # the command fits on this line
        rest = [w for j, w in enumerate(words[k:], k) if marks[j] == marks[k]] if marks[k] else []
        joined = len(rest) > 1 and len(line) + 1 + len(" ".join(rest)) > avail
        if line and len(line) + 1 + len(word) + 2 * joined <= avail:
            line += " " + word
            continue
        if line:
            if marks[k] and marks[k - 1] == marks[k]:
                line += " \\"
            lines.append(line)
            line = ""
            avail = room
        # a word that fits is never broken for the ` \` (the catalog leaves room for it)
        pieces = _pieces(word, max(1, avail if len(word) <= avail else avail - 2 * joined))
        for piece in pieces[:-1]:
            lines.append(piece)
        line = pieces[-1]
    if line or not lines:
        lines.append(line)
    return lines


def _wrapped(
    t: Text, first: str, item: str, width: int, style: str = "", indent: int | None = None
) -> None:
    """Append `item` after the prefix `first`, wrapped at spaces to `width` with a hanging
    indent (continuation lines start under the item's text, not under its bullet)."""
    indent = len(first) if indent is None else indent
    if not width:
        lines = [item]
    else:
        first_room, room = max(8, width - len(first)), max(8, width - indent)
        lines = wrap_words(item, first_room, room, copyable=True)
    for k, line in enumerate(lines):
        t.append(first if k == 0 else " " * indent, style=style)
        t.append(line, style=style)
        t.append("\n")


def _note(d: Diagnosis, lead: Lead | None, interval: float) -> str:
    if lead is not None and lead.alert.kind == "nvml":
        return "nothing to judge until NVML answers"  # waiting would not help
    return verdict_note(d, interval)


def fault_lines(faults: Sequence[Alert]) -> list[tuple[Alert, str]]:
    """Each fault's text; a later fault on a GPU an earlier one named is the same story told
    again (a lost GPU and its Xid 79): its name only, not its advice a second time."""
    out: list[tuple[Alert, str]] = []
    seen: set[int] = set()
    for a in faults:
        gpus = set(a.gpus) | ({a.gpu_index} if a.gpu_index is not None else set())
        if gpus and gpus <= seen:
            out.append((a, "also " + a.text.split(":", 1)[0]))
        else:
            out.append((a, a.text))
        seen |= gpus
    return out


def _steps(d: Diagnosis, lead: Lead | None) -> list[str]:
    """The next checks, the lead's own first."""
    first = [lead.next_step] if lead is not None and lead.next_step else []
    return first + [c for c in shown_checks(d) if not any(c.endswith(x) for x in first)]


def render_full(
    d: Diagnosis | None, width: int = 0, interval: float = 1.0, age_s: float = 0.0
) -> Text:
    """The whole panel: the lead cause when one outranks the class, the verdict, evidence,
    checks, alerts, and why the other classes lost; pre-wrapped to `width` (0: unwrapped) with
    hanging indents."""
    t = Text()
    t.append("BOTTLENECK\n", style="dim")
    if d is None:
        t.append("waiting for the first samples…\n")
        return t
    lead = lead_of(d)
    for _, text in fault_lines(d.faults):
        _wrapped(t, "FAULT  ", text, width, style="bold reverse")
    if lead is not None and lead.label != "FAULT":
        t.append(f" {lead.label} ", style="bold reverse")
        t.append("\n")
        _wrapped(t, "", lead.alert.text, width, style="bold")
    if lead is not None:
        t.append("\n")
        t.append("workload: ", style="dim")
    t.append(f" {d.label.upper()} ", style="bold reverse")
    t.append(f"  {_note(d, lead, interval)}\n")
    if d.finding:
        t.append(f"{d.finding.replace('_', '-')}\n", style="bold")
    if d.secondary:
        t.append(f"and also {d.secondary.replace('_', ' ').upper()}\n", style="bold")
    if d.candidate and d.candidate != d.primary:
        t.append(f"(turning to {d.candidate.replace('_', ' ')}?)\n", style="dim")
    if _scope(d):
        t.append(_scope(d) + "\n", style="dim")
    age = age_text(age_s)
    t.append(f"\nEVIDENCE{'  (' + age + ')' if age else ''}\n", style="dim")
    shown_ev = [e for e in d.evidence if lead is None or lead.alert.kind != "nvml"]
    for e in shown_ev[:3]:
        _wrapped(t, "• ", e.text, width)
    if not shown_ev:
        t.append("• none yet\n" if lead is None else "• none: see above\n")
    if d.missing_evidence:
        _wrapped(t, "", f"(not available: {'; '.join(d.missing_evidence)})", width, "dim")
    t.append("\nNEXT CHECKS\n", style="dim")
    for k, c in enumerate(_steps(d, lead)[:3], 1):
        _wrapped(t, f"{k}. ", c, width)
    alerts = [a for a in d.alerts if lead is None or a is not lead.alert]  # said above
    t.append("\nALERTS\n", style="dim")
    if not alerts:
        t.append("none\n" if lead is None else "none besides the above\n")
    for a in alerts[:MAX_ALERTS]:
        style = "bold" if a.severity == "critical" else ""
        _wrapped(t, SEVERITY_MARK.get(a.severity, "   "), a.text, width, style)
    if len(alerts) > MAX_ALERTS:
        t.append(f"(+{len(alerts) - MAX_ALERTS} more)\n", style="dim")
    if d.ruled_out and (lead is None or lead.alert.kind != "nvml"):  # nothing was judged
        t.append("\nWHY NOT\n", style="dim")
        for r in d.ruled_out:
            _wrapped(t, f"{r.cls.replace('_', ' ')}: ", r.evidence.text, width, indent=2)
    t.rstrip()
    return t


def render_strip(
    d: Diagnosis | None, interval: float = 1.0, age_s: float = 0.0, lines: int = 6
) -> Text:
    """`lines` lines, one fact each (clipped, never wrapped): the narrow layout."""
    t = Text()
    if d is None:
        t.append("BOTTLENECK: waiting for the first samples…")
        return t
    used = 0
    lead = lead_of(d)
    if d.faults:
        more = f" (+{len(d.faults) - 1} more, p)" if len(d.faults) > 1 else ""
        t.append(f"FAULT {d.faults[0].text}{more}\n", style="bold reverse")
        used += 1
    elif lead is not None:
        t.append(f"{lead.label} {lead.alert.text}\n", style="bold reverse")
        used += 1
    if lead is not None:
        t.append("workload: ", style="dim")
    t.append(f" {d.label.upper()} ", style="bold reverse")
    also = f" ({d.finding.replace('_', '-')})" if d.finding else ""
    also += f" + {d.secondary.replace('_', ' ')}" if d.secondary else ""
    age = age_text(age_s)
    t.append(f"{also}  {_note(d, lead, interval)}")
    t.append(f"  ({age})" if age else "", style="dim")
    t.append(f"  {_scope(d)}  ")
    t.append("p: all\n", style="dim")
    used += 1
    tail = 2 if lines > 3 else 1  # the next check, and the first alert when there is room
    evidence = [e for e in d.evidence if lead is None or lead.alert.kind != "nvml"]
    for e in evidence[: max(0 if lead is not None else 1, lines - used - tail)]:
        t.append(f"• {e.text}\n")
    # the most severe alert first; with room for one line only, a critical alert wins over the
    # class's next check (a broken driver chain matters more than how to tune the verdict); the
    # lead's own step comes before both
    alerts = sorted(
        (a for a in d.alerts if lead is None or a is not lead.alert),
        key=lambda a: a.severity != "critical",
    )
    critical = alerts[0] if alerts and alerts[0].severity == "critical" else None
    steps = _steps(d, lead)
    own = lead is not None and lead.next_step is not None
    if steps and (tail > 1 or critical is None or own):
        t.append(f"next: {steps[0]}" + ("\n" if tail > 1 else ""))
    if tail < 2 and own:
        t.rstrip()
        return t
    if tail < 2 and critical is None:
        t.rstrip()
        return t
    if alerts:
        a = alerts[0]
        more = f"  (+{len(alerts) - 1} more, p)" if len(alerts) > 1 else ""
        t.append(
            f"{SEVERITY_MARK.get(a.severity, '   ')}{a.text}{more}",
            style="bold" if a.severity == "critical" else "",
        )
    else:
        t.append("alerts: none" + (" besides the above" if lead else ""), style="dim")
    return t


class HeldFigures:
    """What the panel shows of a diagnosis, and how old: a repaint when what it says changes,
    a figure moves materially, or REFRESH_FIGURES_S have passed; else the figures painted last
    (bytes over SSH), dated from the last tick that said the same, word for word."""

    def __init__(self) -> None:
        self.key: tuple | None = None
        self.figures: tuple[Evidence, ...] = ()
        self.checks: tuple[str, ...] = ()
        self.painted_at = 0.0
        self.confirmed_at = 0.0  # when the latest tick last said what the panel shows

    def _stale(self, d: Diagnosis | None) -> bool:
        """Whether a figure moved materially since the panel was painted."""
        new = figures_of(d)
        if len(new) != len(self.figures):
            return True
        return any(material(a, b) for a, b in zip(self.figures, new, strict=True))

    def update(self, d: Diagnosis | None, key: tuple, now: float) -> tuple[Diagnosis | None, float]:
        """The diagnosis to draw for `d` at `now` (its figures held or fresh) and their age."""
        due = not 0 <= now - self.painted_at < REFRESH_FIGURES_S
        shown = d
        if key != self.key or due or self._stale(d):
            self.key = key
            self.figures = figures_of(d)
            self.checks = d.checks if d is not None else ()
            self.painted_at = self.confirmed_at = now
        elif d is not None:  # the same verdict: keep the figures on screen, with their age
            shown = replace(_with_figures(d, self.figures), checks=self.checks)
            if _same_texts(self.figures, figures_of(d)):
                self.confirmed_at = now  # what the panel shows is what this tick says
        return shown, now - self.confirmed_at


class SidePanel(VerticalScroll):
    """Repaints when what it says changes, or a figure moves materially; a figure's new text
    within REFRESH_FIGURES_S (`HeldFigures`)."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.strip = False
        self._held = HeldFigures()
        self._args: tuple | None = None

    def compose(self) -> ComposeResult:
        yield DiffText(render_full(None), id="side-text")

    def show(
        self,
        d: Diagnosis | None,
        strip: bool,
        now: float | None = None,
        interval: float = 1.0,
        lines: int = 6,
        plain: bool = False,
    ) -> None:
        """`lines`: how many lines the strip has (the narrow layout)."""
        self._args = (d, strip, now, interval, lines, plain)
        now = d.timestamp if now is None and d is not None else (now or 0.0)
        text = self.query_one("#side-text", DiffText)
        width = self.text_width()
        key = (_verdict_key(d, interval), strip, lines, width)
        shown, age = self._held.update(d, key, now)
        self.strip = strip
        self.set_class(strip, "-strip")
        text.wrap = not strip  # the strip clips each line; the full panel wraps
        if strip:
            text.update(render_strip(shown, interval, age, lines=lines))
        else:
            text.update(render_full(shown, width, interval, age))
        severities = {a.severity for a in (d.alerts if d else ())}
        self.set_class("critical" in severities, "-critical")
        self.set_class("warning" in severities and "critical" not in severities, "-warning")

    def text_width(self) -> int:
        """The width the text is wrapped to: inside the padding and the scrollbar's gutter
        (kept whether or not the text scrolls, app.tcss), so that Textual never wraps the
        pre-wrapped lines again; before the first layout, what the layout will give."""
        if self.size.width:
            return max(20, self.scrollable_content_region.width)
        app_width = self.app.size.width
        # border 1, padding 1 + 1, gutter 1 in the wide layout; padding 1 + 1 in the narrow one
        return max(20, side_panel_width(app_width) - 4 if app_width >= 100 else app_width - 2)

    def on_resize(self) -> None:
        if self._args is not None:
            self.show(*self._args)


def _same_texts(held: Sequence[Evidence], new: Sequence[Evidence]) -> bool:
    return len(held) == len(new) and all(a.text == b.text for a, b in zip(held, new, strict=True))


def _with_figures(d: Diagnosis, held: tuple[Evidence, ...]) -> Diagnosis:
    """`d` with the figures the panel shows (held since an earlier tick, same metrics)."""
    n, m = len(d.evidence), len(d.secondary_evidence)
    ruled = tuple(replace(r, evidence=e) for r, e in zip(d.ruled_out, held[n + m :], strict=True))
    return replace(d, evidence=held[:n], secondary_evidence=held[n : n + m], ruled_out=ruled)
