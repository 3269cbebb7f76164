"""The keys of the live view: declared bindings (shown in the footer and the `?` screen)."""

from __future__ import annotations

from textual.binding import Binding

PANES = ("memory", "utilization", "mapping", "xid", "driver", "job")
TITLES = ("Memory", "Utilization", "Mapping", "Xid", "Driver", "Job")
JOB = PANES.index("job")

PANES_GROUP = Binding.Group("panes", compact=True)
GPU_GROUP = Binding.Group("GPU", compact=True)


def _key(key: str, action: str, description: str, tooltip: str, **kw) -> Binding:
    """A binding with an id (so `App.set_keymap` can remap it) named after its action."""
    kw.setdefault("id", description.replace(" ", "-"))
    return Binding(key, action, description, tooltip=tooltip, **kw)


BINDINGS = [
    *(
        _key(
            str(k + 1),
            f"pane({k})",
            TITLES[k],
            f"show the {TITLES[k]} pane",
            group=PANES_GROUP,
            id=f"pane-{PANES[k]}",
        )
        for k in range(len(PANES))
    ),
    _key("tab", "cycle(1)", "next pane", "next pane", show=False, priority=True),
    _key("shift+tab", "cycle(-1)", "previous pane", "previous pane", show=False, priority=True),
    _key(
        "left_square_bracket",
        "gpu(-1)",
        "previous GPU",
        "select the previous GPU",
        key_display="[",
        group=GPU_GROUP,
    ),
    _key(
        "right_square_bracket",
        "gpu(1)",
        "next GPU",
        "select the next GPU",
        key_display="]",
        group=GPU_GROUP,
    ),
    _key("space", "pause", "pause", "pause or resume sampling (a replay: playback)"),
    _key("r", "refresh_now", "refresh", "sample now (paused or not)"),
    _key(
        "plus,equals_sign",
        "interval(1)",
        "slower",
        "sample less often (a longer interval)",
        key_display="+",
        show=False,
    ),
    _key(
        "minus",
        "interval(-1)",
        "faster",
        "sample more often (a shorter interval)",
        key_display="-",
        show=False,
    ),
    _key(
        "greater_than_sign",
        "replay_speed(1)",
        "faster",
        "replay faster (2x each press, up to 16x)",
        key_display=">",
        id="replay-faster",
    ),
    _key(
        "less_than_sign",
        "replay_speed(-1)",
        "slower",
        "replay slower (half each press, down to 0.25x)",
        key_display="<",
        id="replay-slower",
    ),
    _key(
        "full_stop",
        "replay_step",
        "step",
        "replay: pause and show the next recorded tick",
        key_display=".",
        id="replay-step",
    ),
    _key("s", "save", "save", "write the last snapshot as JSON and show its path"),
    _key(
        "p",
        "toggle_panel",
        "panel",
        "hide the bottleneck panel (under 100 columns: show all of it)",
        show=False,
    ),
    _key("question_mark", "help", "help", "this help", key_display="?"),
    _key("q", "quit", "quit", "quit"),
]
