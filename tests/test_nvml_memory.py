"""One definition of a GPU's memory (collect/nvml/memory.py): total = reserved + used + free,
`used` without the driver's reserve; through v1 alone the reserve is unknown and `used` holds
it. The same GPU read through either struct, and NVIDIA's mock library's answers rebuilt in the
simulator."""

from __future__ import annotations

import json

import pynvml
import pytest

from gputop_diag import sim
from gputop_diag.collect.nvml.memory import Memory, split_memory
from gputop_diag.model.codec import snapshot_to_json
from gputop_diag.monitor.sampler import Sampler
from gputop_diag.prometheus.dcgm_fields import _fb_used

MIB, GIB = 2**20, 2**30

# What NVIDIA's mock NVML (k8s-test-infra pkg/gpu/mocknvml, built from its main branch at
# 3b2b865, library version 550.163.01) answered for GPU 0 of its H100 profile
# (configs/mock-nvml-config-h100.yaml), read with this collector through LD_LIBRARY_PATH:
MOCK_H100_V2 = dict(total=85899345920, reserved=1073741824, used=0, free=84825604096)
# `gputop-diag snapshot --json` there: mem_total_bytes 85899345920, mem_reserved_bytes
# 1073741824, mem_used_bytes 0, mem_free_bytes 84825604096, mem_used_pct 0.0.
# Its v1 (nvmlDeviceGetMemoryInfo) answers used 0 and the same free: it leaves the reserve out
# of both, where a real driver's v1 counts it in `used` (total = used + free).
MOCK_H100_V1 = dict(total=85899345920, used=0, free=84825604096)


def v2_struct(total, reserved, used, free):
    m = pynvml.c_nvmlMemory_v2_t()
    m.version = pynvml.nvmlMemory_v2
    m.total, m.reserved, m.used, m.free = total, reserved, used, free
    return m


def v1_struct(total, used, free):
    m = pynvml.c_nvmlMemory_t()
    m.total, m.used, m.free = total, used, free
    return m


def test_v2_keeps_the_reserve_apart_as_the_mock_library_and_real_drivers_fill_it():
    got = split_memory(v2_struct(**MOCK_H100_V2))
    assert got == Memory(85899345920, GIB, 0, 84825604096)
    assert got.reserved + got.used + got.free == got.total


def test_a_v2_used_that_holds_the_reserve_has_it_taken_out():
    # the R525 reference's reading ("used also includes reserved"): used + free = total
    total, reserved, procs = 80 * GIB, 470 * MIB, 30 * GIB
    got = split_memory(v2_struct(total, reserved, reserved + procs, total - reserved - procs))
    assert got == Memory(total, reserved, procs, total - reserved - procs)
    # a driver that keeps it apart is left as it is, even with little in use
    apart = split_memory(v2_struct(total, reserved, 600 * MIB, total - reserved - 600 * MIB))
    assert apart.used == 600 * MIB


def test_v1_says_the_reserve_is_unknown_and_keeps_used_as_given():
    assert split_memory(v1_struct(**MOCK_H100_V1)) == Memory(85899345920, None, 0, 84825604096)
    real = split_memory(v1_struct(80 * GIB, 470 * MIB, 80 * GIB - 470 * MIB))
    assert real.reserved is None and real.used == 470 * MIB


def mock_like(driver=None):
    """The simulator's idle H100s set up as the mock library's profile: 80 GiB, 1 GiB reserve,
    nothing running."""
    src = sim.build("idle", driver=driver, noise=0)
    m = src.sim
    m.model = dict(m.model, mem_mib=81920, reserved_mib=1024)
    for g in m.gpus:
        g.model = m.model
    return Sampler(src, interval=1.0)


def test_the_collector_reads_the_simulator_as_the_mock_library_answers():
    snap = mock_like().sample()
    g = snap.gpus[0]
    got = {
        "total": g.mem_total_bytes,
        "reserved": g.mem_reserved_bytes,
        "used": g.mem_used_bytes,
        "free": g.mem_free_bytes,
    }
    assert got == MOCK_H100_V2
    assert g.mem_used_pct == 0.0
    doc = json.loads(json.dumps(snapshot_to_json(snap)))["gpus"][0]
    assert doc["mem_used_includes_reserved"] is False and doc["mem_used_bytes"] == 0


@pytest.mark.parametrize("scenario", ["capacity", "mig"])
def test_the_same_gpus_through_v1_and_v2_agree_with_the_definition(scenario):
    """R470 has no `_v2`: the same simulated machine, tick for tick, through each struct."""
    new = Sampler(sim.build(scenario, driver="R550", noise=0), interval=1.0)
    old = Sampler(sim.build(scenario, driver="R470", noise=0), interval=1.0)
    for _ in range(3):
        a, b = new.sample(), old.sample()
        new.sources.clock.sleep(1)
        old.sources.clock.sleep(1)
    docs = [snapshot_to_json(a)["gpus"], snapshot_to_json(b)["gpus"]]
    assert all(d["mem_used_includes_reserved"] is False for d in docs[0])
    assert all(d["mem_used_includes_reserved"] is True for d in docs[1])
    assert (scenario == "mig") == any(g.mig_instances for g in a.gpus)
    for g2, g1 in zip(a.gpus, b.gpus, strict=True):
        assert g2.mem_reserved_bytes and g1.mem_reserved_bytes is None
        assert g2.mem_total_bytes == g1.mem_total_bytes
        assert g2.mem_free_bytes == g1.mem_free_bytes  # the headroom does not depend on it
        assert g2.mem_total_bytes == g2.mem_reserved_bytes + g2.mem_used_bytes + g2.mem_free_bytes
        assert g1.mem_total_bytes == g1.mem_used_bytes + g1.mem_free_bytes
        assert g1.mem_used_bytes == g2.mem_used_bytes + g2.mem_reserved_bytes
        # used of what processes can use: the same share through v2, a little more through v1
        usable = g2.mem_total_bytes - g2.mem_reserved_bytes
        assert g2.mem_used_pct == pytest.approx(100 * g2.mem_used_bytes / usable)
        assert g1.mem_used_pct == pytest.approx(100 * g1.mem_used_bytes / g1.mem_total_bytes)
        # the exporter's FB_USED is DCGM's (no reserve) wherever the reserve is known
        assert _fb_used(g2) == pytest.approx(g2.mem_used_bytes / MIB)
        procs = sum(p.used_memory_bytes or 0 for p in a.gpu_processes if p.gpu_index == g2.index)
        if not g2.mig_instances:
            assert g2.mem_used_bytes == procs  # the simulated GPU: only its processes hold it
        for m2, m1 in zip(g2.mig_instances, g1.mig_instances, strict=True):
            assert m2.memory_total_bytes == m1.memory_total_bytes
            assert m2.memory_used_bytes < m1.memory_used_bytes  # v2: without its reserve
