"""The keys of the live view: declared bindings (shown in the footer and the help screen).

Habits users bring along: htop's F1/h help and F10 quit, Ctrl-C quits (as in every monitor),
Ctrl-Z suspends to the shell, Esc closes a dialog or clears the filter; nvitop's `o` sort and
filters by GPU, user and pid (and by job, pod and container).
"""

from __future__ import annotations

from textual.binding import Binding

PANES = ("memory", "utilization", "mapping", "xid", "driver", "job")
TITLES = ("Memory", "Utilization", "Mapping", "Xid", "Driver", "Job")
SHORT_TITLES = ("Mem", "Util", "Map", "Xid", "Drv", "Job")
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
    _key("r", "refresh_now", "refresh", "sample now (paused or not)", show=False),
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
    _key(
        "f,backslash,f4",
        "filter",
        "filter",
        "filter by GPU, user, pid, job, pod, container or command text",
    ),
    _key(
        "g",
        "only_selected_gpu",
        "this GPU",
        "show only the selected GPU and its processes (again: all GPUs)",
        show=False,
    ),
    _key("escape", "clear_filter", "clear filter", "clear the filter", show=False),
    _key("o", "sort(1)", "sort", "sort the processes by the next column", show=False),
    _key(
        "O",
        "sort_reverse",
        "reverse sort",
        "reverse the process order",
        key_display="O",
        show=False,
    ),
    _key(
        "M",
        "sort_by('gpu_mem')",
        "sort by memory",
        "sort the processes by GPU memory",
        key_display="M",
        show=False,
    ),
    _key(
        "P",
        "sort_by('cpu')",
        "sort by CPU",
        "sort the processes by CPU",
        key_display="P",
        show=False,
    ),
    _key(
        "N",
        "sort_by('pid')",
        "sort by pid",
        "sort the processes by pid",
        key_display="N",
        show=False,
    ),
    _key(
        "s",
        "save_report",
        "report",
        "write the sanitized report (safe to share); show its path",
    ),
    _key(
        "S",
        "save",
        "snapshot",
        "write the snapshot and Xid history as JSON; show its path",
        key_display="S",
        show=False,
    ),
    _key(
        "p",
        "toggle_panel",
        "panel",
        "hide the bottleneck panel (under 100 columns: show all of it)",
        show=False,
    ),
    _key(
        "G",
        "toggle_sweep",
        "graph mode",
        "histories: sweep (cheap over SSH) or scroll",
        key_display="G",
        show=False,
    ),
    _key("question_mark,h,f1", "help", "help", "this help", key_display="?"),
    _key("ctrl+z", "suspend_process", "suspend", "suspend to the shell (fg resumes)", show=False),
    _key("q,f10", "quit", "quit", "quit (also F10, Ctrl-C, Ctrl-Q)"),
    _key(
        "ctrl+c",
        "interrupt",
        "quit now",
        "quit; watching a job this view started: stop it as a shell would (SIGINT, again "
        "SIGTERM, then SIGKILL)",
        show=False,
        priority=True,
        id="quit-ctrl-c",
    ),
]

# The process table's own keys (tui/process_table.py), active while it has the focus: htop's
# and nvitop's row cursor, horizontal scroll, details, signals and tree view
# (https://htop.dev/ and nvitop's README: "Keybindings for monitor mode").
PROCESS_BINDINGS = [
    Binding("home", "scroll_top", "first process", show=False, id="process-first"),
    Binding("end", "scroll_bottom", "last process", show=False, id="process-last"),
    Binding("enter", "select_cursor", "details", key_display="Enter", id="process-details"),
    _key(
        "T",
        "signal('SIGTERM')",
        "terminate",
        "send SIGTERM to the selected process (asks first)",
        key_display="T",
    ),
    _key(
        "K",
        "signal('SIGKILL')",
        "kill",
        "send SIGKILL to the selected process (asks first)",
        key_display="K",
    ),
    _key(
        "I",
        "signal('SIGINT')",
        "interrupt",
        "send SIGINT to the selected process (asks first)",
        key_display="I",
    ),
    _key(
        "m",
        "tag",
        "tag",
        "tag / untag the selected process, the cursor moves on (htop's and nvitop's Space, "
        "which here pauses); T, K and I then ask for every tagged process",
    ),
    _key("U", "untag_all", "untag all", "untag every process", show=False),
    _key(
        "t",
        "toggle_tree",
        "tree",
        "the GPU processes under their parents (again: a list)",
    ),  # fmt: skip
]

# What the help screen and README say of the process table's keys, in this order.
PROCESS_KEYS_HELP = (
    ("Up/Down PgUp/PgDn", "move the cursor over the GPU processes"),
    ("Home/End", "first / last process"),
    ("Left/Right", "scroll the command lines sideways"),
    (
        "Enter",
        "the selected process: command line, CUDA/NCCL/Slurm environment, threads, "
        "children, GPU memory history",
    ),  # fmt: skip
    ("T / K / I", "send SIGTERM / SIGKILL / SIGINT to the selected process (asks first)"),
    (
        "m / U",
        "tag the selected process (the cursor moves on) / untag all: T, K and I then ask for "
        "every tagged process at once (htop's and nvitop's Space, which here pauses)",
    ),
    ("t", "tree view: the GPU processes under their parents (again: a list)"),
)
