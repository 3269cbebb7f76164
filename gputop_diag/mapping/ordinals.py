"""CUDA ordinals as a process sees them, and PCI bus ids in every written form.

NVML and `nvidia-smi` number GPUs by PCI bus id and ignore `CUDA_VISIBLE_DEVICES`. CUDA numbers
only the devices that variable leaves visible, from 0, in `CUDA_DEVICE_ORDER`:

- unset: every device; empty: none;
- entries are indices (in CUDA's order), GPU UUIDs `GPU-8932f937-...` or unique prefixes of
  them, MIG UUIDs `MIG-<uuid>` (R470 and newer) or the older `MIG-GPU-<uuid>/<gi>/<ci>`;
- parsing stops at the first entry that names no device: `0,2,-1,1` leaves 0 and 2; index
  entries are read like strtoul (`1a` is 1); a repeated device empties the whole set (`0,0,1`:
  none), as PyTorch's copy of CUDA's parser documents (torch/cuda/__init__.py);
- `FASTEST_FIRST` (the default) puts the fastest model first; ties usually follow PCI bus id
  (observed behaviour, not promised by NVIDIA), so on one model it usually agrees with NVML;
  `PCI_BUS_ID` always agrees.

Pure functions over `Device` descriptors: the collectors build them, tests build them by hand.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ..model import GpuState
from ..model.formats import count

PCI_BUS_ID = "PCI_BUS_ID"
FASTEST_FIRST = "FASTEST_FIRST"


@dataclass(frozen=True, slots=True)
class Device:
    """A GPU, or a MIG instance of one, as the ordinal computation needs it."""

    key: str  # "gpu3" or "gpu3-mig1"
    nvml_index: int
    name: str | None = None
    uuid: str | None = None  # GPU-... or MIG-...
    mig_index: int | None = None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None
    parent_uuid: str | None = None  # a MIG instance's GPU
    mig_enabled: bool = False  # a GPU in MIG mode (reached through its instances)

    @property
    def is_mig(self) -> bool:
        return self.mig_index is not None


def row_key(gpu: int, mig: int | None = None) -> str:
    return f"gpu{gpu}" if mig is None else f"gpu{gpu}-mig{mig}"


def devices_of(gpus: Sequence[GpuState]) -> list[Device]:
    """Descriptors of the snapshot's GPUs and their MIG instances, in NVML order."""
    out = []
    for g in gpus:
        s = g.static
        out.append(
            Device(
                row_key(g.index),
                g.index,
                s.name,
                s.uuid,
                mig_enabled=bool(g.mig_instances) or bool(s.mig_mode),
            )
        )
        for m in g.mig_instances:
            out.append(
                Device(
                    row_key(g.index, m.mig_index),
                    g.index,
                    m.name,
                    m.uuid,
                    m.mig_index,
                    m.gpu_instance_id,
                    m.compute_instance_id,
                    s.uuid,
                )
            )
    return out


@dataclass(frozen=True, slots=True)
class Entry:
    """One entry of CUDA_VISIBLE_DEVICES and what it named."""

    text: str
    key: str | None  # the device it names; None when invalid
    why: str = ""  # why it names none; for a valid entry, how it was read (`1a` as 1)
    ignored: bool = False  # after an invalid entry: CUDA never reads it


@dataclass(frozen=True, slots=True)
class Visibility:
    """What CUDA shows a process with this environment."""

    cvd: str | None
    order: str  # FASTEST_FIRST or PCI_BUS_ID (the default spelled out)
    entries: tuple[Entry, ...]
    visible: tuple[str, ...]  # device keys in CUDA ordinal order
    order_known: bool  # False: FASTEST_FIRST over mixed models with index entries or unset
    mig_unknown: bool  # MIG instances visible by default: their numbering depends on CUDA
    mixed_models: bool
    # why the numbering is not knowable when that is not FASTEST_FIRST over mixed models (e.g.
    # Slurm's variables cannot tell step-local from global ids)
    unknown_why: str = ""
    emptied: bool = False  # a repeated entry: CUDA shows no device at all

    @property
    def loose(self) -> tuple[Entry, ...]:
        """Index entries CUDA reads by their leading digits (`1a` as 1)."""
        return tuple(e for e in self.entries if e.key is not None and e.why)

    @property
    def invalid(self) -> Entry | None:
        return next((e for e in self.entries if e.key is None and not e.ignored), None)

    @property
    def hidden_by_invalid(self) -> tuple[Entry, ...]:
        """Entries after the first invalid one: they would have named devices, but CUDA stops."""
        return tuple(e for e in self.entries if e.ignored)

    def ordinal(self, key: str) -> int | None:
        """CUDA's number for device `key`; None when not visible or not knowable."""
        if key not in self.visible or not self.order_known:
            return None
        return self.visible.index(key)

    def cell(self, key: str) -> str:
        """The ordinal for a table: a number, `-` for not visible, `?` for not knowable."""
        if key not in self.visible:
            return "-"
        if not self.order_known:
            return "?"
        return str(self.visible.index(key))


def normal_order(order: str | None) -> str:
    return PCI_BUS_ID if (order or "").strip().upper() == PCI_BUS_ID else FASTEST_FIRST


def resolve(devices: Sequence[Device], cvd: str | None, order: str | None) -> Visibility:
    """The devices CUDA shows under `CUDA_VISIBLE_DEVICES=cvd` and `CUDA_DEVICE_ORDER=order`."""
    order = normal_order(order)
    whole = [d for d in devices if not d.is_mig and not d.mig_enabled]
    migs = [d for d in devices if d.is_mig]
    mixed = len({d.name for d in devices if not d.is_mig}) > 1
    by_index_known = order == PCI_BUS_ID or not mixed
    if cvd is None:
        return Visibility(
            None,
            order,
            (),
            tuple(d.key for d in whole) + tuple(d.key for d in migs),
            by_index_known and not migs,
            bool(migs),
            mixed,
        )
    entries: list[Entry] = []
    visible: list[str] = []
    stopped = emptied = False
    if cvd.strip() == "":
        return Visibility(cvd, order, (), (), True, False, mixed)
    # CUDA's reading, as PyTorch's copy of it documents (torch/cuda/__init__.py,
    # `_parse_visible_devices`): a list that starts with `GPU-`/`MIG-` is one of UUIDs and ends
    # at the first entry without that prefix; otherwise each entry is read like strtoul (its
    # leading digits: `1a` is 1), and a negative value or no digits ends the list; "Repeated
    # ordinal results in empty set" (and a device named twice by UUID, the same).
    raws = [x.strip() for x in cvd.split(",")]
    head = raws[0].lower()[:4]
    uuid_list = head in ("gpu-", "mig-")
    for text in raws:
        if stopped:
            key = None if emptied else _read_entry(text, uuid_list, head, whole, devices)[0]
            entries.append(Entry(text, key, "", ignored=key is not None))
            continue
        key, why = _read_entry(text, uuid_list, head, whole, devices)
        if key is not None and key in visible:
            entries.append(
                Entry(text, None, "repeats a device listed before: CUDA then shows no device")
            )
            visible.clear()
            stopped = emptied = True
            continue
        if key is None:
            entries.append(Entry(text, None, why))
            stopped = True
            continue
        entries.append(Entry(text, key, why))
        visible.append(key)
    # Index entries count in CUDA's order, which NVML's equals only under PCI_BUS_ID or with
    # one model; UUID entries name their device in any order.
    known = by_index_known or uuid_list
    return Visibility(
        cvd, order, tuple(entries), tuple(visible), known, False, mixed, emptied=emptied
    )


def _strtoul(text: str) -> int | None:
    """The integer an entry starts with (an optional sign, then digits); None without one."""
    m = re.match(r"[+-]?\d+", text)
    return int(m.group(0)) if m else None


def _read_entry(
    text: str, uuid_list: bool, head: str, whole: Sequence[Device], devices: Sequence[Device]
) -> tuple[str | None, str]:
    """(device key, why) for one entry; `why` explains a None key, or how a loose index entry
    such as `1a` was read."""
    if uuid_list:
        if not text.lower().startswith(head):
            kind = "GPU" if head == "gpu-" else "MIG"
            return None, (
                f"is not a {kind} UUID: a list that starts with {kind} UUIDs ends at the first "
                "entry of another form"
            )
        return _match(text, whole, devices)
    n = _strtoul(text)
    if n is None:
        if not text:
            return None, "is empty"
        return None, "does not start with a digit (and the list does not start with a UUID)"
    if n < 0:
        return None, "is a negative index"
    key, why = _match(str(n), whole, devices)
    if key is not None and text.lstrip("+") != str(n):
        why = f"read as {n}: CUDA reads an entry's leading digits, like strtoul"
    return key, why


def _match(text: str, whole: Sequence[Device], devices: Sequence[Device]) -> tuple[str | None, str]:
    if not text:
        return None, "is empty"
    if text.isdigit():
        k = int(text)
        if k < len(whole):
            return whole[k].key, ""
        return None, f"is index {k}, but only {count(len(whole), 'device')} can be numbered"
    if text.lstrip("-").isdigit():
        return None, "is a negative index"
    low = text.lower()
    if low.startswith("mig-gpu-"):  # MIG-GPU-<uuid>/<gi>/<ci> (before R470)
        parts = text[4:].split("/")
        if len(parts) == 3 and parts[1].isdigit() and parts[2].isdigit():
            gi, ci = int(parts[1]), int(parts[2])
            found = [
                d
                for d in devices
                if d.is_mig
                and (d.parent_uuid or "").lower() == parts[0].lower()
                and d.gpu_instance_id == gi
                and d.compute_instance_id == ci
            ]
            if len(found) == 1:
                return found[0].key, ""
        return None, "names no MIG instance of this machine"
    if low.startswith("mig-"):
        found = [d for d in devices if d.is_mig and _prefix(d.uuid, text, "MIG-")]
        return _one(found, "MIG UUID")
    if low.startswith("gpu-"):
        found = [d for d in devices if not d.is_mig and _prefix(d.uuid, text, "GPU-")]
        if len(found) == 1 and found[0].mig_enabled:
            return None, "names a GPU in MIG mode: name one of its MIG instances"
        return _one(found, "GPU UUID")
    return None, "is neither an index nor a GPU or MIG UUID"


def _prefix(uuid: str | None, text: str, tag: str) -> bool:
    if not uuid:
        return False
    u = uuid.lower()
    if not u.startswith(tag.lower()):
        u = tag.lower() + u
    return u.startswith(text.lower())


def _one(found: Sequence[Device], what: str) -> tuple[str | None, str]:
    if len(found) == 1:
        return found[0].key, ""
    if not found:
        return None, f"matches no {what} of this machine"
    return None, f"is a prefix of {len(found)} UUIDs: not unique"


def cuda_ordinals(
    gpus: Sequence[GpuState], cvd: str | None, order: str | None
) -> dict[str, int] | None:
    """Row key -> CUDA ordinal in this environment; None where CUDA's order can't be known."""
    v = resolve(devices_of(gpus), cvd, order)
    if not v.order_known:
        return None
    return {key: k for k, key in enumerate(v.visible)}


# -- PCI bus ids ---------------------------------------------------------------------------------
_HEX = r"[0-9a-fA-F]"
_BUS_FORMS = (
    # 00000000:3B:00.0 (NVML, nvidia-smi), 0000:3b:00.0 (procfs, lspci -D), 3b:00.0 (lspci)
    re.compile(rf"^(?:PCI:)?(?:({_HEX}{{1,8}}):)?({_HEX}{{1,2}}):({_HEX}{{1,2}})(?:\.([0-7]))?$"),
)
_XORG = re.compile(r"^PCI:(\d{1,3}):(\d{1,2}):(\d)$")  # PCI:59:0:0, decimal


@dataclass(frozen=True, slots=True, order=True)
class BusId:
    domain: int
    bus: int
    device: int
    function: int = 0

    @property
    def nvml(self) -> str:
        return f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.{self.function}"

    @property
    def procfs(self) -> str:
        """The /proc/driver/nvidia/gpus/ and /sys/bus/pci/devices/ form."""
        return f"{self.domain:04x}:{self.bus:02x}:{self.device:02x}.{self.function}"

    @property
    def xid(self) -> str:
        return f"PCI:{self.domain:04x}:{self.bus:02x}:{self.device:02x}"

    @property
    def xorg(self) -> str:
        return f"PCI:{self.bus}:{self.device}:{self.function}"


def parse_bus_id(text: str | None) -> BusId | None:
    """Any written form of a PCI bus id (NVML, procfs, lspci, the kernel log's `PCI:0000:3b:00`
    without a function, Xorg's decimal `PCI:59:0:0`) -> one value; None when it is none."""
    if not text:
        return None
    t = text.strip()
    m = _XORG.match(t)
    if m and t.count(":") == 3:
        return BusId(0, int(m.group(1)), int(m.group(2)), int(m.group(3)))
    for rx in _BUS_FORMS:
        m = rx.match(t)
        if m:
            dom, bus, dev, fn = m.groups()
            return BusId(int(dom or "0", 16), int(bus, 16), int(dev, 16), int(fn or "0"))
    return None
