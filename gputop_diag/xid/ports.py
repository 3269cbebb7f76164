"""A network adapter port's history in the kernel log: when its link went down, whether and when
it came back, and whether it flaps (down again and again). mlx5e prints "Link down" and "Link
up" each time the port's carrier changes (drivers/net/ethernet/mellanox/mlx5/core/en_main.c,
mlx5e_update_carrier), and a port being brought up prints "Link down" then "Link up" a few
seconds later: that alone is no fault. Pure; read by the triage (`flapping`) and the health
findings (`xid/health.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .events import KernelEvent
from .types import Finding, nic_name, span, when

FLAP_WINDOW_S = 3600.0  # downs of one port this close together: it flaps
FLAP_DOWNS = 2  # ... this many of them
BACK_SOON_S = 120.0  # a link back up this soon after going down once: a bring-up or a blip
FLAPPING = (
    "network port flapping",
    "cable, transceiver or switch port: does it follow the cable or stay with the port?",
)


@dataclass(frozen=True, slots=True)
class PortHistory:
    """One adapter port's link as the log tells it, oldest first."""

    name: str  # "NIC 0000:0c:00.1 enp12s0f1np1"
    pci: str | None
    device: str | None
    downs: tuple[float, ...]  # times the link went down (undated lines left out)
    ups: tuple[float, ...]  # times it came back
    sources: tuple[str, ...]

    @property
    def last_down(self) -> float:
        return self.downs[-1]

    @property
    def back_after(self) -> float | None:
        """Seconds from the last down to the first up after it; None: not back in the log."""
        up = next((u for u in self.ups if u >= self.last_down), None)
        return None if up is None else up - self.last_down

    def flaps(self) -> tuple[float, ...]:
        """The downs of the busiest FLAP_WINDOW_S, when there are FLAP_DOWNS of them."""
        best: tuple[float, ...] = ()
        start = 0
        for end, t in enumerate(self.downs):
            while t - self.downs[start] > FLAP_WINDOW_S:
                start += 1
            if end - start + 1 > len(best):
                best = self.downs[start : end + 1]
        return best if len(best) >= FLAP_DOWNS else ()

    @property
    def transient(self) -> bool:
        """Down once, back within BACK_SOON_S: a port brought up, or a blip."""
        back = self.back_after
        return len(self.downs) == 1 and back is not None and back <= BACK_SOON_S


def port_histories(events: Sequence[KernelEvent]) -> list[PortHistory]:
    """Every port that went down (a `nic_link_down`, or its cable unplugged), with its ups."""
    downs: dict[tuple, list[KernelEvent]] = {}
    ups: dict[tuple, list[float]] = {}
    for e in events:
        if e.timestamp is None:
            continue
        key = (e.pci, e.device)
        if e.kind in ("nic_link_down", "nic_cable"):
            downs.setdefault(key, []).append(e)
        elif e.kind == "nic_link_up":
            ups.setdefault(key, []).append(e.timestamp)
    out = []
    for key, evs in downs.items():
        evs.sort(key=lambda e: e.timestamp)
        out.append(
            PortHistory(
                name=nic_name(evs[-1]),
                pci=key[0],
                device=key[1],
                downs=tuple(e.timestamp for e in evs),
                ups=tuple(sorted(ups.get(key, ()))),
                sources=tuple(dict.fromkeys(s for e in evs for s in e.sources)),
            )
        )
    out.sort(key=lambda p: -p.last_down)
    return out


def describe(p: PortHistory) -> str:
    """ "NIC 0000:0c:00.1 enp12s0f1np1 went down 3 times in 20 min (last at …), back after 4 s"."""
    flaps = p.flaps()
    if flaps:
        said = f"{p.name} went down {len(flaps)} times in {span(flaps[-1] - flaps[0])}"
    elif len(p.downs) > 1:
        said = f"{p.name} went down {len(p.downs)} times"
    else:
        said = f"{p.name} went down"
    said += f" (last at {when(p.last_down)})"
    back = p.back_after
    return said + (
        f", back up after {span(back)}" if back is not None else ", not back up in the log"
    )


def flapping(events: Sequence[KernelEvent]) -> list[Finding]:
    """The evidence → next question row for the ports that flap."""
    out = []
    for p in port_histories(events):
        if not p.flaps():
            continue
        out.append(
            Finding(
                FLAPPING[0],
                FLAPPING[1],
                describe(p) + ": collectives between nodes stall or fail each time",
                "ibstat or ethtool on the port, then swap the cable or transceiver: if the "
                "flapping follows it, replace it; if it stays, check the switch port",
                "warning",
                (p.name,),
            )
        )
    return out
