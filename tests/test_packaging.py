"""A normal (non-editable) install must carry every package: pyproject lists them by hand. And
the code must stay valid for the oldest Python the package declares (3.10).

`[tool.setuptools]` in pyproject.toml is the one place that says which folder installs as which
package (`package_folders`); tests/test_architecture.py reads it from here.

The `packages` list cannot be derived: setuptools' `find` names a package by its path under
`where`, so with `where = ["."]` it installs `tui/` as a top-level `tui` package (package-dir
renames a package it is given; it does not rename what `find` discovers) — see "Package
discovery" in the setuptools documentation,
https://setuptools.pypa.io/en/latest/userguide/package_discovery.html. The list stays, and the
first test below holds it equal to the package folders on disk."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    try:
        import tomli as tomllib
    except ImportError:
        tomllib = None

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _setuptools_table_by_shape(text: str) -> dict:
    """The two keys read here, by their shape in our pyproject (Python 3.10 without tomli):
    `package-dir` as an inline table or as a `[tool.setuptools.package-dir]` table, and
    `packages` as an array of strings."""
    pair = r'"([^"]+)"\s*=\s*"([^"]+)"'
    inline = re.search(r"^package-dir\s*=\s*\{(.*?)\}\s*$", text, re.M)
    table = re.search(r"^\[tool\.setuptools\.package-dir\]\s*\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    pkgs = re.search(r"^packages\s*=\s*\[(.*?)\]", text, re.S | re.M)
    if pkgs is None or (inline or table) is None:
        raise ValueError(
            "pyproject.toml: [tool.setuptools] `packages` or `package-dir` is not in a shape this "
            "reader knows (Python 3.10 without tomli); install tomli or extend the reader"
        )
    return {
        "packages": re.findall(r'"([^"]+)"', pkgs.group(1)),
        "package-dir": dict(re.findall(pair, (inline or table).group(1))),
    }


def setuptools_config(root: pathlib.Path = ROOT) -> dict:
    text = (root / "pyproject.toml").read_text()
    if tomllib is not None:
        return tomllib.loads(text)["tool"]["setuptools"]
    return _setuptools_table_by_shape(text)


def package_folders(root: pathlib.Path = ROOT) -> dict[str, str]:
    """Each top folder of the repository that installs as a package, and its package name:
    {"gputop_diag": "gputop_diag", "tui": "gputop_diag.tui", …} (`package-dir` turned around)."""
    mapping = setuptools_config(root).get("package-dir", {})
    if not mapping:
        raise ValueError("pyproject.toml: [tool.setuptools] has no package-dir")
    out = {}
    for package, folder in mapping.items():
        rel = pathlib.PurePosixPath(folder)
        if not package or len(rel.parts) != 1:
            raise ValueError(
                f"pyproject.toml: package-dir {package!r} = {folder!r}: expected a "
                "package name mapped to one top folder of the repository"
            )
        out[rel.parts[0]] = package
    return out


def test_the_toml_fallback_reads_our_pyproject_as_tomllib_does():
    """Python 3.10 reads pyproject by shape: it must agree with a real TOML reader."""
    if tomllib is None:
        pytest.skip("no TOML reader here to compare the 3.10 fallback with")
    text = (ROOT / "pyproject.toml").read_text()
    real = tomllib.loads(text)["tool"]["setuptools"]
    by_shape = _setuptools_table_by_shape(text)
    assert by_shape["packages"] == real["packages"]
    assert by_shape["package-dir"] == real["package-dir"]
    as_table = (
        text.replace(
            re.search(r"^package-dir\s*=.*$", text, re.M).group(0),
            "",
        )
        + "\n[tool.setuptools.package-dir]\n"
        + "".join(f'"{k}" = "{v}"\n' for k, v in real["package-dir"].items())
    )
    assert _setuptools_table_by_shape(as_table)["package-dir"] == real["package-dir"]
    with pytest.raises(ValueError, match="not in a shape"):
        _setuptools_table_by_shape(text.replace("package-dir", "package_dir"))


def test_every_package_folder_is_listed_in_pyproject():
    """Listed == on disk: a folder of modules that is not listed is left out of a wheel (and one
    without `__init__.py` is not a package setuptools installs); a listed package with no folder
    breaks the build."""
    cfg = setuptools_config()
    listed = set(cfg["packages"])
    on_disk = set()
    no_init = []
    for top, name in package_folders().items():
        assert (ROOT / top / "__init__.py").is_file(), f"package-dir names {top}/: no package there"
        for folder in [ROOT / top, *(ROOT / top).rglob("*")]:
            if not folder.is_dir() or folder.name == "__pycache__":
                continue
            if not any(folder.glob("*.py")):
                continue
            if not (folder / "__init__.py").is_file():
                no_init.append(str(folder.relative_to(ROOT)))
                continue
            on_disk.add(".".join((name, *folder.relative_to(ROOT / top).parts)))
    assert no_init == [], f"folders of modules without __init__.py: {no_init}"
    assert sorted(on_disk - listed) == [], "missing from [tool.setuptools] packages"
    assert sorted(listed - on_disk) == [], "listed in [tool.setuptools] packages, not on disk"


def _python310() -> str | None:
    """A working Python 3.10 (a pyenv shim may name one that is not installed)."""
    candidates = [
        str(p) for p in sorted(pathlib.Path.home().glob(".pyenv/versions/3.10*/bin/python3.10"))
    ]
    candidates += [c for c in (shutil.which("python3.10"),) if c]
    for py in candidates:
        try:
            r = subprocess.run(
                [py, "-c", "import sys; print(sys.version_info[:2])"],
                capture_output=True,
                text=True,
                timeout=30,
            )
        except OSError:
            continue
        if r.returncode == 0 and r.stdout.strip() == "(3, 10)":
            return py
    return None


def test_every_module_compiles_on_python_3_10():
    py = _python310()
    if py is None:
        pytest.skip("no Python 3.10 on this machine to compile with")
    r = subprocess.run(
        [py, "-m", "compileall", "-q", "-x", "__snapshots__", *package_folders(), "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize("package,folder", [("tui", "tui"), ("widgets", "widgets")])
def test_the_top_level_folders_are_reached_by_their_import_path_on_disk(package, folder):
    """`gputop_diag/tui` and `gputop_diag/widgets` are links to the top-level folders, so a
    tool that reads files (an editor's go-to-definition, grimp, pydeps) finds
    `gputop_diag.tui.app` at `gputop_diag/tui/app.py`: every module of theirs joins the
    package's import graph. The folder mapping stays pyproject's (`package_folders`)."""
    link = ROOT / "gputop_diag" / package
    assert link.is_symlink(), f"gputop_diag/{package} should link to ../{folder}"
    assert link.resolve() == (ROOT / folder).resolve()
    assert package_folders()[folder] == f"gputop_diag.{package}"
    for path in (ROOT / folder).rglob("*.py"):
        rel = path.relative_to(ROOT / folder)
        assert (link / rel).is_file(), rel
        text = path.read_text()
        # every import of the package names a file a reader finds under gputop_diag/
        for target in re.findall(r"^\s*from (gputop_diag(?:\.\w+)+) import", text, re.M):
            parts = target.split(".")[1:]
            base = ROOT / "gputop_diag" / pathlib.Path(*parts)
            assert base.with_suffix(".py").is_file() or (base / "__init__.py").is_file(), (
                f"{path.relative_to(ROOT)}: {target}"
            )
