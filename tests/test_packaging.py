"""A normal (non-editable) install must carry every package: pyproject lists them by hand. And
the code must stay valid for the oldest Python the package declares (3.10)."""

import pathlib
import re
import shutil
import subprocess

import pytest

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = None

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAPPED = {"gputop_diag": "gputop_diag", "tui": "gputop_diag.tui", "widgets": "gputop_diag.widgets"}


def _setuptools_config() -> dict:
    text = (ROOT / "pyproject.toml").read_text()
    if tomllib is not None:
        return tomllib.loads(text)["tool"]["setuptools"]
    # 3.10 has no tomllib: the two keys this test reads, by their shape in our pyproject
    pkgs = re.search(r"^packages = \[(.*?)\]", text, re.S | re.M).group(1)
    dirs = re.search(r"^package-dir = \{(.*?)\}", text, re.M).group(1)
    return {
        "packages": re.findall(r'"([^"]+)"', pkgs),
        "package-dir": dict(re.findall(r'"([^"]+)" = "([^"]+)"', dirs)),
    }


def test_every_package_folder_is_listed_in_pyproject():
    cfg = _setuptools_config()
    listed = set(cfg["packages"])
    for top, name in MAPPED.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            pkg = ".".join((name, *rel))
            assert pkg in listed, f"{pkg} is missing from [tool.setuptools] packages"
    for top, name in MAPPED.items():
        assert cfg["package-dir"][name] == top


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
        [py, "-m", "compileall", "-q", "-x", "__snapshots__", *MAPPED, "tests", "bench"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
