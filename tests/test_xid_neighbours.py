"""The kernel messages of a GPU's neighbours (xid/neighbours.py) and a GPU fallen off the bus with
a bus id of any form: parsed in the shapes leptonai/gpud's matchers read and in variants built
differently (other bus ids, hosts, pids, interface names, prefixes), triaged, and turned into
health findings that bear on the class they slow (xid/health.py)."""

from __future__ import annotations

import random
from datetime import datetime, timezone

import pytest

from gputop_diag import sim
from gputop_diag.collect.kernlog.watch import read_kernel_health
from gputop_diag.diagnose.health_evidence import ALERT_ONLY, classes_of
from gputop_diag.health import judge, with_findings
from gputop_diag.model.health import HealthFacts, HealthReport
from gputop_diag.monitor.core import Monitor
from gputop_diag.sanitize.sanitizer import Sanitizer
from gputop_diag.xid.events import parse_lines
from gputop_diag.xid.health import kernel_findings
from gputop_diag.xid.triage import triage
from gputop_diag.xid.types import GpuRef, gpu_name, gpu_refs, sanitized

T0 = datetime(2026, 1, 15, 9, 0, tzinfo=timezone.utc).timestamp()

# The peers' own example lines (gpud's kmsg matchers and their tests), verbatim.
GPUD = {
    "nccl_segfault": "[Thu Oct 10 03:06:53 2024] pt_main_thread[2536443]: segfault at "
    "7f797fe00000 ip 00007f7c7ac69996 sp 00007f7c12fd7c30 error 4 in "
    "libnccl.so.2[7f7c7ac00000+d3d3000]",
    "peermem_error": "[Thu Sep 19 02:29:46 2024] nvidia-peermem nv_get_p2p_free_callback:127 "
    "ERROR detected invalid context, skipping further processing",
    "nic_power": "[Sun Dec  1 14:54:40 2024] ny2g1r12hh2 kernel: mlx5_core 0000:5c:00.0: "
    "mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe slot (27W).",
    "nic_temperature": "[Sun Dec  1 14:54:40 2024] mlx5_port_module_event:1131:(pid 0): Port "
    "module event[error]: module 0, Cable error, High Temperature",
    "nvlink_training": "NVRM: knvlinkUpdatePostRxDetectLinkMask_IMPL: Failed to update Rx "
    "Detect Link mask!",
}


def one(line: str):
    parsed = parse_lines([line], "test", ref_time=T0 + 86400)
    assert len(parsed.events) == 1, (line, parsed.events)
    return parsed.events[0]


@pytest.mark.parametrize("kind", sorted(GPUD))
def test_the_peers_lines_are_events(kind):
    assert one(GPUD[kind]).kind == kind


def _stamp(form: str, t: float, host: str) -> str:
    d = datetime.fromtimestamp(t, tz=timezone.utc)
    return {
        "syslog": f"{d:%b} {d.day:2d} {d:%H:%M:%S} {host} kernel: ",
        "iso": f"{d:%Y-%m-%dT%H:%M:%S}.123456+00:00 {host} kernel: ",
        "dmesg-T": f"[{d:%a %b} {d.day:2d} {d:%H:%M:%S %Y}] ",
        "kmsg": f"3,{random.randint(1, 99999)},{random.randint(10**9, 10**11)},-;",
        "dmesg-x": f"kern  :err   : {d:%Y-%m-%dT%H:%M:%S},{d.microsecond:06d}+00:00 ",
    }[form]


FORMS = ("syslog", "iso", "dmesg-T", "kmsg", "dmesg-x")


@pytest.mark.parametrize("seed", range(6))
def test_lines_built_differently_are_the_same_events(seed):
    rnd = random.Random(seed)
    host = rnd.choice(("gpu-a17", "dgx-h100-042.cluster.example", "node7", "x"))
    form = rnd.choice(FORMS)
    bus = f"{rnd.randrange(0x10000):04x}:{rnd.randrange(256):02x}:{rnd.randrange(32):02x}"
    fn = rnd.randrange(8)
    pid = rnd.randrange(2, 4_000_000)
    comm = rnd.choice(("python3", "pt_main_thread", "torchrun w0", "a"))
    ifname = rnd.choice(("enp12s0f0np0", "ibp24s0", "ens1f1np1", "eth3"))
    func = rnd.choice(("nv_get_p2p_free_callback", "nv_mem_put_pages_common"))
    lib = rnd.choice(("libnccl.so.2", "libnccl.so.2.21.5", "libnccl-net.so"))
    peer = rnd.randrange(18)
    module = rnd.randrange(8)
    cases = {
        f"{comm}[{pid}]: segfault at {rnd.randrange(2**40):x} ip {rnd.randrange(2**47):016x} "
        f"sp {rnd.randrange(2**47):016x} error {rnd.choice((4, 6, 14))} in "
        f"{lib}[7f7c7ac00000+d3d3000] likely on CPU 3 (core 3, socket 0)": (
            "nccl_segfault",
            None,
        ),
        f"traps: {comm}[{pid}] general protection fault ip:7f2a1c0a1b2c sp:7f29f8dffa10 "
        f"error:0 in {lib}[7f2a1c000000+1d3d000]": ("nccl_segfault", None),
        f"nvidia-peermem {func}:{rnd.randrange(60, 400)} ERROR detected invalid context, "
        "skipping further processing": ("peermem_error", None),
        f"mlx5_core {bus}.{fn} {ifname}: Link down": ("nic_link_down", f"{bus}.{fn}"),
        f"mlx5_core {bus}.{fn}: mlx5_port_module_event:{rnd.randrange(2000)}:(pid 0): Port "
        f"module event: module {module}, Cable unplugged": ("nic_cable", f"{bus}.{fn}"),
        f"mlx5_core {bus}.{fn}: mlx5_port_module_event:1131:(pid {pid}): Port module "
        f"event[error]: module {module}, Cable error, Bad or shorted cable/module": (
            "nic_cable_error",
            f"{bus}.{fn}",
        ),
        f"mlx5_core {bus}.{fn}: mlx5_pcie_event:299:(pid {pid}): Detected insufficient power "
        f"on the PCIe slot ({rnd.randrange(10, 75)}W).": ("nic_power", f"{bus}.{fn}"),
        f"NVRM: knvlinkDiscoverPostRxDetLinks_GB100_REV{rnd.randrange(3)}: Getting "
        f"peer{peer}{rnd.choice(('', chr(39) + 's'))} postRxDetLinkMask failed!": (
            "nvlink_training",
            None,
        ),
        f"NVRM: GPU {bus[5:]}.0: GPU has fallen off the bus.": (
            "fallen_off_bus",
            "0000:" + bus[5:],
        ),
        f"NVRM: GPU {bus}.0: GPU has fallen off the bus.": ("fallen_off_bus", bus),
    }
    for text, (kind, pci) in cases.items():
        e = one(_stamp(form, T0, host) + text)
        assert e.kind == kind, text
        if pci is not None:
            assert e.pci == pci.lower(), text
        if kind == "nccl_segfault":
            assert (e.pid, e.process_name, e.device) == (pid, comm, lib), text
        if kind == "nic_link_down":
            assert e.device == ifname


def test_noise_is_not_an_event():
    for text in (
        "mlx5_core 0000:d2:00.0: mlx5_cmd_out_err:838:(pid 268269): ACCESS_REG(0x805) "
        "op_mod(0x1) failed, status bad resource(0x5), syndrome (0x305684), err(-22)",
        "mlx5_core 0000:0c:00.0: firmware version: 28.39.1002",
        "python3[4242]: segfault at 0 ip 00007f00 sp 00007ffc error 4 in libc.so.6[7f00+1000]",
        "e1000e 0000:00:1f.6 eno1: NIC Link is Down",
        "nvidia-peermem: module loaded",
    ):
        assert parse_lines([text], "t", ref_time=T0).events == [], text


def kernel_line(sources, at: float, text: str) -> None:
    sources.sim.kernel_lines.append((at, text))
    sources.sim.kernel_lines.sort(key=lambda x: x[0])


def test_a_gpu_fallen_off_the_bus_without_its_domain_is_the_xid_79_path():
    """The live view turns the driver's line, its bus id without the PCI domain, into an Xid 79
    of the GPU NVML names at that bus id (as it does with the domain)."""
    sources = sim.build("compute-bound")
    gpu2 = sources.sim.gpus[2]
    start = sources.clock.now()
    bus = gpu2.xid_pci.split(":", 1)[1] + ".0"  # "0000:3b:00" -> "3b:00.0"
    kernel_line(sources, start + 12.5, f"NVRM: GPU {bus}: GPU has fallen off the bus.")
    m = Monitor(sources)
    m.run_for(25)
    got = [(x.xid, x.gpu_index, x.source) for s in m.history.snapshots() for x in s.xid_events]
    assert got == [(79, 2, "kernel-log")]
    assert any(a.kind == "xid" and a.code == 79 for a in m.last.diagnosis.alerts)
    # health tells the same story: GPU 2, by its bus id through NVML's, critical
    live = [f for f in m.last.snapshot.health.findings if f.id == "kernel.gpu_fell_off_bus"]
    once = [f for f in read_kernel_health(sources, gpu_refs(m.last.snapshot)) if f.severity != "ok"]
    for (f,) in (live, once):
        assert f.severity == "critical" and f.gpus == (2,) and f.check == "kernel_log"
        assert f.title.startswith(f"GPU 2 (bus {gpu2.xid_pci}) fell off the bus (Xid 79")
        assert "until the node reboots" in f.evidence[-1].text


def test_an_xid_79_and_the_drivers_line_are_one_health_finding():
    lines = _lines(
        (0, "NVRM: Xid (PCI:0000:3b:00): 79, pid=7, name=python, GPU has fallen off the bus."),
        (1, "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."),
        (2, "NVRM: GPU 5d:00.0: GPU has fallen off the bus."),
    )
    gpus = (GpuRef(3, "GPU-3", "0000:3b:00"), GpuRef(5, "GPU-5", "0000:5d:00"))
    found = kernel_findings(parse_lines(lines, "journal").events, T0 + 3 * 86400, gpus=gpus)
    falls = [f for f in found if f.id == "kernel.gpu_fell_off_bus"]
    assert [(f.gpus, f.severity) for f in falls] == [((3,), "critical"), ((5,), "critical")]
    assert "fell off the bus (Xid 79) (last at" in falls[0].title  # one fall, said twice
    assert falls[0].pids == (7,)
    assert "kernel.neighbours" in {f.id for f in found}  # the neighbours' check still says ok
    fall = kernel_findings(parse_lines(lines[2:], "journal").events, T0)[0]  # NVML unknown
    assert fall.id == "kernel.gpu_fell_off_bus" and fall.gpus == ()
    assert fall.title.startswith("GPU at 0000:5d:00 fell off the bus")


def test_the_live_view_and_the_health_command_read_the_neighbours_messages():
    sources = sim.build("compute-bound")
    start = sources.clock.now()
    for k in range(3):
        kernel_line(
            sources,
            start + 3 + k,
            "nvidia-peermem nv_get_p2p_free_callback:127 ERROR detected invalid context, "
            "skipping further processing",
        )
    m = Monitor(sources)
    m.run_for(25)
    ids = {f.id: f for f in m.last.snapshot.health.findings}
    assert ids["kernel.peermem_error"].severity == "warning"
    assert "×3" in ids["kernel.peermem_error"].title
    once = {f.id for f in read_kernel_health(sources)}  # `gputop-diag health`: since boot
    assert "kernel.peermem_error" in once


def _lines(*rows: tuple[float, str]) -> list[str]:
    return [_stamp("iso", T0 + t, "gpu-a17") + text for t, text in rows]


FLAPPING_PORT = _lines(
    (0, "mlx5_core 0000:0c:00.1 enp12s0f1np1: Link down"),
    (40, "mlx5_core 0000:0c:00.1 enp12s0f1np1: Link up"),
    (600, "mlx5_core 0000:0c:00.1 enp12s0f1np1: Link down"),
    (650, "mlx5_core 0000:0c:00.1 enp12s0f1np1: Link up"),
    (1200, "mlx5_core 0000:0c:00.1 enp12s0f1np1: Link down"),
    (1230, "mlx5_core 0000:0c:00.1 enp12s0f1np1: Link up"),
)
BROUGHT_UP = _lines(
    (5, "mlx5_core 0000:5c:00.0 enp92s0f0np0: Link down"),
    (9, "mlx5_core 0000:5c:00.0 enp92s0f0np0: Link up"),
)


def findings_of(lines: list[str], now: float = T0 + 3600):
    return {f.id: f for f in kernel_findings(parse_lines(lines, "journal").events, now)}


def test_a_flapping_port_is_a_communication_warning_and_a_brought_up_port_is_not():
    got = findings_of(FLAPPING_PORT + BROUGHT_UP)
    flap = got["kernel.nic_port_flapping"]
    assert flap.severity == "warning" and flap.bears_on == ("communication",)
    assert "enp12s0f1np1" in flap.title and "3 times" in flap.title
    brought_up = got["kernel.nic_port"]
    assert brought_up.severity == "info" and "enp92s0f0np0" in brought_up.title
    # a port that went down and never came back is a warning
    down = findings_of(_lines((0, "mlx5_core 0000:5c:00.0 ibp92s0: Link down")))
    assert down["kernel.nic_port"].severity == "warning"
    assert "not back up" in down["kernel.nic_port"].title


def test_the_triage_names_the_nic_not_a_gpu_and_flags_the_flapping():
    events = parse_lines(FLAPPING_PORT, "journal").events
    result = triage(events)
    assert {gpu_name(e) for e in result.events} == {"NIC 0000:0c:00.1 enp12s0f1np1"}
    assert [f.evidence for f in result.findings] == ["network port flapping"]
    assert not any(g.gpu.startswith("GPU") for g in result.groups)


def test_peermem_nvlink_and_nccl_route_to_their_classes():
    lines = _lines(
        (0, GPUD["peermem_error"].split("] ", 1)[1]),
        (1, GPUD["peermem_error"].split("] ", 1)[1]),
        (2, "NVRM: knvlinkDiscoverPostRxDetLinks_GH100: Getting peer0's postRxDetLinkMask failed!"),
        (3, GPUD["nccl_segfault"].split("] ", 1)[1]),
    )
    got = findings_of(lines)
    assert got["kernel.peermem_error"].bears_on == ("communication",)
    assert "×2" in got["kernel.peermem_error"].title
    assert got["kernel.nvlink_training"].bears_on == ("communication",)
    crash = got["kernel.nccl_segfault"]
    assert crash.severity == "critical" and crash.pids == (2536443,)
    assert "pid 2536443 (pt_main_thread)" in crash.title
    # the diagnosis: communication evidence for a job over several GPUs, the crash an alert
    assert classes_of(got["kernel.peermem_error"], spanning=True) == ("communication",)
    assert classes_of(got["kernel.nic_port"] if "kernel.nic_port" in got else crash, True) == ()
    assert "kernel.nccl_segfault" in ALERT_ONLY


def test_old_messages_are_history_and_an_unreadable_log_says_so():
    old = findings_of(FLAPPING_PORT, now=T0 + 3 * 86400)
    assert old["kernel.nic_port_flapping"].severity == "info"
    quiet = kernel_findings((), T0)
    assert [(f.id, f.severity) for f in quiet] == [("kernel.neighbours", "ok")]
    denied = kernel_findings((), T0, readable=False, problem="journal: permission denied")
    assert denied[0].id == "kernel.unreadable" and "permission denied" in denied[0].title


def test_kernel_findings_take_their_place_in_the_report():
    kernel = kernel_findings(parse_lines(FLAPPING_PORT, "journal").events, T0 + 3600)
    report = judge(HealthFacts(T0, "node"), kernel)
    ids = [f.id for f in report.findings]
    assert "kernel.nic_port_flapping" in ids
    assert ids.index("kernel.nic_port_flapping") < ids.index("env.ok")  # warnings first
    again = with_findings(report, kernel_findings((), T0))  # the same check, read again
    assert "kernel.nic_port_flapping" not in [f.id for f in again.findings]
    assert isinstance(again, HealthReport) and "kernel.neighbours" in [f.id for f in again.findings]


def test_sanitized_events_hide_interfaces_bus_ids_and_pids():
    events = parse_lines(
        FLAPPING_PORT + _lines((5, GPUD["nccl_segfault"].split("] ", 1)[1])), "journal"
    ).events
    clean = sanitized(events)
    for e in clean:
        assert "enp12s0f1np1" not in repr(e) and "0000:0c:00.1" not in repr(e)
        assert "2536443" not in repr(e) and "pt_main_thread" not in repr(e)
    assert {e.device for e in clean} == {"nic-1", "libnccl.so.2"}
    # health findings' text through the one sanitizer: no bus id, no process name
    s = Sanitizer()
    for f in kernel_findings(events, T0 + 3600):
        for text in (f.title, *(e.text for e in f.evidence)):
            out = s.text(text)
            assert "0000:0c:00.1" not in out
