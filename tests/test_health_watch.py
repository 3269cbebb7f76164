"""The health checks as the Monitor's slow source (`monitor/health.py`): read at the start, not
again within 30 s of the feed's clock, again after; each process's environment once; the static
parts (PCI scan, lspci, the fabric manager) every 5 minutes; a reader that raises becomes a
finding; a pass stays cheap."""

from __future__ import annotations

import dataclasses

import pytest

from gputop_diag import sim
from gputop_diag.model.health import health_from_json, health_to_json
from gputop_diag.monitor import health as watch_module
from gputop_diag.monitor.health import HEALTH_EVERY_S, STATIC_EVERY_S, HealthWatch
from gputop_diag.monitor.sampler import Sampler

HEALTH_COMMANDS = ("lspci", "systemctl", "nv-fabricmanager")


class Counting:
    """The simulator's procfs and command runner, counting the reads the watch makes."""

    def __init__(self, sources) -> None:
        self.environ: dict[int, int] = {}
        self.commands: dict[str, int] = {}
        self.pci_listings = 0
        inner_run = sources.run_command

        class ProcFS:
            def __getattr__(_, name):
                return getattr(sources.procfs_inner, name)

            def read_text(_, path):
                if path.endswith("/environ"):
                    pid = int(path.split("/")[2])
                    self.environ[pid] = self.environ.get(pid, 0) + 1
                return sources.procfs_inner.read_text(path)

            def listdir(_, path):
                if path == "/sys/bus/pci/devices":
                    self.pci_listings += 1
                return sources.procfs_inner.listdir(path)

        def run_command(argv, timeout):  # the health checks' (not the Monitor's squeue)
            if argv[0] in HEALTH_COMMANDS:
                self.commands[argv[0]] = self.commands.get(argv[0], 0) + 1
            return inner_run(argv, timeout)

        sources.procfs_inner = sources.procfs
        sources.procfs = ProcFS()
        sources.run_command = run_command


class Ticker:
    """The Monitor's tick as far as the watch sees it: sample (the Sampler alone, so that only
    this watch reads health, whether or not the Monitor has its own), then poll."""

    def __init__(self, src) -> None:
        self.sampler = Sampler(src)
        self.last = None

    def tick(self):
        self.last = self.sampler.collect()
        return self.last


def watching(scenario: str):
    src = sim.build(scenario)
    counts = Counting(src)
    return src, counts, Ticker(src), HealthWatch(src)


def step(src, m: Ticker, w: HealthWatch, seconds: float):
    """Move the feed's clock, tick, and poll the watch as the Monitor will."""
    if seconds:
        src.clock.sleep(seconds)
    return w.poll(m.tick())


def test_read_at_start_not_again_within_30_s_then_again():
    src, counts, m, w = watching("launch-blocking")
    first = step(src, m, w, 0)
    assert w.passes == 1 and first.facts.timestamp == src.clock.now()
    assert "env.cuda_launch_blocking" in {f.id for f in first.findings}
    read = (dict(counts.environ), dict(counts.commands), counts.pci_listings)
    for _ in range(2):  # 10 s and 20 s later: the same report, nothing read
        assert step(src, m, w, 10.0) is first
    assert w.passes == 1 and (dict(counts.environ), dict(counts.commands), counts.pci_listings) == (
        read
    )
    again = step(src, m, w, 10.0)  # 30 s after the first pass
    assert (
        w.passes == 2
        and again is not first
        and again.facts.timestamp - 30.0 == (first.facts.timestamp)
    )


def test_each_process_environment_is_read_once_and_a_new_one_when_it_appears():
    src, counts, m, w = watching("launch-blocking")
    snap = m.tick()
    procs = snap.gpu_processes
    pids = sorted({p.pid for p in procs})
    assert len(pids) >= 2
    late = pids[-1]
    fewer = dataclasses.replace(snap, gpu_processes=tuple(p for p in procs if p.pid != late))
    w.poll(fewer)
    assert late not in counts.environ and all(counts.environ[p] == 1 for p in pids[:-1])
    for _ in range(3):  # the late process joins a GPU: its environment is read, once
        src.clock.sleep(HEALTH_EVERY_S)
        report = w.poll(m.tick())
    assert w.passes == 4
    assert {p: counts.environ[p] for p in pids} == dict.fromkeys(pids, 1)
    [blocking] = [f for f in report.findings if f.id == "env.cuda_launch_blocking"]
    assert late in blocking.pids


def test_a_process_that_ends_is_dropped():
    src, counts, m, w = watching("launch-blocking")
    snap = m.tick()
    pids = sorted({p.pid for p in snap.gpu_processes})
    w.poll(snap)
    gone = pids[0]
    src.clock.sleep(HEALTH_EVERY_S)
    snap = m.tick()
    after = dataclasses.replace(
        snap, gpu_processes=tuple(p for p in snap.gpu_processes if p.pid != gone)
    )
    report = w.poll(after)
    [blocking] = [f for f in report.findings if f.id == "env.cuda_launch_blocking"]
    assert gone not in blocking.pids and set(blocking.pids) == set(pids[1:])
    assert gone not in {pid for pid, _ in w._envs}  # not kept for a pid that may be reused
    assert gone not in {e.pid for e in w.facts.processes.envs}


def test_a_reused_pid_is_read_again():
    src, counts, m, w = watching("launch-blocking")
    snap = m.tick()
    w.poll(snap)
    pid = snap.gpu_processes[0].pid
    inner = src.procfs_inner.read_text

    def later_start(path):  # the same pid, another process: a later start time
        text = inner(path)
        if path == f"/proc/{pid}/stat":
            head, _, rest = text.rpartition(")")
            fields = rest.split()
            fields[19] = str(int(fields[19]) + 100)
            text = head + ") " + " ".join(fields) + "\n"
        return text

    src.procfs_inner.read_text = later_start
    src.clock.sleep(HEALTH_EVERY_S)
    w.poll(m.tick())
    assert counts.environ[pid] == 2


def test_the_static_parts_are_read_at_start_and_every_five_minutes():
    src, counts, m, w = watching("fabric-manager-down")
    step(src, m, w, 0)
    static = (counts.pci_listings, counts.commands.get("lspci"), counts.commands["systemctl"])
    assert static == (1, 1, 1) and w.static_reads == 1
    for _ in range(int(STATIC_EVERY_S // HEALTH_EVERY_S) - 1):  # up to 270 s: passes, no scan
        report = step(src, m, w, HEALTH_EVERY_S)
    assert w.passes == 10 and w.static_reads == 1
    assert (counts.pci_listings, counts.commands["lspci"], counts.commands["systemctl"]) == static
    assert "fabric.manager_inactive" in {f.id for f in report.findings}  # the last answer stands
    step(src, m, w, HEALTH_EVERY_S)  # 300 s
    assert w.static_reads == 2 and counts.commands["systemctl"] == 2 and counts.pci_listings == 2


def test_links_are_read_again_on_every_pass(monkeypatch):
    src, counts, m, w = watching("pcie-downtrained")
    first = step(src, m, w, 0)
    assert "pcie.link_downtrained" in {f.id for f in first.findings}
    reads = []
    inner = src.procfs_inner.read_text
    src.procfs_inner.read_text = lambda p: (reads.append(p), inner(p))[1]
    step(src, m, w, HEALTH_EVERY_S)
    assert any(p.endswith("/current_link_width") for p in reads)
    assert not any(p.endswith("/class") for p in reads)  # the bus is not listed again


def test_a_reader_that_raises_becomes_a_finding_never_a_crash(monkeypatch):
    src, counts, m, w = watching("ib-port-down")

    def boom(procfs):
        raise RuntimeError("parser bug")

    monkeypatch.setattr(watch_module, "read_interconnect", boom)
    report = step(src, m, w, 0)  # never read: its checks are left out, not judged on nothing
    failed = [f for f in report.findings if f.id == "health.check_failed"]
    assert [f.title for f in failed] == [
        "health check failed: interconnect: RuntimeError: parser bug"
    ]
    assert not any(f.check == "infiniband" for f in report.findings)
    assert any(f.check == "environment" for f in report.findings)  # the other checks go on
    monkeypatch.undo()
    report = step(src, m, w, HEALTH_EVERY_S)
    assert "ib.port_down" in {f.id for f in report.findings}
    assert "health.check_failed" not in {f.id for f in report.findings}
    monkeypatch.setattr(watch_module, "read_interconnect", boom)
    report = step(src, m, w, HEALTH_EVERY_S)  # failing after a good read: that read stands
    ids = {f.id for f in report.findings}
    assert {"health.check_failed", "ib.port_down"} <= ids


def test_a_judgement_that_raises_is_said(monkeypatch):
    src, counts, m, w = watching("compute-bound")

    def broken(facts):
        raise ValueError("bad table")

    monkeypatch.setattr(watch_module, "judge", broken)
    report = step(src, m, w, 0)
    assert [f.title for f in report.findings] == [
        "health check failed: judgement: ValueError: bad table"
    ]


def test_the_report_is_the_recorded_form():
    src, counts, m, w = watching("dataloader-d-state")
    report = step(src, m, w, 0)
    assert report.facts.processes.envs == () and w.facts.processes.stuck  # facts kept aside
    assert health_from_json(health_to_json(report)) == report


@pytest.mark.parametrize("scenario", ["dataloader-d-state", "fabric-manager-down"])
def test_a_pass_is_cheap_on_the_8_gpu_demo(scenario):
    """Loose bound (a shared CI core): bench/health_watch.py measures it (about 3 ms)."""
    src, counts, m, w = watching(scenario)
    step(src, m, w, 0)
    costs = []
    for _ in range(5):
        step(src, m, w, HEALTH_EVERY_S)
        costs.append(w.last_pass_s)
    assert len(m.last.gpus) == 8
    assert sorted(costs)[2] < 0.1
