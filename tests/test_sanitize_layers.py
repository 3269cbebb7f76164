"""The sanitizer's modules form layers, checked on the source: every import of a module of
`gputop_diag/sanitize/` counts (at module level, inside a function, under `if TYPE_CHECKING:`),
and they form no circle. The pseudonym table (`table.py`) stands on the data alone; the rule
modules take the table and import only what is below them; `sanitizer.py`, the front, is
imported by none of them."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = "gputop_diag.sanitize"
FOLDER = Path(__file__).resolve().parent.parent / "gputop_diag" / "sanitize"
# What the pseudonym table may stand on: data and patterns, nothing that takes a table.
DATA = {"rules", "vocabulary", "work", "compiled"}


def _modules() -> dict[str, Path]:
    return {p.stem: p for p in sorted(FOLDER.glob("*.py")) if p.stem != "__init__"}


def _target(node: ast.ImportFrom, name: str, modules: dict[str, Path]) -> str | None:
    """The module of this package that `from <module> import <name>` reads, if any."""
    if node.level:
        base = PACKAGE.rsplit(".", node.level - 1)[0] if node.level > 1 else PACKAGE
        full = f"{base}.{node.module}" if node.module else base
    else:
        full = node.module or ""
    if full == PACKAGE:
        return name if name in modules else "__init__"
    if full.startswith(PACKAGE + "."):
        return full[len(PACKAGE) + 1 :].split(".")[0]
    return None


def imports_of(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every module of this package that `path` imports, wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.add(alias.name[len(PACKAGE) + 1 :].split(".")[0])
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                target = _target(node, alias.name, modules)
                if target is not None:
                    found.add(target)
    return found - {path.stem}


def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: imports_of(path, modules) & set(modules) for name, path in modules.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle of imports, as the modules around it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_finder_sees_a_circle_and_every_kind_of_import(tmp_path):
    """The checks below could not fail if the finder missed an import or a circle."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None
    (tmp_path / "one.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from . import two as T\n"
        "from .three import x\n"
        "import gputop_diag.sanitize.four\n"
        "if TYPE_CHECKING:\n"
        "    from .five import Five\n"
        "def f():\n"
        "    from ..sanitize import six\n"
        "    from ..model import Snapshot\n",
        encoding="utf-8",
    )
    names = {n: tmp_path for n in ("one", "two", "three", "four", "five", "six")}
    assert imports_of(tmp_path / "one.py", names) == {"two", "three", "four", "five", "six"}


def test_the_sanitizer_modules_import_no_circle():
    edges = graph()
    assert "sanitizer" in edges and "text" in edges  # the finder reads this package
    cycle = find_cycle(edges)
    assert cycle is None, "an import circle: " + " -> ".join(cycle or ())


def test_no_module_of_the_sanitizer_imports_its_front():
    """`sanitizer.py` is the front over the table and the rules: a rule that reached it would
    stand on everything."""
    edges = graph()
    assert sorted(m for m, deps in edges.items() if "sanitizer" in deps) == []


def test_the_pseudonym_table_stands_on_data_alone():
    edges = graph()
    assert edges["table"] <= DATA, edges["table"] - DATA
    for name in DATA:
        assert edges[name] <= DATA, (name, edges[name] - DATA)
