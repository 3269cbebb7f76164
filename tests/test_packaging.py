"""A normal (non-editable) install must carry every package: pyproject lists them by hand."""

import pathlib

import pytest

tomllib = pytest.importorskip("tomllib")

ROOT = pathlib.Path(__file__).resolve().parent.parent
MAPPED = {"gputop_diag": "gputop_diag", "tui": "gputop_diag.tui", "widgets": "gputop_diag.widgets"}


def test_every_package_folder_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    for top, name in MAPPED.items():
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / top).parts
            pkg = ".".join((name, *rel))
            assert pkg in listed, f"{pkg} is missing from [tool.setuptools] packages"
    for top, name in MAPPED.items():
        assert cfg["package-dir"][name] == top
