"""The kernel messages of a GPU's neighbours that bear on a job: the RDMA NIC (mlx5: a port's
link, its cable module, its slot's power and its temperature), GPUDirect RDMA (`nvidia-peermem`
errors) and a process crashing inside NCCL (a segfault or trap in `libnccl*.so`). Pure: a
message's text in, its kind and fields out; `xid/events.py` makes them events.

The line shapes are those leptonai/gpud's kernel-message matchers read, and the kernel and driver
sources that print them:
- NCCL: gpud `components/accelerator/nvidia/nccl/kmsg_matcher.go`
  ("pt_main_thread[2536443]: segfault at 7f797fe00000 ip 00007f7c7ac69996 sp 00007f7c12fd7c30
  error 4 in libnccl.so.2[7f7c7ac00000+d3d3000]"); the kernel's show_signal_msg() adds " likely
  on CPU N (core C, socket S)" on newer kernels, and do_trap()/do_general_protection() print
  "traps: comm[pid] general protection fault ip:… sp:… error:0 in lib[…]"
  (https://github.com/torvalds/linux/blob/master/arch/x86/kernel/traps.c).
- nvidia-peermem: gpud `components/accelerator/nvidia/peermem/kmsg_matcher.go` ("nvidia-peermem
  nv_get_p2p_free_callback:127 ERROR detected invalid context, skipping further processing");
  every error of the module has the shape "nvidia-peermem FUNCTION:LINE ERROR text" (its
  peer_err(), https://github.com/NVIDIA/open-gpu-kernel-modules/blob/main/kernel-open/nvidia-peermem/nvidia-peermem.c).
- mlx5: gpud `components/accelerator/nvidia/infiniband/kmsg_matcher.go` ("mlx5_core 0000:5c:00.0:
  mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe slot (27W).",
  "mlx5_port_module_event:1131:(pid 0): Port module event[error]: module 0, Cable error, High
  Temperature"); the port module statuses and errors and the temperature warning as
  drivers/net/ethernet/mellanox/mlx5/core/events.c prints them, and a port's carrier as
  en_main.c mlx5e_update_carrier() prints it ("mlx5_core 0000:0c:00.0 enp12s0f0np0: Link down")
  (https://github.com/torvalds/linux/tree/master/drivers/net/ethernet/mellanox/mlx5/core).
  gpud's third mlx5 matcher, "mlx5_cmd_out_err … ACCESS_REG(0x805) … failed", is left out on
  purpose: it is what a monitoring tool's read of a restricted function's counters prints, not a
  fault of the port (https://github.com/leptonai/gpud/issues/1164), and it floods the log.
"""

from __future__ import annotations

import re
from typing import Any

# The tags a message must hold to be one of these (a cheap test before any pattern).
TAGS = ("libnccl", "nvidia-peermem", "mlx5")

_BDF = r"[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]"
# The process name (comm) is at most 15 characters and may hold spaces; the pid follows in [].
_COMM = r"(?P<comm>[^\[\]\n]{1,16}?)\[(?P<pid>\d+)\]"
_LIB = r"(?P<lib>libnccl[\w.+-]*?\.so[\w.]*)"
NCCL_SEGFAULT = re.compile(
    r"(?:^|\s)" + _COMM + r": segfault at (?P<addr>[0-9a-fA-F]+) ip \S+ sp \S+ error \d+ in " + _LIB
)
NCCL_TRAP = re.compile(
    r"traps: " + _COMM + r" (?P<what>general protection fault|trap [a-z ]+?) ip:?\S+ sp:?\S+ "
    r"error:?\S+ in " + _LIB
)
PEERMEM = re.compile(r"nvidia-peermem (?P<func>\w+):(?P<line>\d+) ERROR (?P<msg>.*)")
# "mlx5_core 0000:0c:00.0 enp12s0f0np0: …" (a netdev's message), "mlx5_core 0000:5c:00.0: …"
MLX5_PREFIX = re.compile(r"mlx5_core (?P<bdf>" + _BDF + r")(?: (?P<ifname>[\w.@-]+))?: ")
LINK = re.compile(r"(?:^|: )Link (?P<state>down|up)\s*$")
MODULE = re.compile(
    r"Port module event(?:\[(?:error|warning)\])?: module (?P<module>\d+), "
    r"(?P<status>Cable unplugged|Cable error|Cable plugged)(?:, (?P<error>[^\n]+?))?\.?\s*$"
)
POWER = re.compile(r"Detected insufficient power on the PCIe slot \((?P<watts>\d+)W\)")
TEMPERATURE = re.compile(r"High temperature on sensors with bit set")


def match(text: str) -> tuple[str, dict[str, Any]] | None:
    """(kind, the event's fields) for a neighbour's message, else None. `text` is one message
    on one line (continuation lines joined)."""
    if "libnccl" in text:
        m = NCCL_SEGFAULT.search(text) or NCCL_TRAP.search(text)
        if m:
            what = m.groupdict().get("what") or "segfault"
            comm = m.group("comm").strip()
            return "nccl_segfault", {
                "pid": int(m.group("pid")),
                "process_name": comm or None,
                "device": m.group("lib"),
                "detail": f"pid {m.group('pid')} ({comm or '?'}): {what} in {m.group('lib')}",
            }
    if "nvidia-peermem" in text:
        m = PEERMEM.search(text)
        if m:
            return "peermem_error", {"detail": f"{m.group('func')}: {m.group('msg').strip()}"}
    if "mlx5" not in text:
        return None
    prefix = MLX5_PREFIX.search(text)
    fields: dict[str, Any] = {}
    if prefix:
        fields["pci"] = prefix.group("bdf").lower()
        fields["device"] = prefix.group("ifname")
    body = text[prefix.end() :] if prefix else text
    m = LINK.search(body)
    if m and prefix and prefix.group("ifname"):
        kind = "nic_link_down" if m.group("state") == "down" else "nic_link_up"
        return kind, {**fields, "detail": f"{prefix.group('ifname')}: Link {m.group('state')}"}
    m = MODULE.search(body)
    if m:
        status, error = m.group("status"), m.group("error")
        module = f"module {m.group('module')}"
        fields["device"] = fields.get("device") or module
        if status == "Cable plugged":
            return "nic_link_up", {**fields, "detail": f"{module}: {status}"}
        kind = "nic_cable" if status == "Cable unplugged" or not error else "nic_cable_error"
        if error and "temperature" in error.lower():
            kind = "nic_temperature"
        return kind, {**fields, "detail": f"{module}: {status}" + (f", {error}" if error else "")}
    m = POWER.search(body)
    if m:
        return "nic_power", {
            **fields,
            "detail": f"insufficient power on the PCIe slot ({m.group('watts')} W)",
        }
    if TEMPERATURE.search(body):
        return "nic_temperature", {**fields, "detail": body.strip()}
    return None
