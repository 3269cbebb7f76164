"""The key bar at the foot of the screen: the active bindings as one widget.

Textual's `Footer` builds one widget per key and rebuilds them whenever the bindings change (each
pane switch, each focus change): about twenty widgets mounted and styled per switch, a third of
the time a pane switch took. This bar draws the same keys, styled by the same theme variables, as
one line of text, and keeps the keys' columns so a click still runs the key's action.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby

from rich.text import Text
from textual import events
from textual.app import App
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget


@dataclass(frozen=True)
class _Key:
    shown: str  # how the key is drawn ("^c", "space", ...)
    description: str
    enabled: bool
    action: str  # what a click runs, in the namespace of the node that binds it
    node: object = field(compare=False)


class KeyBar(Widget, can_focus=False):
    """The keys of the focused widget and its ancestors, as `Footer` lists them (bindings with
    `show`, one per action), on one line; keys that do not fit whole are left out, from the
    end, except those of the actions in `keep` (help and quit: the way to learn the keys and
    the way out stay on the narrowest bar, a replay's extra keys included)."""

    ALLOW_SELECT = False
    COMPONENT_CLASSES = {"keybar--key", "keybar--description"}
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        .keybar--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        .keybar--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
    }
    """

    def __init__(self, *, id: str | None = None, keep: tuple[str, ...] = ("help", "quit")) -> None:
        super().__init__(id=id)
        self.keep = keep
        self._keys: tuple[_Key, ...] = ()
        self._columns: list[tuple[int, int, _Key]] = []  # (first, end, key) as last drawn

    @property
    def keys_shown(self) -> tuple[str, ...]:
        """The keys as drawn, in order (for a reader of the screen: what `Footer` listed)."""
        return tuple(k.shown for k in self._keys)

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def _bindings_changed(self, screen: Screen) -> None:
        if screen is not self.screen:
            return
        keys: list[_Key] = []
        actions: set[str] = set()
        shown: list[tuple[object, Binding, bool]] = []
        for node, b, enabled, _tooltip in screen.active_bindings.values():
            if b.show and b.action not in actions:  # one entry per action, as `Footer` does
                actions.add(b.action)
                shown.append((node, b, enabled))
        # The app's and the screen's keys first (help and quit stay on a narrow bar), then the
        # focused widget's (the process table's Enter, T/K/I, t where there is room).
        shown.sort(key=lambda x: not isinstance(x[0], (App, Screen)))
        # As `Footer` draws them: a run of bindings in one group is one entry, its keys side by
        # side ("12345 panes"), the first of them what a click runs.
        for group, run in groupby(shown, key=lambda x: x[1].group):
            run = list(run)
            if group is not None and len(run) > 1:
                joiner = "" if group.compact else " "
                drawn = joiner.join(self.app.get_key_display(b) for _, b, _ in run)
                node, first, enabled = run[0]
                keys.append(_Key(drawn, group.description, enabled, first.action, node))
                continue
            for node, b, enabled in run:
                drawn = self.app.get_key_display(b)
                keys.append(_Key(drawn, b.description, enabled, b.action, node))
        if tuple(keys) != self._keys:
            self._keys = tuple(keys)
            self.refresh()

    def render(self) -> Text:
        key_style = self.get_component_rich_style("keybar--key")
        text_style = self.get_component_rich_style("keybar--description")
        parts = []
        for k in self._keys:
            part = Text.assemble((f" {k.shown} ", key_style), (f"{k.description} ", text_style))
            if not k.enabled:
                part.stylize("dim")
            parts.append(part)
        drawn = self._fitting(parts, self.size.width)
        line = Text(no_wrap=True, end="")
        self._columns = []
        for k, part in zip(self._keys, parts, strict=True):
            if k in drawn:
                first = line.cell_len
                line.append_text(part)
                self._columns.append((first, line.cell_len, k))
        return line

    def _fitting(self, parts: list[Text], width: int) -> set[_Key]:
        """The keys drawn: the kept ones, then the others in order while they fit whole."""
        kept = {k for k in self._keys if k.action in self.keep}
        used = sum(p.cell_len for k, p in zip(self._keys, parts, strict=True) if k in kept)
        if used > width:
            kept, used = set(), 0
        for k, part in zip(self._keys, parts, strict=True):
            if k in kept:
                continue
            if used + part.cell_len > width:
                break  # a key is shown whole or not at all
            kept.add(k)
            used += part.cell_len
        return kept

    async def on_click(self, event: events.Click) -> None:
        for first, end, k in self._columns:
            if first <= event.x < end:
                if k.enabled:
                    await self.app.run_action(k.action, k.node)
                else:
                    self.app.bell()
                return
