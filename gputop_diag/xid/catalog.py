"""What each Xid (and NVSwitch SXid) code means, its likely cause class, the question that
confirms the cause, and the action once it is confirmed — as data, each entry with its source.

Sources: XC = NVIDIA "Analyzing Xid Errors with the Xid Catalog"
(docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, r580/r590, via gpud's generated
catalog and NVSentinel's mapping); XO = NVIDIA's older Xid table with its cause columns; k8s =
k8s-device-plugin's application-error list; OGKM = NVIDIA/open-gpu-kernel-modules issues. An Xid is
the first classification step, never a root cause: every entry leads with the question that confirms
the cause, and "drain" or "RMA" come after it.
"""

from __future__ import annotations

from dataclasses import dataclass

# Cause classes (XC's APP/DRV/HW/TP/NVL/ECC/GSP/BUS, ECC and FB folded into hardware/memory).
CAUSES: dict[str, str] = {
    "app": "application",
    "driver": "driver",
    "hw": "hardware/memory",
    "thermal": "thermal or power",
    "nvlink": "NVLink/fabric",
    "gsp": "GSP firmware",
    "bus": "bus (PCIe)",
    "net": "network (InfiniBand/RoCE adapter, cable, switch)",
}

# The recommended action once the question is answered (XC's action vocabulary, in words).
ACTIONS: dict[str, str] = {
    "check_app": "check the application",
    "restart_app": "restart the application",
    "reset": "reset the GPU",
    "drain": "drain and reset the GPU",
    "reboot": "drain and reboot the node",
    "rma": "drain the GPU and contact support (RMA)",
    "mechanicals": "check power cables and seating",
    "update": "update the driver or firmware",
    "diag": "run DCGM diagnostics",
    "companion": "triage the Xid it follows",
    "none": "nothing on the GPU",
}

SEVERITIES = ("info", "warning", "critical")

# k8s-device-plugin (internal/rm/health.go): Xids that are the application's, not the GPU's.
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
# Xids that follow another one on the same GPU and carry no cause of their own (XC: IGNORE,
# "sympathetic"): 43 channel reset after an app fault, 45 channel cleanup, 137 NVLink PRIV.
SYMPATHETIC_XIDS = frozenset({43, 45, 137})


@dataclass(frozen=True, slots=True)
class XidInfo:
    """One catalog entry."""

    code: int
    name: str  # XC's mnemonic, shortened where it is long
    meaning: str
    causes: tuple[str, ...]  # keys of CAUSES, likeliest first
    action: str  # a key of ACTIONS: what to do once the question confirms the cause
    question: str  # the next question: what confirms (or rules out) the cause
    step: str  # the action, concretely
    severity: str  # "info", "warning" or "critical"
    source: str  # where this entry comes from
    known: bool = True  # False: a code the catalog does not hold

    @property
    def cause_words(self) -> str:
        return ", ".join(CAUSES[c] for c in self.causes)

    @property
    def route(self) -> str:
        """The question, then the action: what an Xid should lead to."""
        return f"{self.question} Then: {self.step}"


def _x(code, name, meaning, causes, action, question, step, severity, source="XC"):
    return XidInfo(
        code, name, meaning, tuple(causes.split()), action, question, step, severity, source
    )


_NVLINK5_Q = "Which unit and link, fatal or not, and what recovery does Xid 154 ask for next?"
_NVLINK5_STEP = (
    "follow the recovery action Xid 154 announces (reset or drain and reset); if the same "
    "link repeats, check the link's cables and the peer, then contact support"
)

_FELL_OFF_QUESTION = (
    "Did the GPU overheat or lose power just before (temperature, power draw, PSU, PCIe AER "
    "errors), and does it come back after a reboot?"
)

# fmt: off
_ENTRIES = (
    _x(8, "IDLE_TIMEOUT", "the GPU stopped processing", "driver app bus thermal", "restart_app",
       "Did one kernel hang (a deadlock, an endless loop), or does it repeat on this GPU "
       "whatever runs?",
       "restart the app; contact support if it repeats on the same GPU", "warning"),
    _x(13, "GR_EXCEPTION",
       "graphics engine exception (illegal address/instruction) — usually the application",
       "app hw driver", "check_app",
       "One-off, or the same job every time (an application bug), or the same GPC/TPC/SM "
       "on this GPU under different jobs (hardware)?",
       "restart the app; if it repeats on the same GPU, run DCGM diagnostics (dcgmi diag -r 3)",
       "warning"),
    _x(31, "MMU_FAULT",
       "GPU memory page fault — usually an out-of-bounds access in the app",
       "app hw driver", "check_app",
       "Does the fault follow the job (a bad pointer: run it under compute-sanitizer) or stay "
       "on this GPU (same PCI id) across jobs?",
       "restart the app; run with compute-sanitizer; repeats on one GPU → DCGM diag",
       "warning"),
    _x(32, "PBDMA_ERROR", "invalid or corrupted push buffer", "driver bus thermal hw",
       "check_app",
       "Did PCIe (AER) or system memory report errors at the same time, or only this app?",
       "restart the app; check PCIe and system memory", "warning"),
    _x(38, "FECS_WATCHDOG_TIMEOUT", "driver firmware watchdog timeout", "driver", "update",
       "Does it recur on this GPU, since a driver update or under one workload?",
       "nothing now; contact support if it recurs", "warning"),
    _x(43, "RESET_CHANNEL",
       "the GPU stopped a faulting app's channel; the GPU is healthy", "app driver",
       "companion",
       "Which app faulted just before it (an Xid 13 or 31 from the same process)?",
       "look at the app; nothing to do on the GPU unless frequent", "info"),
    _x(44, "GR_FAULT_DURING_CTXSW", "graphics engine fault during a context switch", "driver",
       "reset", "Does it recur on this GPU?",
       "reset the GPU if work stalls; contact support if it recurs", "warning"),
    _x(45, "PREEMPTIVE_REMOVAL", "channel cleanup after an earlier error or a kill",
       "app driver", "companion",
       "Which Xid came before it on this GPU (newer drivers name it), or was the process "
       "killed?",
       "triage the Xid that came before it", "info"),
    _x(46, "GPU_TIMEOUT", "the GPU stopped responding to the driver", "driver", "reset",
       "Does the GPU still answer nvidia-smi, and does it recur?",
       "reset the GPU (nvidia-smi -r); contact support if it recurs", "critical"),
    _x(48, "ECC_DBE", "uncorrectable double-bit ECC error", "hw", "drain",
       "Did the driver retire or remap the page (an Xid 63 after it), or did the remap fail "
       "(Xid 64)? Check nvidia-smi -q -d ROW_REMAPPER",
       "drain, reset the GPU so the retirement/remap takes effect, check remapped rows",
       "critical"),
    _x(54, "AUX_POWER", "auxiliary power is not connected", "thermal hw", "mechanicals",
       "Are all the GPU's power connectors seated?",
       "power off and check the GPU's power connectors", "critical"),
    _x(56, "DISPLAY_CHANNEL_EXCEPTION", "display engine exception (unused on data-centre "
       "GPUs)", "hw driver", "reset", "Does it persist after a reset?",
       "reset the GPU; reboot if it persists", "warning", "XO"),
    _x(57, "FB_LINK_TRAINING_FAILURE", "video-memory interface training failed", "hw driver",
       "reset", "Does it persist after a reset?", "reset the GPU; reboot if it persists",
       "critical", "XO"),
    _x(61, "PMU_BREAKPOINT", "internal micro-controller breakpoint", "hw driver", "reset",
       "Does it persist after a reset?", "reset the GPU; reboot if it persists", "warning",
       "XO"),
    _x(62, "PMU_HALT", "internal micro-controller halted", "hw driver thermal", "reset",
       "Was the GPU hot or at its power limit, and did a storm of Xid 45 follow?",
       "reset the GPU (nvidia-smi -r); contact support if it recurs", "critical"),
    _x(63, "ROW_REMAP_EVENT", "a memory row retirement/remap was recorded", "hw", "reset",
       "Is the remap still pending (nvidia-smi -q -d ROW_REMAPPER), and has the GPU been reset "
       "since?",
       "reset the GPU when convenient so the remap takes effect", "warning"),
    _x(64, "ROW_REMAP_FAILURE", "a memory row remap failed — an RMA criterion", "hw", "rma",
       "Did the remap really fail (nvidia-smi -q -d ROW_REMAPPER: remapping failure "
       "occurred)?",
       "drain the GPU, reset it and contact support", "critical"),
    _x(68, "NVDEC_EXCEPTION", "video decoder error", "app driver hw", "restart_app",
       "Which process used the decoder, and does it recur with other inputs?",
       "restart the app; contact support if it recurs with other inputs", "warning"),
    _x(69, "GR_CLASS_ERROR", "graphics engine class error", "app driver", "check_app",
       "The same job every time, or any job on this GPU?",
       "restart the app; check the application and its CUDA version", "warning"),
    _x(74, "NVLINK_ERROR", "NVLink error", "nvlink hw driver bus", "rma",
       "Which link, and do its error counters keep growing (nvidia-smi nvlink -e)? Does the "
       "peer GPU report it too?",
       "check the link's error counters; reseat, run diagnostics; contact support if it repeats",
       "critical"),
    _x(79, "FALLEN_OFF_BUS", "the GPU stopped answering on PCIe", "bus hw thermal driver",
       "reboot", _FELL_OFF_QUESTION,
       "drain the node and reboot; check temperatures, power and seating; contact support if "
       "it repeats",
       "critical", "XC, OGKM#507"),
    _x(92, "EXCESSIVE_SBE", "high single-bit ECC error rate", "hw", "rma",
       "Is the single-bit error count still climbing (nvidia-smi -q -d ECC)?",
       "watch it; contact support if sustained", "warning"),
    _x(93, "INFOROM_WEAR", "non-fatal violation of the InfoROM wear limit", "hw", "none",
       "Does it keep appearing?", "nothing now; mention it to support at the next service",
       "info"),
    _x(94, "CONTAINED_ECC", "contained ECC error: only the affected app was killed", "hw",
       "restart_app",
       "Which app was killed, and is a row remap pending (nvidia-smi -q -d ROW_REMAPPER)?",
       "restart the app; watch the pending row-remap count", "warning"),
    _x(95, "UNCONTAINED_ECC", "uncontained ECC error: every app on the GPU is affected", "hw",
       "drain",
       "Did every process on the GPU die, and is a row remap pending?",
       "drain and reset the GPU", "critical"),
    _x(109, "CTXSW_TIMEOUT", "context-switch timeout", "driver app hw", "reset",
       "Which job hung the context switch, and does it recur on this GPU with other jobs?",
       "reset the GPU; contact support if it repeats", "critical"),
    _x(110, "SEC_FAULT", "security fault", "driver hw", "reset",
       "Does it recur after a reset and a driver update?",
       "reset the GPU; update the driver; contact support if it recurs", "critical"),
    _x(119, "GSP_RPC_TIMEOUT", "the GSP firmware did not answer in time", "gsp driver",
       "update",
       "Which driver branch (a 525 regression was fixed in 525.105.17), and do GSP timeouts "
       "repeat on this GPU?",
       "reset the GPU; update the driver (a known regression was fixed in 525.105.17)",
       "critical", "XC, OGKM#446"),
    _x(120, "GSP_ERROR", "GSP firmware error", "gsp driver", "update",
       "Does the GSP exception repeat after a reset, and on which driver?",
       "reset the GPU; update the driver", "critical"),
    _x(121, "C2C_ERROR", "chip-to-chip link error (Grace Hopper/Blackwell)", "hw bus", "rma",
       "Does it repeat on this module?", "nothing now; contact support if it repeats",
       "warning"),
    _x(122, "SPI_PMU_RPC_READ_FAIL", "SPI read failure (unused on current GPUs)", "hw driver",
       "reset", "Does it persist after a reset?", "reset the GPU", "warning", "XO"),
    _x(123, "SPI_PMU_RPC_WRITE_FAIL", "SPI write failure (unused on current GPUs)",
       "hw driver", "reset", "Does it persist after a reset?", "reset the GPU", "warning", "XO"),
    _x(136, "NVLINK_TRAINING_FAIL", "NVLink link training failed", "nvlink", "reset",
       "Does the same link fail training again after a reset (cables, seating, the peer)?",
       "reset the GPU; check the link's cables and its peer", "critical"),
    _x(137, "NVLINK_PRIV_ERR", "NVLink privileged-register error", "nvlink", "companion",
       "Which error came with it on the fabric?", "triage the error it came with", "info"),
    _x(140, "ECC_ESCAPE", "unrecoverable ECC error escaped containment", "hw", "rma",
       "Is a row remap pending or failed on this GPU?",
       "drain, reset the GPU; contact support", "critical"),
    _x(143, "GPU_INIT_ERROR", "GPU initialization failure", "hw gsp", "rma",
       "Does the GPU initialise after a reset or a reboot?",
       "reset the GPU; contact support if it fails again", "critical"),
    _x(144, "NVLINK_SAW_ERROR", "NVLink5 SAW/MVB error", "nvlink", "reset", _NVLINK5_Q,
       _NVLINK5_STEP, "warning"),
    _x(145, "NVLINK_RLW_ERROR", "NVLink5 RLW error", "nvlink", "reset", _NVLINK5_Q,
       _NVLINK5_STEP, "warning"),
    _x(146, "NVLINK_TLW_ERROR", "NVLink5 TLW error", "nvlink", "reset", _NVLINK5_Q,
       _NVLINK5_STEP, "warning"),
    _x(147, "NVLINK_TREX_ERROR", "NVLink5 TREX error", "nvlink", "reset", _NVLINK5_Q,
       _NVLINK5_STEP, "warning"),
    _x(148, "NVLINK_NVLPW_CTRL_ERROR", "NVLink5 NVLPW control error", "nvlink", "reset",
       _NVLINK5_Q, _NVLINK5_STEP, "warning"),
    _x(149, "NVLINK_NETIR_ERROR", "NVLink5 network error (NETIR, link event or link down)",
       "nvlink", "reset", _NVLINK5_Q,
       "a link down: reset the GPU and check the link's cables and its peer; otherwise "
       + _NVLINK5_STEP, "critical"),
    _x(150, "NVLINK_MSE_ERROR", "NVLink5 MSE firmware/watchdog error", "nvlink", "reset",
       _NVLINK5_Q, _NVLINK5_STEP, "critical"),
    _x(151, "KEY_ROTATION_ERROR", "confidential-computing key rotation error", "driver",
       "reboot", "Does it repeat after restarting the VM?", "restart the VM", "critical"),
    _x(154, "RECOVERY_ACTION_CHANGED", "the driver's requested recovery action changed",
       "driver", "companion",
       "Which Xid triggered it, and which action does the driver now ask for?",
       "follow the new action (GPU Reset → nvidia-smi -r; Node Reboot → reboot; Drain and "
       "Reset → drain, then reset) and triage the triggering Xid", "warning"),
    _x(155, "NVLINK_SW_DEFINED", "NVLink software-defined error", "nvlink", "reset",
       _NVLINK5_Q, "reset the GPU", "warning"),
    _x(156, "RESOURCE_RETIREMENT", "a resource retirement event was recorded", "hw", "reset",
       "Has the GPU been reset since, so the retirement takes effect?",
       "reset the GPU when it is idle", "warning"),
    _x(157, "RESOURCE_RETIREMENT_FAILURE", "resource retirement failed", "hw", "rma",
       "Does it repeat after a reset?", "contact support if it repeats", "warning"),
    _x(158, "GPU_FATAL_TIMEOUT", "fatal GPU timeout", "driver hw", "reset",
       "Does it recur after a reset?", "reset the GPU; contact support if it recurs",
       "critical"),
    _x(159, "CHI_NON_DATA_ERROR", "CHI non-data error on the Grace link", "bus hw", "none",
       "Did a process using unified memory (UVM) fail at the same time?",
       "check the applications using unified memory", "warning"),
    _x(160, "CHANNEL_RETIREMENT", "a channel was retired", "driver hw", "reset",
       "Does it repeat on this GPU?", "reset the GPU when idle", "warning"),
    _x(161, "CHANNEL_RETIREMENT_FAILURE", "a channel retirement failed", "driver hw", "reset",
       "Does it repeat on this GPU?", "reset the GPU; contact support if it repeats",
       "critical"),
    _x(162, "POWER_SMOOTHING", "power-smoothing event", "thermal", "none",
       "Is the GPU's power profile set as intended?", "nothing on the GPU", "info"),
    _x(163, "POWER_SMOOTHING", "power-smoothing event", "thermal", "none",
       "Is the GPU's power profile set as intended?", "nothing on the GPU", "info"),
    _x(164, "POWER_SMOOTHING", "power-smoothing event", "thermal", "none",
       "Is the GPU's power profile set as intended?", "nothing on the GPU", "info"),
    _x(165, "POWER_SMOOTHING", "power-smoothing event", "thermal", "none",
       "Is the GPU's power profile set as intended?", "nothing on the GPU", "info"),
    _x(166, "NVLINK_SECURE_CRYPTO", "NVLink encryption error", "nvlink", "reset",
       "Does it repeat after a reset?", "reset the GPU", "warning"),
    _x(167, "PCIE_FATAL_TIMEOUT", "fatal PCIe timeout", "bus hw", "reboot",
       "Did the host report PCIe (AER) errors at the same time, and on which slot?",
       "drain the node and reboot; reseat the GPU if it repeats", "critical"),
    _x(168, "REDUCED_MEMORY", "GPU memory reduced (WPR)", "hw", "reset",
       "Is the full memory size back after a reset?", "reset the GPU", "warning"),
    _x(169, "SEC2_HALT", "the SEC2 micro-controller halted", "hw driver", "reset",
       "Does it recur after a reset?", "reset the GPU; contact support if it recurs",
       "critical"),
    _x(171, "DRAM_ERROR_DETAIL", "DRAM detail for an Xid 48", "hw", "companion",
       "Which Xid 48 does it detail?", "triage the Xid 48 it details", "info"),
    _x(172, "SRAM_ERROR_DETAIL", "SRAM detail for an Xid 48", "hw", "companion",
       "Which Xid 48 does it detail?", "triage the Xid 48 it details", "info"),
)
# fmt: on

XID_CATALOG: dict[int, XidInfo] = {e.code: e for e in _ENTRIES}


def entry(code: int) -> XidInfo:
    """The catalog entry for `code`; a plain "look it up" entry for codes it does not hold
    (the k8s device plugin's 999 is NVML's "unknown Xid")."""
    found = XID_CATALOG.get(code)
    if found is not None:
        return found
    return XidInfo(
        code,
        f"XID_{code}",
        "not in this catalog: see NVIDIA's Xid catalog",
        (),
        "none",
        "Does it repeat, on one GPU or on many?",
        "look the code up in NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors)",
        "warning",
        "",
        known=False,
    )


def describe(xid: int) -> tuple[str, str, str, str]:
    """(name, meaning, next step, severity); the next step leads with the question."""
    e = entry(xid)
    return e.name, e.meaning, e.route, e.severity


# --- NVSwitch SXid (Fabric Manager guide, via NVSentinel's sxid mapping and gpud) ---------------
# The line itself says fatal or non-fatal; the unit comes from the code's range.
SXID_UNITS: tuple[tuple[int, int, str], ...] = (
    (10000, 10999, "host"),
    (11000, 11999, "ingress"),
    (12000, 12999, "egress"),
    (13000, 13999, "fstate"),
    (14000, 14999, "tstate"),
    (15000, 15999, "route"),
    (18000, 18999, "NVLIPT"),
    (19000, 19999, "NVLTLC"),
    (20000, 29999, "minion/link"),
)
SXID_SPECIFIC: dict[int, tuple[str, str]] = {
    10004: ("NVSwitch temperature", "check the switch tray's cooling (CHECK_THERMALS)"),
    12028: (
        "non-posted PRIV error on egress",
        "reset the fabric or the system; the GPUs see Xid 45",
    ),
}


@dataclass(frozen=True, slots=True)
class SxidInfo:
    code: int
    unit: str
    meaning: str
    question: str
    step: str


def sxid_entry(code: int) -> SxidInfo:
    unit = next((u for lo, hi, u in SXID_UNITS if lo <= code <= hi), "unknown unit")
    meaning, step = SXID_SPECIFIC.get(
        code,
        (
            f"NVSwitch {unit} error",
            "non-fatal: watch it; fatal: reset the fabric (Fabric Manager) or the system, and "
            "check the link's cables (INVESTIGATE_LINK_SI) if it repeats",
        ),
    )
    return SxidInfo(
        code,
        unit,
        meaning,
        "Fatal or non-fatal, and which link and which GPUs behind it (an Xid 45 or 74 on them)?",
        step,
    )


# --- driver messages that are not Xids (reference §2.4) ------------------------------------------
@dataclass(frozen=True, slots=True)
class DriverMessageInfo:
    kind: str
    title: str
    meaning: str
    causes: tuple[str, ...]
    question: str
    step: str
    severity: str
    as_xid: int | None = None  # the Xid it stands for (79 for fallen off the bus)
    subject: str = "gpu"  # what it happened to: "gpu", "nic" (its bus id), "host", "process"


# fmt: off
DRIVER_MESSAGES: dict[str, DriverMessageInfo] = {
    d.kind: d
    for d in (
        DriverMessageInfo(
            "fallen_off_bus", "GPU fell off the bus (Xid 79)",
            "the GPU stopped answering on PCIe: the driver's own line for the fault Xid 79 "
            "reports, the same fault whether an Xid 79 line comes with it or not",
            ("bus", "hw", "thermal"), _FELL_OFF_QUESTION,
            "drain the node and reboot; check temperatures, power and seating", "critical", 79,
        ),
        DriverMessageInfo(
            "probe_failed", "driver probe failed", "a GPU did not initialise at driver load",
            ("hw", "driver", "bus"),
            "Which GPU is missing from nvidia-smi, and does it show in lspci?",
            "compare `lspci -d 10de:` with nvidia-smi; reseat or RMA the missing GPU",
            "critical",
        ),
        DriverMessageInfo(
            "init_failed", "RmInitAdapter failed", "the driver could not initialise a GPU",
            ("hw", "gsp", "driver"),
            "Which GPU (the minor number is /dev/nvidiaN), and does a reboot or the matching "
            "firmware fix it?",
            "reboot; check the driver's GSP firmware files; contact support if one GPU keeps "
            "failing", "critical",
        ),
        DriverMessageInfo(
            "api_mismatch", "driver API mismatch",
            "the user-space driver and the loaded kernel module have different versions",
            ("driver",),
            "Was the driver upgraded without a reboot (the module still loaded is the old "
            "one)?",
            "reboot, or reload the nvidia modules once the GPUs are idle; pin the driver "
            "packages so unattended upgrades cannot do it again", "critical",
        ),
        DriverMessageInfo(
            "nvml_mismatch", "NVML driver/library version mismatch",
            "NVML's library is newer or older than the loaded kernel module",
            ("driver",),
            "Was the driver upgraded without a reboot?",
            "reboot, or reload the nvidia modules once the GPUs are idle", "critical",
        ),
        DriverMessageInfo(
            "gsp_timeout", "GSP firmware timeout",
            "the GPU's GSP firmware stopped answering the driver", ("gsp", "driver"),
            "Which driver branch, and does it follow a particular workload?",
            "reset the GPU; update the driver; contact support if it persists", "critical",
        ),
        DriverMessageInfo(
            "reset_required", "GPU reset required",
            "the driver needs the GPU reset before it can run work (users see 'CUDA-capable "
            "device(s) is/are busy or unavailable')", ("driver", "hw"),
            "Which Xid put it in this state (look just before)?",
            "drain the GPU and reset it (nvidia-smi -r)", "critical",
        ),
        DriverMessageInfo(  # RX detection: gpud components/accelerator/nvidia/nvlink/kmsg.go
            "nvlink_training", "NVLink training problem",
            "an NVLink did not train or its peer did not answer (RX detection included: the "
            "driver could not update or read the mask of links that detected their far end); "
            "GPU-to-GPU traffic then takes slower paths or fails", ("nvlink",),
            "Which link, and does it fail again after a reset (cables, the peer GPU or "
            "switch)? nvidia-smi nvlink --status shows the links down",
            "reset; check the link's cables and its peer; on NVSwitch systems the fabric "
            "manager (systemctl status nvidia-fabricmanager)", "warning",
        ),
        DriverMessageInfo(
            "rc_watchdog", "GPU engine locked",
            "the driver's watchdog found an engine hung", ("driver", "app"),
            "Which job was running (an Xid 8 or 109 usually comes with it)?",
            "restart the job; reset the GPU if it does not recover", "warning",
        ),
        DriverMessageInfo(  # gpud components/accelerator/nvidia/peermem/kmsg_matcher.go
            "peermem_error", "nvidia-peermem error",
            "GPUDirect RDMA: nvidia-peermem met a registration of GPU memory it cannot handle "
            "(\"detected invalid context\": GPU memory freed while the NIC still had it "
            "registered); repeated, the RDMA path between GPU and NIC is unreliable",
            ("driver", "net"),
            "Does it repeat, and does it come with NCCL errors or hangs in a multi-node job "
            "(NCCL_DEBUG=INFO: NET/IB ... GDRDMA)?",
            "check that nvidia-peermem matches the loaded driver (modinfo nvidia-peermem; "
            "cat /proc/driver/nvidia/version); retry the job with NCCL_NET_GDR_LEVEL=LOC "
            "(GPUDirect RDMA off) to confirm", "warning", subject="host",
        ),
        DriverMessageInfo(  # gpud components/accelerator/nvidia/nccl/kmsg_matcher.go
            "nccl_segfault", "crash in NCCL",
            "a process crashed inside NCCL (a segfault or trap in libnccl): the job's "
            "collective communication failed and the job died or will hang on its peers",
            ("app", "net", "nvlink"),
            "Which job was it (the pid and process), and did its other ranks hang or fail at "
            "the same time?",
            "rerun with NCCL_DEBUG=INFO (and NCCL_DEBUG_SUBSYS=INIT,NET) to see the failing "
            "transport; check the NCCL version against the driver and the fabric manager",
            "critical", subject="process",
        ),
        DriverMessageInfo(  # drivers/net/ethernet/mellanox/mlx5/core/en_main.c
            "nic_link_down", "network port link down",
            "an mlx5 (ConnectX) port lost its link", ("net",),
            "Did it come back, and does it go down again (a flapping port: cable, transceiver "
            "or switch port)?",
            "ip -br link; ibstat (or ethtool IFACE); if it flaps, reseat or replace the cable "
            "and check the switch port", "warning", subject="nic",
        ),
        DriverMessageInfo(  # drivers/net/ethernet/mellanox/mlx5/core/events.c
            "nic_cable", "network cable unplugged",
            "an mlx5 (ConnectX) port's cable module was unplugged or reported an error",
            ("net",), "Was it unplugged on purpose, and is the port up again (ibstat)?",
            "ibstat; reseat or replace the cable or transceiver", "warning", subject="nic",
        ),
        DriverMessageInfo(  # drivers/net/ethernet/mellanox/mlx5/core/events.c
            "nic_cable_error", "network cable module error",
            "an mlx5 (ConnectX) port's cable module reported an error (power budget, bad or "
            "shorted cable, unsupported part)", ("net", "hw"),
            "Which module, and is the port down (ibstat)?",
            "replace the cable or transceiver; check the adapter's firmware supports it",
            "warning", subject="nic",
        ),
        DriverMessageInfo(  # gpud infiniband kmsg_matcher.go (High Temperature)
            "nic_temperature", "network adapter overheating",
            "an mlx5 (ConnectX) adapter or its cable module reported a high temperature: it "
            "may throttle or shut the port down", ("net", "thermal"),
            "Is the airflow over the adapter blocked, and are other adapters hot too?",
            "check the fans and airflow; mget_temp -d DEVICE (NVIDIA MFT) for the adapter's "
            "temperature", "warning", subject="nic",
        ),
        DriverMessageInfo(  # gpud infiniband kmsg_matcher.go (pci_power_insufficient)
            "nic_power", "network adapter short of slot power",
            "an mlx5 (ConnectX) adapter detected insufficient power on its PCIe slot", (
                "net", "thermal"),
            "Is the adapter in a slot that provides the power it needs?",
            "move the adapter to a slot with enough power, or check the riser and the "
            "server's power configuration", "warning", subject="nic",
        ),
        DriverMessageInfo(
            "pcie_aer", "PCIe error (AER)", "the PCIe link reported an error", ("bus",),
            "Is the device a GPU or its upstream port, and did an Xid 79 follow?",
            "reseat the GPU and check its riser; contact support if errors repeat", "warning",
        ),
    )
}
# fmt: on
