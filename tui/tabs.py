"""The pane names under the header, the current one marked: which pane am I on, and which
key brings up another. The active filter shows at the right, so a filtered view never
passes for the whole machine."""

from __future__ import annotations

from gputop_diag.widgets import DiffLine


def tab_runs(
    titles: list[tuple[int, str, str]],
    current: int,
    width: int,
    filter_text: str = "",
) -> list[tuple[str, str]]:
    """`titles`: (key number, long title, short title). Long titles when they fit, else short
    ones; the current tab is marked by brackets (readable without colour) and its style."""

    def build(short: bool) -> list[tuple[str, str]]:
        runs: list[tuple[str, str]] = []
        for k, long, abbrev in titles:
            title = abbrev if short else long
            # The current tab's brackets take the place of spaces: nothing moves on a switch.
            if k == current:
                runs.append((f"[{k} {title}]", "tabs--current"))
            else:
                runs.append((f" {k} {title} ", "tabs--tab"))
        return [(" ", ""), *runs]

    runs = build(short=False)
    if sum(len(t) for t, _ in runs) > width:
        runs = build(short=True)
    used = sum(len(t) for t, _ in runs)
    if filter_text:
        text = f"  filter: {filter_text} (esc clears)"
        if used + len(text) > width:
            text = f"  filter: {filter_text}"
        if used + len(text) > width:
            text = "  FILTERED"
        if used + len(text) <= width:
            runs.append((text, "tabs--filter"))
    return runs


class TabStrip(DiffLine):
    COMPONENT_CLASSES = {"tabs--current", "tabs--tab", "tabs--filter"}
    DEFAULT_CSS = """
    TabStrip { height: 1; background: $panel; }
    TabStrip > .tabs--current { text-style: bold reverse; }
    TabStrip > .tabs--tab { color: $text-muted; }
    TabStrip > .tabs--filter { text-style: bold; color: $warning; }
    """

    def show(
        self,
        titles: list[tuple[int, str, str]],
        current: int,
        filter_text: str = "",
    ) -> None:
        self._args = (titles, current, filter_text)
        width = self.size.width or self.app.size.width
        self.set_runs(tab_runs(titles, current, width, filter_text))

    def on_resize(self) -> None:
        args = getattr(self, "_args", None)
        if args is not None:
            self.show(*args)
