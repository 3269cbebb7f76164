"""Network interface names in free text (a NIC's kernel messages beside the Xid lines, the
health findings about its ports), as systemd's predictable naming scheme writes them
(https://www.freedesktop.org/software/systemd/man/latest/systemd.net-naming-scheme.html):
a kind (`en` Ethernet, `ib` InfiniBand, `wl`, `ww`, `sl`) and where the device is.

- `enx<MAC>` (`enx0a1b2c3d4e5f`): the MAC address itself, so the MAC's pseudonym, the same as
  the address gets in any other form (`0a:1b:2c:3d:4e:5f`): `enx-mac-…`.
- `[P<domain>]p<bus>s<slot>` (`enp12s0f1np1`, `ibp12s0`, `enP4p1s0f0np0`): the PCI domain, bus
  and slot in decimal, a bus id in another spelling: the device's bus-id pseudonym, the one its
  `0000:0c:00.1` gets (`en-pci-…-f1np1`); the function and port name after it are kept (they
  tell a card's two ports apart and name nothing).
- `s<slot>` (`ens3f0`): the firmware's slot number, where the card sits: `en-pci-…-f0`.
- Kept, as GPU indices are: names that only count devices (`eno1`, `eth0`, `ib0`, `bond0`, the
  RDMA devices `mlx5_0`).

Any letter case: one device, one pseudonym.
"""

from __future__ import annotations

import re

from .table import PseudonymTable
from .work import Work

_KIND = r"(?P<kind>en|ib|wl|ww|sl)"
_TAIL = r"(?P<tail>(?:f\d+)?(?:n[a-z0-9]+|d\d+)?)"
_EDGE_BEFORE, _EDGE_AFTER = r"(?<![A-Za-z0-9_-])", r"(?![A-Za-z0-9_])"


def _by_mac(s: PseudonymTable, m: re.Match, w: Work) -> str:
    mac = m.group("mac")
    written = m.group(0)[: m.start("mac") - m.start(0)]  # `enx` as written
    return w.keep(f"{written}-{s.pseudonym('mac', mac, mac.lower())}", m.group(0))


def _by_bus(s: PseudonymTable, m: re.Match, w: Work) -> str:
    domain, bus, slot = (int(m.group(k) or 0) for k in ("domain", "bus", "slot"))
    p = s.pci_of(m.group(0), domain, bus, slot)
    return w.keep(_shown(m, p), m.group(0))


def _by_slot(s: PseudonymTable, m: re.Match, w: Work) -> str:
    p = s.pseudonym("pci", m.group(0), f"slot {int(m.group('slot'))}")
    return w.keep(_shown(m, p), m.group(0))


def _shown(m: re.Match, pseudonym: str) -> str:
    tail = m.group("tail")
    return f"{m.group('kind')}-{pseudonym}" + (f"-{tail}" if tail else "")


NETDEV_RULES: tuple[tuple[re.Pattern[str], object], ...] = (
    (re.compile(rf"(?i){_EDGE_BEFORE}{_KIND}x(?P<mac>[0-9a-f]{{12}}){_EDGE_AFTER}"), _by_mac),
    (
        re.compile(
            rf"(?i){_EDGE_BEFORE}{_KIND}(?:P(?P<domain>\d+))?p(?P<bus>\d+)s(?P<slot>\d+)"
            rf"{_TAIL}(?:u\d+)*{_EDGE_AFTER}"
        ),
        _by_bus,
    ),
    (re.compile(rf"(?i){_EDGE_BEFORE}{_KIND}s(?P<slot>\d+){_TAIL}{_EDGE_AFTER}"), _by_slot),
)
