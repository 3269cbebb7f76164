"""The health readers over real layouts: a /sys tree with real symlinks and bridges (read through
the real ProcFS under a temporary root), `lspci -vvv` output with and without root, InfiniBand
ports, /proc/<pid>/stat states, environ, mountinfo and fdinfo; unreadable files, absent trees,
and one real process of this machine started with CUDA_LAUNCH_BLOCKING=1."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gputop_diag.collect.health.fabric import read_fabric_manager, read_interconnect
from gputop_diag.collect.health.pci import (
    NO_ROOT,
    bridges_above,
    parse_acs,
    parse_aer,
    parse_lspci,
    read_pci,
)
from gputop_diag.collect.health.procs import (
    parse_environ,
    parse_mountinfo,
    parse_state,
    read_environments,
    read_mounts,
    read_processes,
)
from gputop_diag.health import judge
from gputop_diag.model.health import ABSENT, DENIED, HealthFacts, ProcessFacts
from gputop_diag.sources import CommandResult, RealProcFS


class RootedProcFS(RealProcFS):
    """The real ProcFS under a temporary root (real files, real symlinks, real `..`), with paths
    made unreadable on demand (PermissionError, as for another user's /proc files)."""

    def __init__(self, root: Path, denied: tuple[str, ...] = ()) -> None:
        self.root = str(root)
        self.denied = denied

    def _check(self, path: str) -> None:
        if any(path.startswith(d) for d in self.denied):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    def read_text(self, path: str) -> str:
        self._check(path)
        return super().read_text(self.root + path)

    def exists(self, path: str) -> bool:
        return super().exists(self.root + path)

    def listdir(self, path: str) -> list[str]:
        self._check(path)
        return super().listdir(self.root + path)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


AER_COR = (
    "RxErr 0\nBadTLP {tlp}\nBadDLLP 2\nRollover 0\nTimeout 0\nNonFatalErr 0\nCorrIntErr 0\n"
    "HeaderOF 0\nTOTAL_ERR_COR {total}\n"
)
AER_UNCOR = (
    "Undefined 0\nDLP 0\nSDES 0\nTLP 0\nFCP 0\nCmpltTO {cto}\nCmpltAbrt 0\nUnxCmplt 0\nRxOF 0\n"
    "MalfTLP 0\nECRC 0\nUnsupReq 0\nACSViol 0\nUncorrIntErr 0\nBlockedTLP 0\n"
    "AtomicOpBlocked 0\nTLPBlockedErr 0\nPoisonTLPBlocked 0\n{name} {cto}\n"
)


def make_sysfs(
    root: Path,
    gpus=(("0000:03:00.0", "0000:02:00.0"), ("0000:04:00.0", "0000:02:01.0")),
    link=("32.0 GT/s PCIe", "16"),
    aer_tlp=0,
    nvswitch=False,
    aer=True,
) -> None:
    """A host bridge pci0000:00, a root port 0000:00:01.0, a PCIe switch (upstream port
    0000:01:00.0 and downstream ports), a GPU behind each downstream port, a NIC, as the
    kernel lays them out: devices in /sys/devices/..., symlinks in /sys/bus/pci/devices."""
    top = root / "sys/devices/pci0000:00"
    _write(top / "uevent", "")
    bus = root / "sys/bus/pci/devices"
    bus.mkdir(parents=True)

    def device(path: Path, bdf: str, vendor: str, cls: str, dev: str, driver: str) -> None:
        _write(path / "vendor", vendor + "\n")
        _write(path / "class", cls + "\n")
        _write(path / "device", dev + "\n")
        pci_class = cls[2:].lstrip("0").upper()
        _write(
            path / "uevent",
            f"DRIVER={driver}\nPCI_CLASS={pci_class}\nPCI_ID={vendor[2:].upper()}:"
            f"{dev[2:].upper()}\nPCI_SLOT_NAME={bdf}\n",
        )
        rel = os.path.relpath(path, bus)
        (bus / bdf).symlink_to(rel)

    rp = top / "0000:00:01.0"
    device(rp, "0000:00:01.0", "0x8086", "0x060400", "0x352a", "pcieport")
    up = rp / "0000:01:00.0"
    device(up, "0000:01:00.0", "0x1000", "0x060400", "0xc030", "pcieport")
    for gpu, down in gpus:
        d = up / down
        device(d, down, "0x1000", "0x060400", "0xc030", "pcieport")
        g = d / gpu
        device(g, gpu, "0x10de", "0x030200", "0x2330", "nvidia")
        _write(g / "current_link_speed", link[0] + "\n")
        _write(g / "max_link_speed", "32.0 GT/s PCIe\n")
        _write(g / "current_link_width", link[1] + "\n")
        _write(g / "max_link_width", "16\n")
        if aer:
            _write(g / "aer_dev_correctable", AER_COR.format(tlp=aer_tlp, total=aer_tlp + 2))
            _write(g / "aer_dev_fatal", AER_UNCOR.format(cto=0, name="TOTAL_ERR_FATAL"))
            _write(g / "aer_dev_nonfatal", AER_UNCOR.format(cto=1, name="TOTAL_ERR_NONFATAL"))
    nic = up / "0000:02:02.0" / "0000:05:00.0"
    device(up / "0000:02:02.0", "0000:02:02.0", "0x1000", "0x060400", "0xc030", "pcieport")
    device(nic, "0000:05:00.0", "0x15b3", "0x020700", "0x1021", "mlx5_core")
    if nvswitch:
        device(top / "0000:00:02.0", "0000:00:02.0", "0x8086", "0x060400", "0x352a", "pcieport")
        sw = top / "0000:00:02.0" / "0000:06:00.0"
        device(sw, "0000:06:00.0", "0x10de", "0x068000", "0x22a3", "")


LSPCI_ROOT = """\
0000:00:01.0 PCI bridge: Intel Corporation Device 352a (rev 04) (prog-if 00 [Normal decode])
\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR+ FastB2B-
\tCapabilities: [40] Express (v2) Root Port (Slot+), MSI 00
\tCapabilities: [220 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-
\tKernel driver in use: pcieport

0000:01:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)
\tCapabilities: [40] Power Management version 3
\tCapabilities: [68] Express (v2) Upstream Port, MSI 00
\tKernel driver in use: pcieport

0000:02:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)
\tCapabilities: [f24 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+
\t\tACSCtl:\tSrcValid{sv} TransBlk- ReqRedir{rr} CmpltRedir{rr} UpstreamFwd- EgressCtrl- \
DirectTrans-
\tKernel driver in use: pcieport

0000:02:01.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)
\tCapabilities: [f24 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+
\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-
\tKernel driver in use: pcieport

0000:03:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)
\tCapabilities: [60] Power Management version 3
\tKernel driver in use: nvidia
"""

LSPCI_USER = """\
0000:00:01.0 PCI bridge: Intel Corporation Device 352a (rev 04) (prog-if 00 [Normal decode])
\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR+ FastB2B-
\tCapabilities: <access denied>
\tKernel driver in use: pcieport

0000:01:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)
\tCapabilities: <access denied>
\tKernel driver in use: pcieport

0000:02:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)
\tCapabilities: <access denied>

0000:02:01.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0)
\tCapabilities: <access denied>
"""


def answering(outputs: dict[str, object]):
    """A run_command whose programs answer `outputs[argv[0]]` (an exception is raised)."""
    calls = []

    def run(argv, timeout):
        calls.append(list(argv))
        out = outputs.get(argv[0], FileNotFoundError(2, "No such file", argv[0]))
        if isinstance(out, BaseException):
            raise out
        if isinstance(out, CommandResult):
            return out
        return CommandResult(0, out)

    run.calls = calls
    return run


# -- the PCI tree -------------------------------------------------------------------------------
def test_bridges_are_walked_up_through_real_symlinks(tmp_path):
    make_sysfs(tmp_path)
    fs = RootedProcFS(tmp_path)
    assert bridges_above(fs, "0000:03:00.0") == ("0000:02:00.0", "0000:01:00.0", "0000:00:01.0")
    assert bridges_above(fs, "0000:04:00.0") == ("0000:02:01.0", "0000:01:00.0", "0000:00:01.0")
    assert bridges_above(fs, "0000:00:01.0") == ()  # a root port: the host bridge above


def test_pci_finds_gpus_not_the_nic_and_reads_link_and_aer(tmp_path):
    make_sysfs(tmp_path, link=("16.0 GT/s PCIe", "8"), aer_tlp=5, nvswitch=True)
    run = answering({"lspci": LSPCI_ROOT.format(sv="+", rr="+")})
    pci = read_pci(RootedProcFS(tmp_path), run)
    assert [g.bdf for g in pci.gpus] == ["0000:03:00.0", "0000:04:00.0"]
    assert pci.nvswitches == ("0000:06:00.0",)
    g = pci.gpus[0]
    assert g.link_speed.value == "16.0 GT/s PCIe" and g.link_width.value == "8"
    assert g.link_speed_max.value == "32.0 GT/s PCIe"
    aer = dict(g.aer)
    assert aer["correctable"].value == (7, (("BadTLP", 5), ("BadDLLP", 2)))
    assert aer["nonfatal"].value == (1, (("CmpltTO", 1),))
    assert aer["fatal"].value == (0, ())
    assert run.calls == [["lspci", "-D", "-vvv"]]  # one lspci for every bridge
    acs = {b.bdf: b for b in g.acs}
    assert dict(acs["0000:02:00.0"].flags)["ReqRedir"] is True
    assert acs["0000:01:00.0"].has_acs is False  # a switch port without the capability
    assert dict(acs["0000:00:01.0"].flags)["SrcValid"] is False


def test_acs_redirect_is_a_communication_warning_and_off_is_ok(tmp_path):
    make_sysfs(tmp_path)
    for flags, severity in ((dict(sv="+", rr="+"), "warning"), (dict(sv="-", rr="-"), "ok")):
        pci = read_pci(RootedProcFS(tmp_path), answering({"lspci": LSPCI_ROOT.format(**flags)}))
        f = next(x for x in judge(HealthFacts(0, "h", pci=pci)).findings if x.id == "pcie.acs")
        assert f.severity == severity and f.bears_on == ("communication",)
        if severity == "warning":
            assert "0000:02:00.0" in f.next_step and "ECAP_ACS" in f.next_step


def test_acs_without_root_and_without_lspci_is_said_not_guessed(tmp_path):
    make_sysfs(tmp_path)
    pci = read_pci(RootedProcFS(tmp_path), answering({"lspci": LSPCI_USER}))
    assert {b.problem for g in pci.gpus for b in g.acs} == {NO_ROOT}
    f = next(x for x in judge(HealthFacts(0, "h", pci=pci)).findings if x.id == "pcie.acs")
    assert f.severity == "info" and "without root" in f.title
    pci = read_pci(RootedProcFS(tmp_path), answering({}))
    assert {b.problem for g in pci.gpus for b in g.acs} == {"lspci not installed (pciutils)"}
    bad = answering({"lspci": subprocess.TimeoutExpired(["lspci"], 10)})
    assert "failed" in read_pci(RootedProcFS(tmp_path), bad).gpus[0].acs[0].problem


def test_parse_lspci_and_acs_blocks():
    blocks = parse_lspci(LSPCI_ROOT.format(sv="-", rr="+"))
    assert set(blocks) == {
        "0000:00:01.0",
        "0000:01:00.0",
        "0000:02:00.0",
        "0000:02:01.0",
        "0000:03:00.0",
    }
    has, flags = parse_acs(blocks["0000:02:00.0"])
    assert has and dict(flags) == {
        "SrcValid": False,
        "TransBlk": False,
        "ReqRedir": True,
        "CmpltRedir": True,
        "UpstreamFwd": False,
        "EgressCtrl": False,
        "DirectTrans": False,
    }
    assert parse_acs(parse_lspci(LSPCI_USER)["0000:02:00.0"]) == (None, ())


def test_aer_files_absent_or_denied_are_said_as_such(tmp_path):
    make_sysfs(tmp_path, aer=False)
    pci = read_pci(RootedProcFS(tmp_path), answering({}), with_acs=False)
    assert {r.problem for _, r in pci.gpus[0].aer} == {ABSENT}
    f = next(x for x in judge(HealthFacts(0, "h", pci=pci)).findings if x.id == "pcie.aer")
    assert f.severity == "info" and "no AER counters" in f.title
    make_sysfs(tmp_path / "b")
    denied = RootedProcFS(tmp_path / "b", denied=("/sys/bus/pci/devices/0000:03:00.0/aer",))
    pci = read_pci(denied, answering({}), with_acs=False)
    assert {r.problem for _, r in pci.gpus[0].aer} == {DENIED}
    assert {r.problem for _, r in pci.gpus[1].aer} == {None}


def test_no_pci_tree_and_an_unlistable_one(tmp_path):
    pci = read_pci(RootedProcFS(tmp_path), answering({}))
    assert pci.problem == ABSENT and pci.gpus == ()
    make_sysfs(tmp_path / "c")
    pci = read_pci(RootedProcFS(tmp_path / "c", denied=("/sys/bus",)), answering({}))
    assert pci.problem == DENIED


def test_parse_aer_sums_when_no_total_line():
    assert parse_aer("BadTLP 3\nBadDLLP 4\n") == (7, (("BadTLP", 3), ("BadDLLP", 4)))
    assert parse_aer("garbage\n") == (None, ())


# -- InfiniBand, modules, fabric manager --------------------------------------------------------
def make_ib(root: Path, ports) -> None:
    for k, (state, phys, rate, layer) in enumerate(ports):
        base = root / f"sys/class/infiniband/mlx5_{k}/ports/1"
        for name, value in (
            ("state", state),
            ("phys_state", phys),
            ("rate", rate),
            ("link_layer", layer),
        ):
            _write(base / name, value + "\n")


def test_ib_ports_states_rates_and_peermem(tmp_path):
    make_ib(
        tmp_path,
        [
            ("4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", "InfiniBand"),
            ("1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)", "InfiniBand"),
            ("4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", "InfiniBand"),
            ("4: ACTIVE", "5: LinkUp", "100 Gb/sec (4X EDR)", "Ethernet"),
        ],
    )
    _write(tmp_path / "proc/modules", "mlx5_ib 487424 0 - Live 0x0\nnvidia 1 2 - Live 0x0\n")
    inter = read_interconnect(RootedProcFS(tmp_path))
    assert [p.device for p in inter.ib_ports] == ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]
    assert inter.peermem.ok and inter.peermem.value is None
    from gputop_diag.model.health import NvmlFacts, NvmlGpu

    facts = HealthFacts(0, "h", interconnect=inter, nvml=NvmlFacts((NvmlGpu(0, "x"),)))
    found = {f.id: f for f in judge(facts).findings}
    assert "mlx5_1 port 1: DOWN" in found["ib.port_down"].evidence[0].text
    slow = [e.text for e in found["ib.port_rate"].evidence]
    assert slow == ["mlx5_2 port 1: 200 Gb/sec (4X HDR)"]  # RoCE at 100 is another layer
    assert found["ib.peermem"].severity == "warning"
    _write(tmp_path / "proc/modules", "nvidia_peermem 16384 0 - Live 0x0\n")
    assert read_interconnect(RootedProcFS(tmp_path)).peermem.value == "nvidia_peermem"


def test_no_infiniband_is_ok_not_an_error(tmp_path):
    inter = read_interconnect(RootedProcFS(tmp_path))
    assert inter.ib_ports == () and inter.ib_problem == ABSENT
    assert inter.peermem.problem == ABSENT  # no /proc/modules under this root
    found = {f.id: f for f in judge(HealthFacts(0, "h", interconnect=inter)).findings}
    assert found["ib.ports"].severity == "ok" and "ib.peermem" not in found


def test_fabric_manager_asked_only_with_nvswitches(tmp_path):
    run = answering(
        {
            "systemctl": CommandResult(3, "failed\n"),
            "nv-fabricmanager": "Fabric Manager version is : 570.86.15\n",
        }
    )
    fm = read_fabric_manager(RootedProcFS(tmp_path), run, ())
    assert not fm.asked and run.calls == []
    (tmp_path / "dev").mkdir()
    for n in ("nvidia-nvswitch0", "nvidia-nvswitch1", "nvidia-nvswitchctl", "nvidia0"):
        (tmp_path / "dev" / n).touch()
    fm = read_fabric_manager(RootedProcFS(tmp_path), run, ())
    assert fm.asked and fm.dev_nodes == ("/dev/nvidia-nvswitch0", "/dev/nvidia-nvswitch1")
    assert fm.service.value == "failed" and fm.version.value == "570.86.15"
    fm = read_fabric_manager(RootedProcFS(tmp_path), answering({}), ("0000:06:00.0",))
    assert fm.service.problem == "systemctl not installed"
    assert fm.version.problem == "nv-fabricmanager not installed"


# -- processes ----------------------------------------------------------------------------------
STAT = (
    "{pid} (pt_data_worker) {state} 41200 41200 41200 0 -1 4194560 0 0 0 0 10 2 0 0 20 0 2 0 99 "
    "0 0\n"
)
MOUNTINFO = """\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw
26 25 0:24 / /dev/pts rw,nosuid,noexec,relatime shared:3 - devpts devpts rw,gid=5,mode=620
112 22 0:52 / /mnt/my\\040data rw,relatime shared:61 - nfs4 fs01:/export rw,vers=4.2,hard
113 22 0:53 / /scratch rw,relatime shared:62 - lustre 10.0.0.5@o2ib:/scratch rw
"""


def make_proc(root: Path, procs: dict[int, dict]) -> None:
    """/proc/<pid>/{stat,environ,wchan,mountinfo,fdinfo/,task/<pid>/children} as the kernel
    writes them."""
    for pid, p in procs.items():
        d = root / f"proc/{pid}"
        _write(d / "stat", STAT.format(pid=pid, state=p.get("state", "S")))
        _write(d / "environ", "".join(f"{k}={v}\0" for k, v in p.get("env", {}).items()))
        _write(d / "wchan", p.get("wchan", "0"))
        _write(d / "mountinfo", MOUNTINFO)
        _write(d / f"task/{pid}/children", "".join(f"{c} " for c in p.get("children", ())))
        _write(d / f"task/{pid}/stat", STAT.format(pid=pid, state=p.get("state", "S")))
        for fd, mnt in p.get("fds", {}).items():
            _write(d / f"fdinfo/{fd}", f"pos:\t0\nflags:\t02100000\nmnt_id:\t{mnt}\nino:\t7\n")


def test_parsers():
    assert parse_environ("A=1\0CUDA_LAUNCH_BLOCKING=1\0NCCL_IB_DISABLE=\0X=y=z\0") == {
        "CUDA_LAUNCH_BLOCKING": "1",
        "NCCL_IB_DISABLE": "",
    }
    assert parse_state("77 (a) b) c) D 1 2 3") == ("a) b) c", "D")
    with pytest.raises(ValueError):
        parse_state("garbage")
    table = parse_mountinfo(MOUNTINFO + "bad line\n")
    assert table["112"] == ("/mnt/my data", "nfs4", "fs01:/export")
    assert table["113"][1] == "lustre"


def test_d_state_workers_with_their_mounts_through_fdinfo(tmp_path):
    make_proc(
        tmp_path,
        {
            41200: dict(env={"CUDA_LAUNCH_BLOCKING": "1"}, children=(41300, 41301)),
            41300: dict(state="D", wchan="rpc_wait_bit_killable", fds={"0": "26", "5": "112"}),
            41301: dict(state="S", wchan="pipe_read", fds={"0": "26"}),
            41999: dict(state="D"),  # not of a GPU job: never read
        },
    )
    facts = read_processes(RootedProcFS(tmp_path), {41200: (0,)})
    assert facts.examined == 3
    assert [s.pid for s in facts.stuck] == [41300]
    s = facts.stuck[0]
    assert s.wchan == "rpc_wait_bit_killable" and s.root_pid == 41200
    assert [(m.mount_point, m.fs_type, m.device, m.via) for m in s.mounts] == [
        ("/mnt/my data", "nfs4", "fs01:/export", "fd 5")
    ]
    found = {f.id: f for f in judge(HealthFacts(0, "h", processes=facts)).findings}
    d = found["procs.d_state"]
    assert d.severity == "critical" and d.bears_on == ("input_pipeline",) and d.pids == (41300,)
    assert "stat -f /mnt/my data" in d.next_step
    assert found["env.cuda_launch_blocking"].pids == (41200,)


def test_d_state_on_a_local_disk_is_a_warning_and_unreadable_fds_are_said(tmp_path):
    make_proc(
        tmp_path,
        {41200: dict(children=(41300,)), 41300: dict(state="D", wchan="io_schedule")},
    )
    fs = RootedProcFS(tmp_path, denied=("/proc/41300/fdinfo",))
    facts = read_processes(fs, {41200: (0,)})
    s = facts.stuck[0]
    assert s.mounts_problem == f"/proc/41300/fdinfo: {DENIED}"
    # what it can see instead: the network mounts of its namespace
    assert {m.mount_point for m in s.mounts} == {"/mnt/my data", "/scratch"}
    assert {m.via for m in s.mounts} == {"mounted"}
    make_proc(tmp_path / "b", {41200: dict(children=(41300,)), 41300: dict(state="D")})
    facts = read_processes(RootedProcFS(tmp_path / "b"), {41200: (0,)})
    f = next(x for x in judge(HealthFacts(0, "h", processes=facts)).findings)
    assert f.id == "procs.d_state" and f.severity == "warning"
    assert "/proc/41300/stack" in f.next_step


def test_environments_denied_vanished_and_watched(tmp_path):
    make_proc(
        tmp_path,
        {
            1: dict(env={"NCCL_P2P_DISABLE": "1"}),
            2: dict(env={"NCCL_P2P_DISABLE": "0", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}),
            3: dict(env={"HOME": "/root"}),
        },
    )
    fs = RootedProcFS(tmp_path, denied=("/proc/3/environ",))
    envs = read_environments(fs, {1: (0,), 3: (1,), 4: (2,)}, watched=[2])
    by_pid = {e.pid: e for e in envs}
    assert by_pid[1].variables == (("NCCL_P2P_DISABLE", "1"),)
    assert by_pid[2].gpus == () and by_pid[3].problem == DENIED and by_pid[4].problem == ABSENT
    found = {f.id: f for f in judge(HealthFacts(0, "h", processes=ProcessFacts(envs))).findings}
    assert found["env.nccl_p2p_disable"].pids == (1,)  # "0" in pid 2 is not set
    assert found["env.pytorch_no_cuda_memory_caching"].bears_on == ("capacity", "synchronization")
    assert found["env.unreadable"].pids == (3, 4) and "sudo" in found["env.unreadable"].next_step


def test_mountinfo_unreadable_everywhere(tmp_path):
    make_proc(tmp_path, {5: dict(state="D")})
    fs = RootedProcFS(tmp_path, denied=("/proc/5/mountinfo", "/proc/self"))
    assert read_mounts(fs, 5) == ((), "/proc/5/mountinfo: not readable")


def test_a_real_process_started_with_cuda_launch_blocking():
    """This machine's own /proc: a child whose environment carries the variable, read through
    the real ProcFS, as `health` reads a GPU process."""
    env = {**os.environ, "CUDA_LAUNCH_BLOCKING": "1", "NCCL_SHM_DISABLE": "0"}
    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"], env=env, stdin=subprocess.DEVNULL
    )
    try:
        for _ in range(100):  # until the interpreter runs (before exec, the environment
            # and command line are still the forking test's)
            facts = read_processes(RealProcFS(), {child.pid: (0,)})
            try:
                ran = "time.sleep" in RealProcFS().read_text(f"/proc/{child.pid}/cmdline")
            except OSError:
                ran = False
            if ran and facts.examined and not facts.unreadable:
                facts = read_processes(RealProcFS(), {child.pid: (0,)})
                break
            time.sleep(0.05)
        env_of = {e.pid: dict(e.variables) for e in facts.envs}
        assert env_of[child.pid] == {"CUDA_LAUNCH_BLOCKING": "1", "NCCL_SHM_DISABLE": "0"}
        assert facts.stuck == ()
        found = {f.id: f for f in judge(HealthFacts(0, "h", processes=facts)).findings}
        f = found["env.cuda_launch_blocking"]
        assert f.pids == (child.pid,) and f.bears_on == ("synchronization",)
        assert f.evidence[0].source == f"/proc/{child.pid}/environ"
        assert "env.nccl_shm_disable" not in found
    finally:
        child.kill()
        child.wait()
