"""What the user's terminal can show, read once when the live view starts: Unicode or ASCII
only, colour or none.

- ASCII only where the terminal cannot be trusted with Unicode: `TERM=dumb` (Emacs' shell, a
  pipe into a log) or `TERM=linux` (the kernel's console: its font holds 256 or 512 glyphs, no
  block elements), a locale whose character set is not UTF-8, and an output stream that does
  not encode UTF-8 (`PYTHONIOENCODING=ascii`). The locale is the first of `LC_ALL`, `LC_CTYPE`
  and `LANG` that is set, as POSIX orders them and tmux reads them
  (https://pubs.opengroup.org/onlinepubs/9699919799/basedefs/V1_chap08.html,
  https://man.openbsd.org/tmux.1#u): none set is the C locale, ASCII. Python itself changes
  what it finds: under the C locale it sets `LC_CTYPE=C.UTF-8` in its own environment
  (https://peps.python.org/pep-0538/) and turns on its UTF-8 mode
  (https://docs.python.org/3/library/os.html#python-utf-8-mode), so a UTF-8 mode nobody asked
  for (`PYTHONUTF8`, `-X utf8`) says the user's locale was C.
- No colour under `NO_COLOR` (https://no-color.org), as Textual reads it: set at all, even
  empty. Textual then turns every colour grey (its `Monochrome` filter, still 256-colour or
  truecolor escapes) unless the app draws ANSI colours, where it drops them (its `NoColor`
  filter: the terminal's own foreground and background; bold, dim, reverse and underline
  stay). `no_colour` says which to ask for (`App(ansi_color=True)`).

`--low-bandwidth` asks for ASCII too; `LANG=C.UTF-8` (or any UTF-8 locale) brings Unicode back.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

ASCII_TERMS = frozenset({"dumb", "linux"})
LOCALE_VARIABLES = ("LC_ALL", "LC_CTYPE", "LANG")  # the first one set decides (POSIX)


def is_utf8(name: str | None) -> bool:
    """A locale's or an encoding's name names UTF-8 ("en_US.UTF-8", "C.utf8", "utf-8")."""
    return name is not None and name.lower().replace("-", "").replace("_", "").endswith("utf8")


def locale_charset_utf8(environ: Mapping[str, str]) -> bool:
    """The locale the environment sets is a UTF-8 one (none set: the C locale, not)."""
    name = next((environ[v] for v in LOCALE_VARIABLES if environ.get(v)), None)
    return name is not None and is_utf8(name.split("@")[0])


def unicode_shown(
    environ: Mapping[str, str], encoding: str | None, locale_was_c: bool = False
) -> bool:
    """Whether the terminal shows Unicode: not a dumb or console terminal, a UTF-8 locale (and
    not the C locale Python replaced: `locale_was_c`) and a UTF-8 output stream."""
    if environ.get("TERM", "").strip().lower() in ASCII_TERMS:
        return False
    if locale_was_c or not locale_charset_utf8(environ):
        return False
    return is_utf8(encoding)


def python_found_c_locale(environ: Mapping[str, str]) -> bool:
    """Python started under the C or POSIX locale: its UTF-8 mode is on without being asked
    for (PEP 540 turns it on there, and PEP 538 set `LC_CTYPE=C.UTF-8` beside it)."""
    asked = environ.get("PYTHONUTF8") or "utf8" in getattr(sys, "_xoptions", {})
    return bool(sys.flags.utf8_mode) and not asked


def no_colour(environ: Mapping[str, str]) -> bool:
    """`NO_COLOR` is set (Textual's reading of https://no-color.org: present, any value)."""
    return "NO_COLOR" in environ


def ascii_terminal(environ: Mapping[str, str], stream=None) -> bool:
    """The terminal the live view draws on shows ASCII only (`stream`: its output, by default
    the process's standard output)."""
    stream = sys.__stdout__ if stream is None else stream
    encoding = getattr(stream, "encoding", None)
    return not unicode_shown(environ, encoding, python_found_c_locale(environ))
