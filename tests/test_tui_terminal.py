"""The live view follows the terminal: ASCII only where Unicode cannot be shown (`TERM=dumb` or
`linux`, a locale that is not UTF-8, an output stream that does not encode it), no colour at all
under `NO_COLOR` (https://no-color.org), bold and reverse video kept.

The screen is read after the first frame, as it changes: every pane, the help, the filter, a
process's details, a signal's question and its toast, a saved report's toast, a resize to 40x12
in between. The real program is run on a terminal of its own and every byte it writes there is
read.
"""

from __future__ import annotations

import io
import re
import types

import pytest
from rich.console import Console
from test_tui_support import LAUNCH, FedApp, PtyChild, screen_lines, screen_text, settled

from gputop_diag.tui import terminal
from gputop_diag.tui.terminal import locale_charset_utf8, unicode_shown

UTF8 = {"TERM": "xterm-256color", "LANG": "en_US.UTF-8"}


@pytest.mark.parametrize(
    ("environ", "encoding", "shown"),
    [
        (UTF8, "utf-8", True),
        ({**UTF8, "TERM": "dumb"}, "utf-8", False),
        ({**UTF8, "TERM": "linux"}, "utf-8", False),  # the kernel's console font
        ({**UTF8, "LANG": "C"}, "utf-8", False),
        ({**UTF8, "LANG": "POSIX"}, "utf-8", False),
        ({**UTF8, "LANG": "en_US.ISO-8859-1"}, "utf-8", False),
        ({**UTF8, "LC_ALL": "C"}, "utf-8", False),  # LC_ALL before LANG
        ({**UTF8, "LANG": "C", "LC_CTYPE": "de_DE.utf8"}, "utf-8", True),  # LC_CTYPE before LANG
        ({**UTF8, "LC_ALL": "", "LANG": "C.UTF-8"}, "utf-8", True),  # an empty one is not set
        ({**UTF8, "LANG": "de_DE.UTF-8@euro"}, "UTF-8", True),
        ({"TERM": "xterm"}, "utf-8", False),  # no locale at all: the C locale
        (UTF8, "ascii", False),  # PYTHONIOENCODING=ascii
        (UTF8, "ISO-8859-1", False),
        (UTF8, None, False),
    ],
)
def test_unicode_is_drawn_only_where_the_terminal_shows_it(environ, encoding, shown):
    assert unicode_shown(environ, encoding) is shown
    if encoding == "utf-8" and environ.get("TERM") not in ("dumb", "linux"):
        assert locale_charset_utf8(environ) is shown  # the locale alone decided


def test_the_c_locale_python_replaced_with_c_utf8_is_still_the_c_locale(monkeypatch):
    # LANG=C: Python sets LC_CTYPE=C.UTF-8 in its own environment and turns its UTF-8 mode on
    # (PEP 538, PEP 540); what the user's terminal was told is still C
    coerced = {"TERM": "xterm", "LANG": "C", "LC_CTYPE": "C.UTF-8"}
    assert unicode_shown(coerced, "utf-8") is True  # the names alone would say UTF-8
    fake = types.SimpleNamespace(flags=types.SimpleNamespace(utf8_mode=1), _xoptions={})
    monkeypatch.setattr(terminal, "sys", fake)
    assert terminal.python_found_c_locale(coerced) is True
    assert terminal.ascii_terminal(coerced, io.StringIO()) is True
    assert terminal.python_found_c_locale({**coerced, "PYTHONUTF8": "1"}) is False  # asked for
    fake.flags.utf8_mode = 0  # LANG=C with LC_CTYPE=C.UTF-8 set by the user
    assert terminal.python_found_c_locale(coerced) is False


# -- the live view, after the first frame --------------------------------------------------------
# every screen a person reaches from the main one, with ticks between the keys
WALK = (
    ("1",),
    ("2",),
    ("3",),
    ("4",),
    ("5",),
    ("question_mark",),
    ("escape",),
    ("f",),
    ("escape",),
    ("1", "enter"),  # a process's details
    ("escape",),
    ("T",),  # a signal's question
    ("y",),  # ... and its toast
    ("s",),  # the saved report's toast
)
SGR = re.compile(r"\x1b\[([0-9;]*)m")


def colour_codes(ansi: str) -> set[str]:
    """The colour parameters of every SGR escape in `ansi`: 30-37, 40-47, 90-97, 100-107 and
    38/48 with their 5;N or 2;R;G;B (39 and 49, the terminal's own colours, are none)."""
    found = set()
    for params in SGR.findall(ansi):
        p = [int(x or 0) for x in params.split(";")]
        i = 0
        while i < len(p):
            if p[i] in (38, 48):
                n = 3 if p[i + 1] == 5 else 5
                found.add(";".join(map(str, p[i : i + n])))
                i += n
                continue
            if 30 <= p[i] <= 37 or 40 <= p[i] <= 47 or 90 <= p[i] <= 97 or 100 <= p[i] <= 107:
                found.add(str(p[i]))
            i += 1
    return found


def screen_ansi(app) -> str:
    """The screen as escape sequences, the colours as the terminal would get them."""
    console = Console(
        width=app.size.width,
        height=app.size.height,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        legacy_windows=False,
    )
    console.print(app.screen._compositor.render_update(full=True))
    return console.file.getvalue()


async def test_ascii_only_and_no_colour_on_every_screen_as_it_changes(monkeypatch, tmp_path):
    """ASCII only (as `run_app` asks for it on such a terminal) and NO_COLOR, on every screen
    of `WALK` at 80x24, through a resize to 40x12 and back, and with a banner."""
    from gputop_diag.tui import CollectorFailed

    monkeypatch.setenv("NO_COLOR", "1")
    app = FedApp("xid-app", ascii_only=True, save_dir=str(tmp_path))
    async with app.run_test(size=(80, 24), notifications=True) as pilot:

        def check(step) -> None:
            odd = {ch for ch in screen_text(app) if not ch.isascii()}
            assert not odd, (step, sorted(odd))
            ansi = screen_ansi(app)
            assert not colour_codes(ansi), (step, sorted(colour_codes(ansi))[:5])
            assert re.search(r"\x1b\[(?:[0-9;]*;)?1[;m]", ansi), step  # bold stays

        app.feed(37)  # Xid 13 on GPU 5 at 36 s
        await pilot.pause()
        strip = screen_lines(app)[-6:-1]  # the panel's strip: its long lines are cut
        assert any(line.rstrip().endswith("~") for line in strip), strip  # "~", not "."
        for keys in WALK:
            await pilot.press(*keys)
            app.feed(1)
            await pilot.pause()
            check(keys)
        assert await settled(pilot, lambda: "report written to" in screen_text(app), tries=100)
        check("the saved report's toast")
        for size in ((40, 12), (80, 24)):
            await pilot.resize_terminal(*size)
            app.feed(2)
            await pilot.pause()
            check(size)
        app.post_message(CollectorFailed("sampler", "sampling failed: OSError: boom", "retry"))
        await pilot.pause()
        assert "boom" in screen_text(app)
        check("a banner")
        await pilot.press("4")  # the Xid table's cursor row, without its colour: reverse video
        await pilot.pause()
        table = app.query_one("#xid-table")
        assert table.row_count
        y = table.cursor_row + 1 - int(table.scroll_y)
        cells = [seg for seg in table.render_line(y) if seg.text.strip()]
        assert cells and all(seg.style and seg.style.reverse for seg in cells)
        assert app.interval == 1.0  # ASCII only is not --low-bandwidth: the pace stays


# -- the real program on a terminal of its own ---------------------------------------------------
def run_on_a_terminal(env: dict[str, str | None]) -> bytes:
    """Every byte `gputop-diag --demo compute-bound` writes to its terminal, from its start to
    its exit: the Memory pane, the Utilization pane's histories, the help, then q."""
    import os
    import time

    # The launcher is Python too: under LANG=C it would set LC_CTYPE=C.UTF-8 for itself and
    # pass it on (PEP 538). It is told not to, and the program starts with the locale as given.
    launch = "import os; os.environ.pop('PYTHONCOERCECLOCALE'); " + LAUNCH
    env = {**env, "PYTHONCOERCECLOCALE": "0"}
    args = ("-m", "gputop_diag", "--interval", "0.25", "--demo", "compute-bound")
    child = PtyChild(*args, launch=launch, env=env)
    try:
        seen = bytearray(child.read_until(b"COMPUTE"))
        assert b"COMPUTE" in seen
        for key, needle in ((b"2", b"GPU busy"), (b"?", b"quit")):
            os.write(child.master, key)
            seen += child.read_until(needle, timeout=10)
        time.sleep(0.5)  # a few ticks of the histories
        os.write(child.master, b"\x1b")  # the help closes
        time.sleep(0.3)
        os.write(child.master, b"q")
        assert child.drain_until_exit(15, into=seen) == 0
        return bytes(seen)
    finally:
        child.close()


def test_the_program_writes_ascii_only_under_lang_c():
    """LANG=C (TERM=dumb and the rest are decided alike: the first test above)."""
    written = run_on_a_terminal({"LANG": "C", "LC_ALL": None, "LC_CTYPE": None, "NO_COLOR": None})
    assert b"GPU0" in written and b"busy" in written
    assert written.isascii(), sorted({chr(b) for b in written if b > 127})[:10]
    assert written.count(b"\x1b[38;") + written.count(b";38;") > 0  # colour, as asked


def test_the_program_writes_no_colour_under_no_color():
    env = {"NO_COLOR": "1", "LANG": "C.UTF-8", "LC_ALL": None, "LC_CTYPE": None}
    written = run_on_a_terminal(env)
    text = written.decode("utf-8", "replace")
    assert "GPU0" in text and "▶" in text  # Unicode, as the locale says
    assert not colour_codes(text), sorted(colour_codes(text))[:5]
    assert re.search(r"\x1b\[[0-9;]*\b7\b[0-9;]*m", text)  # reverse video stays
