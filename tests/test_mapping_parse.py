"""CUDA_VISIBLE_DEVICES read as CUDA reads it (PyTorch's copy of the parser,
torch/cuda/__init__.py `_parse_visible_devices`): strtoul-like index entries, a repeated
device empties the set, a UUID list ends at the first entry of another form."""

from __future__ import annotations

import pytest

from gputop_diag.mapping.checks import visibility_findings
from gputop_diag.mapping.ordinals import Device, resolve

U = [f"GPU-{k}{k}aa{k}bcd-0000-1111-2222-33334444555{k}" for k in range(4)]
SAME = [Device(f"gpu{k}", k, "NVIDIA H100", U[k]) for k in range(4)]


@pytest.mark.parametrize(
    ("cvd", "visible"),
    [
        ("0,0,1", []),  # a repeated ordinal: the empty set, not the first entries
        ("1,1", []),
        ("2,1,2", []),
        (f"{U[1]},{U[1][:12]}", []),  # the same device by UUID and by prefix
        ("1a,0", ["gpu1", "gpu0"]),  # strtoul: leading digits count
        ("1gpu2,2ampere", ["gpu1", "gpu2"]),
        ("+2", ["gpu2"]),
        ("0,2,-1,1", ["gpu0", "gpu2"]),  # a negative value ends the list
        ("0,foo,1", ["gpu0"]),  # no leading digit: ends it
        ("0,7,1", ["gpu0"]),  # past the device count: ends it
        (f"{U[2]},1", ["gpu2"]),  # a UUID list ends at an entry that is not a UUID
        (f"1,{U[2]}", ["gpu1"]),  # an index list ends at a UUID
    ],
)
def test_cuda_reads_it_so(cvd, visible):
    assert list(resolve(SAME, cvd, "PCI_BUS_ID").visible) == visible


def test_a_repeated_entry_is_said_to_empty_the_set():
    v = resolve(SAME, "0,0,1", None)
    assert v.visible == () and v.emptied
    [f] = visibility_findings("this shell", v)
    assert f.kind == "invalid_entry" and f.severity == "warning"
    assert "'0' repeats" in f.text and "no device at all" in f.text


def test_leading_digits_entry_is_said():
    v = resolve(SAME, "1a,0", None)
    assert v.entries[0].key == "gpu1" and "read as 1" in v.entries[0].why
    [f] = visibility_findings("this shell", v)
    assert f.kind == "loose_entry" and f.severity == "info" and "read as 1" in f.text


def test_the_fastest_first_tie_rule_is_said_to_be_usual_not_promised(monkeypatch, capsys):
    from gputop_diag.cli import main

    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    main(["--demo", "compute-bound", "mapping"])
    out = capsys.readouterr().out
    assert "usually follows the PCI bus id" in out and "not promised by NVIDIA" in out


def test_a_process_that_sees_no_device_is_said_so():
    import dataclasses

    from gputop_diag import sim
    from gputop_diag.collect.mapping import collect_mapping
    from gputop_diag.commands.common import sample_once

    src = sim.build("compute-bound", host_env={})
    rank = src.sim.by_gpu[2][0]
    rank.environ["CUDA_VISIBLE_DEVICES"] = "0,0"  # a repeated entry: no device at all
    src = dataclasses.replace(src, environ={"CUDA_DEVICE_ORDER": "PCI_BUS_ID"})
    m = collect_mapping(sample_once(src, True), src)
    [c] = [c for c in m.conclusions if c.startswith(f"pid {rank.pid}")]
    assert "leaves no CUDA device visible" in c and "cuda:0..-1" not in c
