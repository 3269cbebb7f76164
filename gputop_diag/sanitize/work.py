"""One text being sanitized (`Work`: each replacement parked behind a placeholder, so no later
rule sees a pseudonym or re-replaces part of one), and word patterns for the seeded names.

A seeded list can hold thousands of names (every account in /etc/passwd, every node of a
cluster): `boundary_re` builds them as a trie-shaped pattern, which the regex engine matches in
time that grows with the length of the text, not with the number of names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_OPEN, _CLOSE = "\ue000", "\ue001"
_PH = re.compile("\ue000([\ue100-\ue1ff]+)\ue001")
PRIVATE_USE = re.compile("[\ue000-\ue1ff]")  # never in input: placeholders are made of these


def _ph(n: int) -> str:
    digits = []
    while True:
        n, r = divmod(n, 256)
        digits.append(chr(0xE100 + r))
        if not n:
            break
    return _OPEN + "".join(digits) + _CLOSE


def _ph_index(s: str) -> int:
    return sum((ord(c) - 0xE100) * 256**i for i, c in enumerate(s))


class Work:
    """One text being sanitized: each replacement parked behind a placeholder, with the text it
    replaced."""

    __slots__ = ("kept",)

    def __init__(self) -> None:
        self.kept: list[tuple[str, str]] = []

    def keep(self, s: str, original: str | None = None) -> str:
        self.kept.append((s, s if original is None else original))
        return _ph(len(self.kept) - 1)

    def restore(self, text: str, original: bool = False) -> str:
        """`text` with its placeholders filled in: the replacements, or (`original`) the text
        they replaced."""
        k = 1 if original else 0
        for _ in range(4):  # a kept string may hold placeholders of its own
            if _OPEN not in text:
                break
            text = _PH.sub(lambda m: self.kept[_ph_index(m.group(1))][k], text)
        return text


def only_placeholders(s: str) -> bool:
    return bool(s) and not _PH.sub("", s).strip(",:;/ ")


def has_placeholder(s: str) -> bool:
    return _OPEN in s


# Where a seeded word may start and end.
WORD_L, WORD_R = r"(?<![A-Za-z0-9])", r"(?![A-Za-z0-9])"
HOST_L, HOST_R = r"(?<![\w.-])", r"(?![\w-]|\.[A-Za-z0-9])"
# A number: not inside another number or a decimal figure (`0.48213`, `48213.5`).
DIGIT_L, DIGIT_R = r"(?<!\d)(?<!\d\.)", r"(?!\d|\.\d)"
ALLOWED_L, ALLOWED_R = r"(?<![\w.-])", r"(?![\w-]|\.\d)"


def trie_pattern(words: Iterable[str]) -> str:
    """An alternation of `words` as a trie (common prefixes shared, longer matches first)."""
    root: dict = {}
    for w in words:
        node = root
        for ch in w:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict) -> str:
        alts, singles = [], []
        for ch in sorted(k for k in node if k):
            child = node[ch]
            if list(child) == [""]:
                singles.append(ch)
            else:
                alts.append(re.escape(ch) + emit(child))
        if singles:
            alts.append(
                re.escape(singles[0])
                if len(singles) == 1
                else "[" + "".join(re.escape(c) for c in singles) + "]"
            )
        body = alts[0] if len(alts) == 1 else "(?:" + "|".join(alts) + ")"
        return f"(?:{body})?" if "" in node else body

    return emit(root)


def boundary_re(
    words: Iterable[str], *, left: str, right: str, flags: int = 0
) -> re.Pattern[str] | None:
    """`words` as one pattern between the boundaries `left` and `right` (longer words win);
    None when there are none. Under `re.I` the words are matched in any letter case."""
    alts = {w.lower() if flags & re.I else w for w in words if w}
    if not alts:
        return None
    return re.compile(f"{left}(?:{trie_pattern(alts)}){right}", flags)


class _Found:
    """What `WordSet.sub` hands its replacement function: the word as written."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def group(self, n: int = 0) -> str:
        return self.text


_ALNUM_RUN = re.compile(r"[A-Za-z0-9]+")
_HOST_RUN = re.compile(r"[\w.-]+")
_ASCII_ALNUM = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


class WordSet:
    """Seeded names found by lookup, in any letter case: thousands of accounts or nodes cost
    no more than a few (one pass over the text, a dict lookup per word).

    `kind` "word": a name stands between characters that are no letter or digit (`alice` in
    `alice_ckpt`, `~alice/`, `Alice,`); "host": a host name is a whole run of letters, digits,
    `_`, `.` and `-` (`gpu-node-07` in `gpu-node-07:1234`, not in `gpu-node-07.example.org`,
    whose rules come first), a sentence's full stop aside."""

    def __init__(self, words: Iterable[str], kind: str = "word") -> None:
        self.kind = kind
        self._index: dict[str, list[str]] = {}
        for w in {w.lower() for w in words if w}:
            key = w if kind == "host" else (_ALNUM_RUN.match(w) or _EMPTY).group(0)
            if key:
                self._index.setdefault(key, []).append(w)
        for names in self._index.values():
            names.sort(key=len, reverse=True)

    def __bool__(self) -> bool:
        return bool(self._index)

    def sub(self, repl, text: str) -> str:
        out: list[str] = []
        last = 0
        if self.kind == "host":
            for m in _HOST_RUN.finditer(text):
                word = m.group(0).rstrip(".")
                if word.lower() in self._index:
                    out += [text[last : m.start()], repl(_Found(word))]
                    last = m.start() + len(word)
        else:
            for m in _ALNUM_RUN.finditer(text):
                i = m.start()
                names = self._index.get(m.group(0).lower()) if i >= last else None
                for name in names or ():
                    j = i + len(name)
                    if text[i:j].lower() == name and (
                        j >= len(text) or text[j] not in _ASCII_ALNUM
                    ):
                        out += [text[last:i], repl(_Found(text[i:j]))]
                        last = j
                        break
        if not out:
            return text
        out.append(text[last:])
        return "".join(out)


class _Empty:
    @staticmethod
    def group(n: int = 0) -> str:
        return ""


_EMPTY = _Empty()
