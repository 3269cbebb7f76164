"""Start-up: the parser is built without importing any command, a command's own options arrive
(its module imported) only when it is chosen, and the quick paths leave the heavy modules alone.

Each check runs in a fresh interpreter and reads `sys.modules`; timing is `bench/startup.py`'s."""

from __future__ import annotations

import argparse
import importlib
import json
import re
import subprocess
import sys

import pytest

from gputop_diag.cli import COMMANDS

# What no command line needs before it has chosen a command (nor `--help`, `--version`).
HEAVY = (
    "textual",
    "prometheus_client",
    "pynvml",
    "psutil",
    "gputop_diag.model",
    "gputop_diag.monitor",
    "gputop_diag.monitor.core",
    "gputop_diag.collect",
    "gputop_diag.sanitize",
    "gputop_diag.sanitize.sanitizer",
    "gputop_diag.recording",
    "gputop_diag.diagnose",
    "gputop_diag.sim",
    "gputop_diag.tui",
)
# What `snapshot` (one sample, no diagnosis) never needs: the Monitor's classifier, Xid triage,
# kernel log and Slurm, recordings and the sanitizer (unless asked), the other views.
NOT_FOR_SNAPSHOT = (
    "textual",
    "prometheus_client",
    "gputop_diag.tui",
    "gputop_diag.monitor.core",
    "gputop_diag.diagnose.classify",
    "gputop_diag.collect.kernlog",
    "gputop_diag.collect.slurm",
    "gputop_diag.recording",
    "gputop_diag.recording.store",
    "gputop_diag.sanitize.sanitizer",
    "gputop_diag.report",
    "gputop_diag.fleet",
    "gputop_diag.prometheus",
)
SHARED = {"gputop_diag.commands", "gputop_diag.commands.options", "gputop_diag.commands.common"}


def loaded_after(body: str) -> tuple[list[str], str]:
    """(`sys.modules` after running `body` in a fresh interpreter, what it printed)."""
    code = (
        "import contextlib, io, json, sys\n"
        "from gputop_diag.cli import build_parser, main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):\n"
        "    try:\n"
        + "".join(f"        {line}\n" for line in body.splitlines())
        + "    except SystemExit:\n"
        "        pass\n"
        "print(json.dumps([sorted(sys.modules), out.getvalue()]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    modules, printed = json.loads(r.stdout)
    return modules, printed


def commands_in(modules: list[str]) -> set[str]:
    """The command modules loaded, a command's own helpers (`xid_render`) under its name."""
    prefix = "gputop_diag.commands."
    names = {m.removeprefix(prefix) for m in modules if m.startswith(prefix)}
    return {prefix + n.split("_")[0] for n in names} - SHARED


@pytest.mark.parametrize(
    "body",
    ["build_parser()", "main(['--help'])", "main(['--version'])", "main(['--demo', '--help'])"],
)
def test_the_parser_and_help_import_no_command(body):
    modules, printed = loaded_after(body)
    assert printed or body == "build_parser()"
    assert commands_in(modules) == set()
    assert "gputop_diag.commands.common" not in modules
    assert [m for m in HEAVY if m in modules] == []


def test_the_top_level_help_names_every_command():
    _, printed = loaded_after("main(['--help'])")
    for name, (_, helptext) in COMMANDS.items():
        assert re.search(rf"^\s+{name}\s", printed, re.M), name
        assert helptext.split()[0] in printed


@pytest.mark.parametrize("argv", [["snapshot", "--json"], ["snapshot"], ["snapshot", "--fast"]])
def test_snapshot_imports_only_what_it_uses(argv):
    modules, printed = loaded_after(f"main({['--demo', 'idle', *argv]!r})")
    assert printed
    assert commands_in(modules) == {"gputop_diag.commands.snapshot"}
    assert [m for m in NOT_FOR_SNAPSHOT if m in modules] == []


def test_snapshot_of_this_machine_leaves_the_health_model_alone():
    """`model.health` (a dozen dataclasses, a tenth of the start-up) arrives with a health report
    or the simulator's health faults, not with a sample of the machine (here: no driver, exit 3
    after the host figures; on a GPU machine, its GPUs)."""
    modules, _ = loaded_after("main(['snapshot', '--json'])")
    assert "gputop_diag.model.codec" in modules and "gputop_diag.monitor.sampler" in modules
    assert "gputop_diag.model.health" not in modules
    modules, _ = loaded_after("main(['--demo', 'idle', 'health', '--json'])")
    assert "gputop_diag.model.health" in modules


def test_snapshot_still_reads_a_recording_and_sanitizes(tmp_path):
    """The modules left out above arrive when the command line asks for them."""
    rec = tmp_path / "r.jsonl"
    modules, _ = loaded_after(
        f"main(['--demo', 'idle', 'record', '-o', {str(rec)!r}, '--seconds', '2'])"
    )
    assert commands_in(modules) == {"gputop_diag.commands.record"}
    modules, printed = loaded_after(f"main(['--replay', {str(rec)!r}, 'snapshot', '--json'])")
    assert json.loads(printed)["schema"] == "gputop-diag.snapshot/1"
    assert "gputop_diag.recording.store" in modules
    modules, printed = loaded_after("main(['--demo', 'idle', 'snapshot', '--sanitize'])")
    assert "gputop_diag.sanitize.sanitizer" in modules and printed


def own_options(module_name: str) -> list[str]:
    """The option strings (and positional metavars) a command's `add_arguments` adds."""
    p = argparse.ArgumentParser(add_help=False)
    importlib.import_module(f"gputop_diag.commands.{module_name}").add_arguments(p)
    out = []
    for action in p._actions:
        if action.help == argparse.SUPPRESS:  # kept for old scripts, hidden on purpose
            continue
        out += action.option_strings or [action.metavar or action.dest]
    assert out
    return out


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_command_help_lists_all_its_options_and_imports_only_it(name):
    module_name = COMMANDS[name][0]
    modules, printed = loaded_after(f"main([{name!r}, '--help'])")
    assert commands_in(modules) == {f"gputop_diag.commands.{module_name}"}
    assert printed.startswith("usage: ")
    for opt in [*own_options(module_name), "--demo", "--replay"]:
        assert re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", printed), (name, opt)


def test_the_full_parser_has_every_command_s_options():
    """`build_parser(full=True)` (every command's options at once) parses what the lazy one
    does."""
    from gputop_diag.cli import build_parser

    argv = ["--demo", "idle", "diagnose", "--seconds", "5", "--json", "--sanitize"]
    assert vars(build_parser(full=True).parse_args(argv)) == vars(build_parser().parse_args(argv))


def test_snapshot_takes_its_first_gpm_samples_before_the_model_loads():
    """The GPM pair's 0.1 s wait overlaps the model's dataclasses and the collectors loading
    (`collect/nvml/head.py`): when the head start samples this machine's NVML (here without a
    driver: it fails quietly, and the collector says why), none of them is loaded yet. (The
    simulator, `--demo`, loads the model itself.)"""
    modules, printed = loaded_after(
        "import gputop_diag.collect.nvml.head as head\n"
        "begin = head.GpmHeadStart.begin\n"
        "def spy(self):\n"
        "    spy.loaded = sorted(sys.modules)\n"
        "    return begin(self)\n"
        "head.GpmHeadStart.begin = spy\n"
        "main(['snapshot', '--json', '--rates'])\n"
        "print(json.dumps(spy.loaded))"
    )
    at_head = json.loads(printed.splitlines()[-1])
    assert "pynvml" in at_head and "gputop_diag.commands.snapshot" in at_head
    assert [m for m in at_head if m.startswith("gputop_diag.model")] == []
    assert "gputop_diag.monitor.sampler" not in at_head
    assert "gputop_diag.model.codec" in modules  # then everything the snapshot needs


def test_snapshot_takes_the_hosts_first_readings_before_the_model_loads():
    """One reading (the default): the host's CPU % and disk rates are averaged over the model's
    and the collectors' loading (`collect/host_head.py`): when the head start reads psutil,
    none of them is loaded yet, nor NVML; no GPM samples are taken."""
    modules, printed = loaded_after(
        "import gputop_diag.collect.host_head as head\n"
        "import gputop_diag.collect.nvml.head as gpm\n"
        "begin = head.HostHead.begin\n"
        "def spy(self):\n"
        "    spy.loaded = sorted(sys.modules)\n"
        "    return begin(self)\n"
        "head.HostHead.begin = spy\n"
        "def no_gpm(self):\n"
        "    raise AssertionError('GPM sampled for one reading')\n"
        "gpm.GpmHeadStart.begin = no_gpm\n"
        "main(['snapshot', '--json'])\n"
        "print(json.dumps(spy.loaded))"
    )
    at_head = json.loads(printed.splitlines()[-1])
    assert "gputop_diag.commands.snapshot" in at_head and "pynvml" not in at_head
    assert [m for m in at_head if m.startswith("gputop_diag.model")] == []
    assert "gputop_diag.monitor.sampler" not in at_head
    assert "gputop_diag.model.codec" in modules
