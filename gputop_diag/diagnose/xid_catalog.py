"""Short names, meanings and next steps of the common Xid codes (NVIDIA's Xid catalog)."""

from __future__ import annotations

# xid -> (short name, meaning, next step, severity)
XID_CATALOG: dict[int, tuple[str, str, str, str]] = {
    8: (
        "IDLE_TIMEOUT",
        "the GPU stopped processing",
        "restart the app; contact support if it repeats",
        "warning",
    ),
    13: (
        "GR_EXCEPTION",
        "graphics engine exception (illegal address/instruction) — usually the application",
        "restart the app; if it repeats on the same GPU, run DCGM diagnostics (dcgmi diag -r 3)",
        "warning",
    ),
    31: (
        "MMU_FAULT",
        "GPU memory page fault — usually an out-of-bounds access in the app",
        "restart the app; run with compute-sanitizer; repeats on one GPU → DCGM diag",
        "warning",
    ),
    32: (
        "PBDMA_ERROR",
        "invalid or corrupted push buffer",
        "restart the app; check PCIe and system memory",
        "warning",
    ),
    43: (
        "RESET_CHANNEL",
        "the GPU stopped a faulting app's channel; the GPU is healthy",
        "look at the app; nothing to do on the GPU unless frequent",
        "info",
    ),
    45: (
        "PREEMPTIVE_REMOVAL",
        "channel cleanup after an earlier error or a kill",
        "triage the Xid that came before it",
        "info",
    ),
    48: (
        "ECC_DBE",
        "uncorrectable double-bit ECC error",
        "drain, reset the GPU so the retirement/remap takes effect, check remapped rows",
        "critical",
    ),
    63: (
        "ROW_REMAP_EVENT",
        "a memory row retirement/remap was recorded",
        "reset the GPU when convenient so the remap takes effect",
        "warning",
    ),
    64: (
        "ROW_REMAP_FAILURE",
        "a memory row remap failed — an RMA criterion",
        "drain the GPU, reset it and contact support",
        "critical",
    ),
    74: (
        "NVLINK_ERROR",
        "NVLink error",
        "check the link's error counters; reseat, run diagnostics; contact support if it repeats",
        "critical",
    ),
    79: (
        "FALLEN_OFF_BUS",
        "the GPU stopped answering on PCIe",
        "drain the node and reboot; "
        "check temperatures, power and seating; contact support if it repeats",
        "critical",
    ),
    92: (
        "EXCESSIVE_SBE",
        "high single-bit ECC error rate",
        "watch it; contact support if sustained",
        "warning",
    ),
    94: (
        "CONTAINED_ECC",
        "contained ECC error: only the affected app was killed",
        "restart the app; watch the pending row-remap count",
        "warning",
    ),
    95: (
        "UNCONTAINED_ECC",
        "uncontained ECC error: every app on the GPU is affected",
        "drain and reset the GPU",
        "critical",
    ),
    109: (
        "CTXSW_TIMEOUT",
        "context-switch timeout",
        "reset the GPU; contact support if it repeats",
        "critical",
    ),
    119: (
        "GSP_RPC_TIMEOUT",
        "the GSP firmware did not answer in time",
        "reset the GPU; update the driver (a known regression was fixed in 525.105.17)",
        "critical",
    ),
    120: ("GSP_ERROR", "GSP firmware error", "reset the GPU; update the driver", "critical"),
}


def describe(xid: int) -> tuple[str, str, str, str]:
    return XID_CATALOG.get(
        xid,
        (
            f"XID_{xid}",
            "see NVIDIA's Xid catalog",
            "look the code up in NVIDIA's Xid catalog",
            "warning",
        ),
    )
