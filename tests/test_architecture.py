"""The layout and the dependency rule of docs/architecture.md, checked on the source.

Every module of the package belongs to one concept (its folder; `model`, `sources`, `cli` at the
root); a concept imports only the concepts its row in `ALLOWED` names, at module level or inside a
function; module-level imports form no circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
ROOTS = {"gputop_diag": "gputop_diag", "tui": "gputop_diag.tui", "widgets": "gputop_diag.widgets"}

# What each concept may import (besides itself). Lower layers first; see docs/architecture.md.
_BASE = {"model"}
_JUDGE = {"xid", "mapping", "driver", "job", "sanitize", "health"}
ALLOWED: dict[str, set[str]] = {
    "model": set(),
    "sources": {"model"},
    # judgement: pure over model; the classifier may read the domain judgements, not the reverse
    "xid": _BASE,
    "mapping": _BASE,
    "driver": _BASE,
    "job": _BASE,
    "sanitize": _BASE,
    "health": _BASE,
    # the memory planner: the seed's formulas over a model's shape, pure
    "planner": _BASE,
    "diagnose": _BASE | _JUDGE - {"sanitize"} | {"planner"},
    # runs inside the user's job: the standard library (and torch) only, nothing of ours
    "probe": set(),
    # every read of the machine; it may use the pure parsers of what it reads
    "collect": _BASE | {"sources", "probe", "planner"} | _JUDGE - {"sanitize"},
    "recording": _BASE | {"sanitize"},
    # the simulated machine behind the same interfaces; it shares the domain's tables
    "sim": _BASE | {"sources", "probe"} | _JUDGE,
    # composes collect and judgement: the one tick every view runs
    "monitor": _BASE | {"sources", "collect", "recording", "diagnose", "planner"} | _JUDGE,
    # presenters
    "report": _BASE | {"sources", "monitor", "diagnose", "collect", "planner"} | _JUDGE,
    "prometheus": _BASE | {"sources", "collect", "monitor", "diagnose", "sanitize"},
    "fleet": _BASE | {"prometheus", "recording", "diagnose", "monitor"} | _JUDGE,
    "widgets": set(),
    "commands": _BASE
    | {"sources", "collect", "recording", "sim", "monitor", "diagnose", "report"}
    | {"prometheus", "fleet", "tui", "planner", "probe"}
    | _JUDGE,
    "tui": _BASE
    | {"sources", "collect", "recording", "sim", "monitor", "diagnose", "report"}
    | {"prometheus", "fleet", "widgets", "planner"}
    | _JUDGE,
    "cli": {"sources", "commands", "sim", "tui", "recording", "model"},
    "__main__": {"cli"},
    "__init__": set(),
}
# Within `commands`, a command is reached only from the entry point; the shared modules below
# are what commands share.
SHARED_COMMAND_MODULES = {"gputop_diag.commands.options", "gputop_diag.commands.common"}


def _modules() -> dict[str, Path]:
    out = {}
    for folder, pkg in ROOTS.items():
        for path in (REPO / folder).rglob("*.py"):
            rel = path.relative_to(REPO / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


MODULES = _modules()


def concept(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(mod: str, path: Path) -> list[tuple[str, bool, int]]:
    """(imported module, at module level, line) for every import of this package."""
    pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    typing_only = {
        id(n)
        for block in tree.body
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for n in ast.walk(block)
    }
    out = []
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                parts = pkg.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + [node.module or ""]).strip(
                    "."
                )
            else:
                base = node.module or ""
            if not base.startswith("gputop_diag"):
                continue
            for alias in node.names:
                target = f"{base}.{alias.name}"
                out.append((target if target in MODULES else base, id(node) in top, node.lineno))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("gputop_diag"):
                    out.append((alias.name, id(node) in top, node.lineno))
    return out


IMPORTS = {mod: _imports(mod, path) for mod, path in MODULES.items()}


def test_every_module_lives_in_a_known_concept():
    unknown = sorted(m for m in MODULES if concept(m) not in ALLOWED)
    assert not unknown, f"modules outside any concept of docs/architecture.md: {unknown}"


def test_no_loose_modules_at_the_package_root():
    loose = sorted(
        m for m in MODULES if m.count(".") == 1 and MODULES[m].parent.name == "gputop_diag"
    )
    assert set(loose) <= {
        "gputop_diag.cli",
        "gputop_diag.sources",
        "gputop_diag.__main__",
    }, loose


def violations() -> list[str]:
    bad = []
    for mod, imports in IMPORTS.items():
        src = concept(mod)
        for target, _, line in imports:
            dst = concept(target)
            if dst == src or dst == "__init__":
                if (
                    src == dst == "commands"
                    and target not in SHARED_COMMAND_MODULES
                    and target != "gputop_diag.commands"
                    and mod not in SHARED_COMMAND_MODULES
                    and target != mod
                    and not target.startswith(mod + "_")  # a command's own helper: xid_render
                ):
                    bad.append(f"{MODULES[mod].relative_to(REPO)}:{line}: {mod} -> {target}")
                continue
            if dst not in ALLOWED.get(src, set()):
                bad.append(f"{MODULES[mod].relative_to(REPO)}:{line}: {src} -> {dst} ({target})")
    return bad


def test_imports_point_one_way():
    assert violations() == []


def test_no_import_circles():
    """Counting imports inside functions too: one there must not hide a circle."""
    graph = {m: {t for t, _, _ in imps if t in MODULES and t != m} for m, imps in IMPORTS.items()}
    circles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                circles.append(stack[stack.index(t) :] + [t])
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    assert circles == []


def test_the_rule_catches_an_import_against_it(tmp_path, monkeypatch):
    """The check itself: a judgement module that reads the machine is reported."""
    mod = "gputop_diag.xid.catalog"
    IMPORTS_BEFORE = list(IMPORTS[mod])
    try:
        IMPORTS[mod].append(("gputop_diag.collect.kernlog.sources", True, 1))
        IMPORTS[mod].append(("gputop_diag.tui.app", False, 2))
        found = violations()
        assert any("xid -> collect" in v for v in found)
        assert any("xid -> tui" in v for v in found)
    finally:
        IMPORTS[mod][:] = IMPORTS_BEFORE


@pytest.mark.parametrize("concept_name", sorted(ALLOWED))
def test_the_architecture_document_names_every_concept(concept_name):
    if concept_name in {"__main__", "__init__"}:
        return
    doc = (REPO / "docs" / "architecture.md").read_text()
    assert f"`{concept_name}" in doc
