"""The layout and the dependency rule of docs/architecture.md, checked on the source.

The rule is read from the document: the table of "## The dependency rule" is the one copy of
what each concept may import (`read_rule`); which folder installs as which package is read from
pyproject.toml (`test_packaging.package_folders`). Every module belongs to one concept (its
folder under the package; `cli`, `sources`, `__main__` at the root; `tui/` and `widgets/` by
their package names); a concept imports only the concepts its row names. Every import counts:
at module level, inside a function, under `if TYPE_CHECKING:`, inside `try:`, and
`importlib.import_module` / `__import__` with a name written in the source. No module imports
itself back through others (a circle), by any of those imports.

The self-tests at the end prove the reader, the table parser, the rule and the layout check on
small packages written to a temporary folder, so the checks above cannot pass by seeing nothing."""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_packaging import package_folders

REPO = Path(__file__).resolve().parent.parent
PACKAGE = "gputop_diag"
DOCUMENT = REPO / "docs" / "architecture.md"
RULE_SECTION = "## The dependency rule"
NOTHING = "nothing of ours"
# Within `commands`, a command is reached only from the entry point; the shared modules below
# are what commands share (the paragraph under the table names them).
SHARED_COMMAND_MODULES = {"gputop_diag.commands.options", "gputop_diag.commands.common"}


# --- the rule, read from the document -----------------------------------------------------------


class RuleTableError(ValueError):
    """The document's table cannot be read as the rule."""


def _cell_names(cell: str, where: str) -> list[str]:
    """`a`, `b`, `c` → [a, b, c]; anything else in the cell is an error."""
    names = re.findall(r"`([^`]+)`", cell)
    rest = re.sub(r"`[^`]+`", "", cell).replace(",", "").strip()
    if not names or rest:
        raise RuleTableError(f"{where}: {cell!r} is not a list of `concept` names")
    return names


def read_rule(text: str) -> dict[str, frozenset[str]]:
    """The table under "## The dependency rule": each concept and the concepts it may import, in
    the table's order (each row names only rows above it)."""
    start = text.find(f"\n{RULE_SECTION}\n")
    if start < 0:
        raise RuleTableError(f"no section {RULE_SECTION!r}")
    body = text[start + len(RULE_SECTION) + 2 :]
    section = re.split(r"^## ", body, flags=re.M)[0]
    lines = [ln.strip() for ln in section.splitlines() if ln.strip().startswith("|")]
    if len(lines) < 3:
        raise RuleTableError(f"{RULE_SECTION}: no table")
    header = [c.strip().lower() for c in lines[0].strip("|").split("|")]
    if header[:2] != ["concept", "may import"]:
        raise RuleTableError(
            f"{RULE_SECTION}: the table's columns are {header}, not concept, may import, …"
        )
    rule: dict[str, frozenset[str]] = {}
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) != len(header):
            raise RuleTableError(f"{line!r}: {len(cells)} cells, the header has {len(header)}")
        one = re.fullmatch(r"`([^`]+)`", cells[0])
        if one is None:
            raise RuleTableError(f"{line!r}: the concept cell must be one `name`")
        name = one.group(1)
        if name in rule:
            raise RuleTableError(f"{line!r}: `{name}` has two rows")
        allowed = set() if cells[1] == NOTHING else set(_cell_names(cells[1], line))
        unknown = sorted(allowed - set(rule))
        if unknown:
            raise RuleTableError(
                f"{line!r}: {unknown} not a row above (unknown, or the rule would not be one-way)"
            )
        rule[name] = frozenset(allowed)
    return rule


RULE = read_rule(DOCUMENT.read_text())
FOLDERS = package_folders()  # {"gputop_diag": "gputop_diag", "tui": "gputop_diag.tui", …}


def concept(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


# --- the modules and their imports --------------------------------------------------------------


def modules_on_disk(repo: Path, folders: Mapping[str, str]) -> dict[str, Path]:
    """Every module under the installed folders, by its installed name."""
    out = {}
    for folder, pkg in folders.items():
        for path in (repo / folder).rglob("*.py"):
            rel = path.relative_to(repo / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = path
    return out


@dataclass(frozen=True)
class Import:
    target: str  # the absolute name of the imported module (or of the package it is read from)
    line: int
    how: str  # "module level", "in a function", "type-only", "dynamic"


_DYNAMIC = {"import_module", "__import__"}


def _literal_prefix(node: ast.expr) -> tuple[str, bool]:
    """The text a string expression starts with, and whether that is all of it."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value, True
    if isinstance(node, ast.JoinedStr):
        text = ""
        for part in node.values:
            if not (isinstance(part, ast.Constant) and isinstance(part.value, str)):
                return text, False
            text += part.value
        return text, True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, whole = _literal_prefix(node.left)
        if not whole:
            return left, False
        right, whole = _literal_prefix(node.right)
        return left + right, whole
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
    ):
        text, _ = _literal_prefix(node.func.value)
        return text.split("{", 1)[0], False
    return "", False


def _argument(call: ast.Call, position: int, keyword: str) -> ast.expr | None:
    for kw in call.keywords:
        if kw.arg == keyword:
            return kw.value
    return call.args[position] if len(call.args) > position else None


class _Reader(ast.NodeVisitor):
    def __init__(self, module: str, is_package: bool, known: Collection[str]) -> None:
        self.module = module
        self.package = module if is_package else module.rpartition(".")[0]
        self.known = known
        self.found: list[Import] = []
        self.unreadable: list[str] = []
        self.dynamic_names = {"__import__": "__import__"}  # what each name calls
        self.functions = 0
        self.type_only = 0

    def _how(self) -> str:
        if self.type_only:
            return "type-only"
        return "in a function" if self.functions else "module level"

    def _resolve(self, name: str, package: str | None, line: int) -> str | None:
        if not name.startswith("."):
            return name
        try:
            return importlib.util.resolve_name(name, package)
        except (ImportError, ValueError, TypeError) as err:
            self.unreadable.append(f"{line}: {name!r} from {package!r}: {err}")
            return None

    def _add(self, target: str, line: int, how: str | None = None) -> None:
        self.found.append(Import(target, line, how or self._how()))

    def _add_from(self, base: str, names: Iterable[str], line: int, how: str | None = None):
        for name in names:
            sub = f"{base}.{name}"
            self._add(sub if sub in self.known else base, line, how)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self.functions += 1
        self.generic_visit(node)
        self.functions -= 1

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if "TYPE_CHECKING" not in ast.unparse(node.test):
            self.generic_visit(node)
            return
        self.visit(node.test)
        self.type_only += 1
        for child in node.body:
            self.visit(child)
        self.type_only -= 1
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        name = "." * node.level + (node.module or "")
        base = self._resolve(name, self.package, node.lineno)
        if base is not None:
            self._add_from(base, [a.name for a in node.names if a.name != "*"] or [""], node.lineno)

    def visit_Call(self, node: ast.Call) -> None:
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute):  # importlib.import_module, builtins.__import__
            called = func.attr if func.attr in _DYNAMIC else None
        else:
            called = self.dynamic_names.get(getattr(func, "id", None))
        if called is None:
            return
        source = ast.unparse(node)
        arg = _argument(node, 0, "name")
        text, whole = _literal_prefix(arg) if arg is not None else ("", False)
        dots = len(text) - len(text.lstrip("."))
        body = text[dots:]
        if not whole:  # an f-string or a join: what is written names the package at least
            body = body[: body.rfind(".")] if "." in body else ""
        if not dots and not body:
            self.unreadable.append(f"{node.lineno}: {source}: the name is not in the source")
            return
        if called == "import_module":
            package = self._package_argument(_argument(node, 1, "package"))
        else:
            level = _argument(node, 4, "level")
            if level is not None and not (
                isinstance(level, ast.Constant) and isinstance(level.value, int)
            ):
                self.unreadable.append(f"{node.lineno}: {source}: level is not in the source")
                return
            dots = level.value if level is not None else 0
            package = self.package
        target = self._resolve("." * dots + body, package, node.lineno)
        if target is None:
            return
        how = "dynamic" if whole else "dynamic (its package)"
        fromlist = _argument(node, 3, "fromlist") if called == "__import__" else None
        names = []
        if isinstance(fromlist, (ast.List, ast.Tuple)):
            names = [e.value for e in fromlist.elts if isinstance(e, ast.Constant)]
        self._add_from(target, names or [""], node.lineno, how)

    def _package_argument(self, node: ast.expr | None) -> str | None:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if isinstance(node, ast.Name) and node.id == "__package__":
            return self.package
        if isinstance(node, ast.Name) and node.id == "__name__":
            return self.module
        return None


def read_imports(
    source: str, module: str, is_package: bool, known: Collection[str]
) -> tuple[list[Import], list[str]]:
    """Every import in a module's source, by absolute name (relative forms resolved against the
    module), and the dynamic imports whose name is not written in the source."""
    tree = ast.parse(source)
    reader = _Reader(module, is_package, known)
    for node in ast.walk(tree):  # `from importlib import import_module as im`, anywhere
        if isinstance(node, ast.ImportFrom) and node.module in ("importlib", "builtins"):
            reader.dynamic_names |= {
                a.asname or a.name: a.name for a in node.names if a.name in _DYNAMIC
            }
    reader.visit(tree)
    return reader.found, reader.unreadable


def read_package(modules: Mapping[str, Path]) -> tuple[dict[str, list[Import]], list[str]]:
    imports, unreadable = {}, []
    for mod, path in modules.items():
        found, bad = read_imports(path.read_text(), mod, path.name == "__init__.py", modules)
        imports[mod] = [i for i in found if i.target.split(".")[0] == PACKAGE]
        where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
        unreadable += [f"{where}:{b}" for b in bad]
    return imports, unreadable


MODULES = modules_on_disk(REPO, FOLDERS)


@functools.cache
def package_imports() -> tuple[dict[str, list[Import]], list[str]]:
    """The package's imports (`read_package`): read when a check first asks, once per process,
    not while every worker collects the tests (about 2 s of CPU each)."""
    return read_package(MODULES)


# the checks that read the package's imports, on one worker: the package is read once
READS_IMPORTS = pytest.mark.xdist_group("architecture-imports")


# --- the checks -----------------------------------------------------------------------------


def layout_problems(repo: Path, folders: Mapping[str, str], concepts: Collection[str]) -> list[str]:
    """Each concept of the rule is on disk and holds modules; each package folder on disk is a
    concept of the rule (or a folder pyproject installs)."""
    problems = []
    roots = [f for f, pkg in folders.items() if pkg == PACKAGE]
    if len(roots) != 1:
        return [f"pyproject installs {PACKAGE} from {roots or 'no folder'}"]
    root = repo / roots[0]
    for top in sorted(p for p in repo.iterdir() if (p / "__init__.py").is_file()):
        if top.name not in folders:
            problems.append(f"{top.name}/: a package folder pyproject does not install")
    for folder, pkg in sorted(folders.items()):
        if not (repo / folder / "__init__.py").is_file():
            problems.append(f"{folder}/: pyproject installs it as {pkg}; no package there")
        if pkg != PACKAGE and (pkg.count(".") != 1 or concept(pkg) not in concepts):
            problems.append(f"{folder}/: installed as {pkg}, not a concept of the rule")
    if root.is_dir():
        for sub in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "__pycache__"):
            if any(sub.rglob("*.py")) and sub.name not in concepts:
                problems.append(f"{sub.relative_to(repo)}/: a folder of modules no row names")
    modules = modules_on_disk(repo, {f: p for f, p in folders.items() if (repo / f).is_dir()})
    for name in concepts:
        mods = [m for m in modules if concept(m) == name]
        if not mods:
            problems.append(f"`{name}`: the rule names it; no module of it on disk")
        elif mods == [f"{PACKAGE}.{name}"] and modules[mods[0]].name == "__init__.py":
            problems.append(f"`{name}`: its folder holds no module but __init__.py")
    return problems


def violations(
    imports: Mapping[str, Iterable[Import]],
    rule: Mapping[str, Collection[str]],
    modules: Mapping[str, Path],
) -> list[str]:
    bad = []
    for mod, found in imports.items():
        src = concept(mod)
        where = modules[mod].relative_to(REPO) if modules[mod].is_relative_to(REPO) else mod
        for imp in found:
            dst = concept(imp.target)
            if dst == src or dst == "__init__":
                if (
                    src == dst == "commands"
                    and imp.target not in SHARED_COMMAND_MODULES
                    and imp.target != "gputop_diag.commands"
                    and mod not in SHARED_COMMAND_MODULES
                    and imp.target != mod
                    and not imp.target.startswith(mod + "_")  # a command's own helper: xid_render
                ):
                    bad.append(f"{where}:{imp.line}: {mod} -> {imp.target} ({imp.how})")
                continue
            if dst not in rule.get(src, ()):
                bad.append(f"{where}:{imp.line}: {src} -> {dst} ({imp.target}, {imp.how})")
    return bad


def circles(imports: Mapping[str, Iterable[Import]]) -> list[list[str]]:
    """Each circle of modules importing each other, once (by the set of its modules)."""
    graph = {
        m: sorted({i.target for i in imps} & imports.keys() - {m}) for m, imps in imports.items()
    }
    found: dict[frozenset[str], list[str]] = {}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in graph[m]:
            if state.get(t) == 1:
                loop = stack[stack.index(t) :] + [t]
                found.setdefault(frozenset(loop), loop)
            elif t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)
    return list(found.values())


# --- the source against the rule -------------------------------------------------------------


def test_every_concept_is_on_disk_and_every_package_folder_is_a_concept():
    assert layout_problems(REPO, FOLDERS, RULE) == []


@READS_IMPORTS
def test_the_reader_read_every_concept():
    """A concept whose modules dropped out (a folder renamed, emptied, not mapped) is seen here."""
    imports, _ = package_imports()
    read = {concept(m) for m, imps in imports.items()}
    assert sorted(set(RULE) - read) == []
    assert sum(len(imps) for imps in imports.values()) > len(MODULES)


def test_every_module_lives_in_a_known_concept():
    unknown = sorted(m for m in MODULES if concept(m) not in RULE)
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


@READS_IMPORTS
def test_imports_point_one_way():
    imports, _ = package_imports()
    assert violations(imports, RULE, MODULES) == []


def _described(loop: list[str]) -> str:
    """a -> b (type-only, line 3) -> a: how each step of a circle imports."""
    imports, _ = package_imports()
    out = loop[0]
    for src, dst in zip(loop, loop[1:], strict=False):
        how = sorted({(i.how, i.line) for i in imports[src] if i.target == dst})
        out += f" -> {dst} ({', '.join(f'{h}, line {n}' for h, n in how)})"
    return out


@READS_IMPORTS
def test_no_import_circles():
    """Counting every import: one inside a function or under TYPE_CHECKING still draws an arrow
    in every import-graph tool, and must not hide a circle."""
    imports, _ = package_imports()
    assert [_described(loop) for loop in circles(imports)] == []


@READS_IMPORTS
def test_every_dynamic_import_names_what_it_imports():
    """`importlib.import_module(name)` with a name made at run time is an import the rule cannot
    see: the source must write the name, or at least its package (`f".commands.{name}"`)."""
    assert package_imports()[1] == []


def test_the_document_names_the_modules_commands_share():
    text = DOCUMENT.read_text()
    section = text[text.index(RULE_SECTION) :].split("\n## ", 1)[0]
    for mod in sorted(SHARED_COMMAND_MODULES):
        assert f"`{mod.removeprefix(PACKAGE + '.')}`" in section, mod


# --- the checks, checked ---------------------------------------------------------------------

FORMS = {
    "import pkg.b": "pkg.b",
    "import pkg.b as c": "pkg.b",
    "from pkg import b": "pkg.b",
    "from pkg.b import c": "pkg.b.c",
    "from pkg.b import not_a_module": "pkg.b",
    "from . import x": "pkg.sub.x",
    "from .x import thing": "pkg.sub.x",
    "from ..b import c": "pkg.b.c",
    "from .. import b": "pkg.b",
    "def f():\n    import pkg.b": "pkg.b",
    "class K:\n    def m(self):\n        from ..b import c": "pkg.b.c",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import c": "pkg.b.c",
    "import typing\nif typing.TYPE_CHECKING:\n    import pkg.b": "pkg.b",
    "try:\n    import pkg.b\nexcept ImportError:\n    pass": "pkg.b",
    "try:\n    pass\nexcept ImportError:\n    from ..b import c": "pkg.b.c",
    "import importlib\nimportlib.import_module('pkg.b.c')": "pkg.b.c",
    "import importlib\nimportlib.import_module('.x', package='pkg.sub')": "pkg.sub.x",
    "import importlib\nimportlib.import_module('..b', 'pkg.sub')": "pkg.b",
    "import importlib\nimportlib.import_module('.x', __package__)": "pkg.sub.x",
    "import importlib\nimportlib.import_module(f'.x.{NAME}', __package__)": "pkg.sub.x",
    "import importlib\nimportlib.import_module('pkg.b.' + NAME)": "pkg.b",
    "from importlib import import_module as im\nim('pkg.b')": "pkg.b",
    "__import__('pkg.b')": "pkg.b",
    "__import__('pkg.b', fromlist=['c'])": "pkg.b.c",
    "__import__('b', globals(), locals(), [], 2)": "pkg.b",
    "import builtins\nbuiltins.__import__('pkg.b')": "pkg.b",
    "x = lambda: __import__('pkg.b')": "pkg.b",
}


@pytest.fixture
def synthetic(tmp_path):
    """pkg/{__init__, b/{__init__, c}, sub/{__init__, x/{__init__}, m}}: m is where imports go."""
    for rel in ["__init__", "b/__init__", "b/c", "sub/__init__", "sub/x/__init__", "sub/m"]:
        path = tmp_path / "pkg" / f"{rel}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return tmp_path, modules_on_disk(tmp_path, {"pkg": "pkg"})


@pytest.mark.parametrize(
    "source", sorted(FORMS), ids=[f.replace("\n", "; ") for f in sorted(FORMS)]
)
def test_the_reader_sees_each_form_of_import(synthetic, source):
    _, known = synthetic
    found, unreadable = read_imports(source, "pkg.sub.m", False, known)
    assert unreadable == []
    assert FORMS[source] in {i.target for i in found}, found


AGAINST_THE_RULE = [
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gputop_diag.collect import host",
    "def f():\n    from ..collect import host",
    "try:\n    import gputop_diag.collect.host\nexcept ImportError:\n    host = None",
    "import importlib\nhost = importlib.import_module('..collect.host', __package__)",
    "import importlib\nhost = importlib.import_module(f'gputop_diag.collect.{NAME}')",
    "host = __import__('gputop_diag.collect.host')",
]


@pytest.mark.parametrize(
    "source", AGAINST_THE_RULE, ids=[f.replace("\n", "; ") for f in AGAINST_THE_RULE]
)
def test_an_import_against_the_rule_is_reported_however_it_is_written(tmp_path, source):
    """The whole path, from a file on disk to the report: a judgement module reads the machine."""
    for rel, text in [
        ("gputop_diag/__init__.py", ""),
        ("gputop_diag/xid/__init__.py", ""),
        ("gputop_diag/xid/catalog.py", f"from gputop_diag.model import Snapshot\n{source}\n"),
        ("gputop_diag/model/__init__.py", ""),
        ("gputop_diag/collect/__init__.py", ""),
        ("gputop_diag/collect/host.py", ""),
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    modules = modules_on_disk(tmp_path, {"gputop_diag": "gputop_diag"})
    imports, unreadable = read_package(modules)
    assert unreadable == []
    assert [v.split(": ", 1)[1].split(" (")[0] for v in violations(imports, RULE, modules)] == [
        "xid -> collect"
    ]


def test_the_reader_says_how_each_import_is_made(synthetic):
    _, known = synthetic
    source = (
        "from typing import TYPE_CHECKING\n"
        "import pkg.b\n"
        "if TYPE_CHECKING:\n    import pkg.b.c\n"
        "def f():\n    from . import x\n"
        "__import__('pkg')\n"
    )
    found, _ = read_imports(source, "pkg.sub.m", False, known)
    how = {i.target: (i.how, i.line) for i in found}
    assert how["pkg.b"] == ("module level", 2)
    assert how["pkg.b.c"] == ("type-only", 4)
    assert how["pkg.sub.x"] == ("in a function", 6)
    assert how["pkg"] == ("dynamic", 7)


def test_the_reader_resolves_relative_imports_in_a_package_init(synthetic):
    _, known = synthetic
    found, _ = read_imports("from . import c\nfrom .. import sub", "pkg.b", True, known)
    assert {i.target for i in found} == {"pkg.b.c", "pkg.sub"}


@pytest.mark.parametrize(
    "source",
    [
        "import importlib\nimportlib.import_module(NAME)",
        "import importlib\nimportlib.import_module(f'{NAME}.x')",
        "import importlib\nimportlib.import_module('.x', package=PKG)",
        "__import__(NAME)",
        "__import__('b', level=LEVEL)",
        "from ....far import y",
    ],
)
def test_the_reader_reports_an_import_it_cannot_name(synthetic, source):
    _, known = synthetic
    _, unreadable = read_imports(source, "pkg.sub.m", False, known)
    assert len(unreadable) == 1, unreadable


def test_the_reader_leaves_other_calls_alone(synthetic):
    _, known = synthetic
    source = "def import_module(x):\n    pass\nmodule = 'pkg.b'\nprint('import pkg.b')\n"
    found, unreadable = read_imports(source, "pkg.sub.m", False, known)
    assert found == [] and unreadable == []


def test_the_rule_catches_an_import_against_it(synthetic):
    """A judgement module that reads the machine or shows a view is reported, however it
    imports."""
    mod = "gputop_diag.xid.catalog"
    found = {
        mod: [
            Import("gputop_diag.collect.kernlog.sources", 1, "type-only"),
            Import("gputop_diag.tui.app", 2, "dynamic"),
            Import("gputop_diag.model", 3, "module level"),
            Import("gputop_diag", 4, "module level"),
        ]
    }
    bad = violations(found, RULE, {mod: REPO / "gputop_diag" / "xid" / "catalog.py"})
    assert len(bad) == 2
    assert "xid -> collect" in bad[0] and "type-only" in bad[0]
    assert "xid -> tui" in bad[1] and "dynamic" in bad[1]
    one_command = {"gputop_diag.commands.watch": [Import("gputop_diag.commands.report", 5, "")]}
    assert len(violations(one_command, RULE, {m: REPO for m in one_command})) == 1


def test_the_rule_finds_a_circle():
    found = {
        "p.a": [Import("p.b", 1, "module level")],
        "p.b": [Import("p.c", 1, "in a function")],
        "p.c": [Import("p.a", 1, "type-only")],
        "p.d": [Import("p.a", 1, "module level")],
    }
    assert circles(found) == [["p.a", "p.b", "p.c", "p.a"]]
    found["p.c"] = []
    assert circles(found) == []


def _layout(root: Path) -> tuple[dict[str, str], set[str]]:
    for rel in [
        "gputop_diag/__init__.py",
        "gputop_diag/cli.py",
        "gputop_diag/model/__init__.py",
        "gputop_diag/model/types.py",
        "tui/__init__.py",
        "tui/app.py",
        "tui/panes/__init__.py",
    ]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    return {"gputop_diag": "gputop_diag", "tui": "gputop_diag.tui"}, {
        "__init__",
        "cli",
        "model",
        "tui",
    }


def test_the_layout_check_passes_a_whole_layout(tmp_path):
    folders, concepts = _layout(tmp_path)
    assert layout_problems(tmp_path, folders, concepts) == []


def test_the_layout_check_fails_a_renamed_concept_folder(tmp_path):
    folders, concepts = _layout(tmp_path)
    (tmp_path / "tui").rename(tmp_path / "ui")
    problems = layout_problems(tmp_path, folders, concepts)
    assert any(p.startswith("ui/: a package folder pyproject does not install") for p in problems)
    assert any(p.startswith("tui/: pyproject installs it") for p in problems)
    assert any(p.startswith("`tui`: the rule names it") for p in problems)


def test_the_layout_check_fails_an_emptied_or_missing_concept(tmp_path):
    folders, concepts = _layout(tmp_path)
    for path in [tmp_path / "tui" / "app.py", *(tmp_path / "tui" / "panes").iterdir()]:
        path.unlink()
    (tmp_path / "tui" / "panes").rmdir()
    (tmp_path / "gputop_diag" / "cli.py").unlink()
    problems = layout_problems(tmp_path, folders, concepts)
    assert "`tui`: its folder holds no module but __init__.py" in problems
    assert "`cli`: the rule names it; no module of it on disk" in problems


def test_the_layout_check_fails_a_folder_no_row_names(tmp_path):
    folders, concepts = _layout(tmp_path)
    (tmp_path / "gputop_diag" / "extra").mkdir()
    (tmp_path / "gputop_diag" / "extra" / "thing.py").write_text("")  # no __init__.py either
    (tmp_path / "gputop_diag" / "data").mkdir()  # no modules: not a package folder
    problems = layout_problems(tmp_path, folders, concepts)
    assert problems == ["gputop_diag/extra/: a folder of modules no row names"]


def test_the_layout_check_fails_a_mapping_to_no_concept(tmp_path):
    folders, concepts = _layout(tmp_path)
    folders["tui"] = "gputop_diag.ui"
    problems = layout_problems(tmp_path, folders, concepts)
    assert "tui/: installed as gputop_diag.ui, not a concept of the rule" in problems


_TABLE = """\
# Title

## The dependency rule

Words.

| concept | may import | why |
|---|---|---|
| `model` | nothing of ours | types |
| `collect` | `model` | reads |
| `tui` | `model`, `collect` | shows |

## Next section

| concept | may import | why |
|---|---|---|
| `other` | `ghost` | not read |
"""


def test_the_document_table_is_read_as_the_rule():
    assert read_rule(_TABLE) == {
        "model": frozenset(),
        "collect": frozenset({"model"}),
        "tui": frozenset({"model", "collect"}),
    }
    assert RULE["model"] == frozenset() and "model" in RULE["collect"]
    assert len(RULE) >= 20


_BROKEN = {
    "renamed section": (_TABLE.replace("## The dependency rule", "## Dependencies"), "no section"),
    "no table": (re.sub(r"\| concept .*?\n\n", "", _TABLE, count=1, flags=re.S), "no table"),
    "other columns": (_TABLE.replace("| may import |", "| imports |", 1), "columns"),
    "misspelt": (_TABLE.replace("`model`, `collect`", "`model`, `colect`"), "not a row above"),
    "unknown": (_TABLE.replace("`model`, `collect`", "`model`, `sim`"), "not a row above"),
    "upward": (_TABLE.replace("| `collect` | `model` |", "| `collect` | `tui` |"), "row above"),
    "prose": (_TABLE.replace("`model`, `collect` |", "`model` and `collect` |"), "not a list"),
    "a phrase": (_TABLE.replace("`model`, `collect` |", "everything below |"), "not a list"),
    "two rows": (_TABLE.replace("| `tui` |", "| `model` |"), "two rows"),
    "bare name": (_TABLE.replace("| `tui` |", "| tui |"), "one `name`"),
    "two names": (_TABLE.replace("| `tui` |", "| `tui`, `ui` |"), "one `name`"),
    "extra cell": (_TABLE.replace("| shows |", "| shows | more |"), "cells"),
}


@pytest.mark.parametrize("broken, why", list(_BROKEN.values()), ids=list(_BROKEN))
def test_a_table_that_is_not_the_rule_fails(broken, why):
    with pytest.raises(RuleTableError, match=why):
        read_rule(broken)
