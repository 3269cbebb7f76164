"""Host state through the `psutil` module API and /proc/pressure."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..model import HostState, PressureStall

if TYPE_CHECKING:
    from .host_head import HostHead

PRESSURE_RESOURCES = ("cpu", "io", "memory")


def parse_pressure(text: str) -> PressureStall | None:
    """Parse /proc/pressure/<resource>: `some avg10=0.12 avg60=... total=...` and `full ...`."""
    some: dict[str, float] = {}
    full: dict[str, float] = {}
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in ("some", "full"):
            continue
        vals = {}
        for part in rest.split():
            k, _, v = part.partition("=")
            try:
                vals[k] = float(v)
            except ValueError:
                continue
        (some if kind == "some" else full).update(vals)
    if "avg10" not in some:
        return None
    return PressureStall(
        some_avg10=some["avg10"], full_avg10=full.get("avg10"), some_avg60=some.get("avg60")
    )


def _without_own(per_cpu: tuple[float, ...], own: float | None) -> tuple[float, ...]:
    """The CPUs' busy shares without this program's own (`own`, percent of all of them), taken
    from each CPU in proportion to its busy share: which CPU ran it is not known."""
    total = sum(per_cpu) / len(per_cpu) if per_cpu else 0.0
    if not own or total <= 0:
        return per_cpu
    keep = max(0.0, total - own) / total
    return tuple(round(v * keep, 1) for v in per_cpu)


class HostCollector:
    def __init__(self, psutil: Any, procfs: Any, clock: Any, head: HostHead | None = None) -> None:
        """`head`: the first readings taken before this was imported (`collect/host_head.py`),
        taken over as this collector's own; without one it takes them now."""
        self.psutil, self.procfs, self.clock = psutil, procfs, clock
        self._cpu_count = psutil.cpu_count(logical=True) or 1
        self._disk_prev: tuple[float, int, int] | None = None
        self._head: HostHead | None = None  # its window's first reading leaves our CPU out
        if head is not None and head.at is not None:
            self._disk_prev, self._head = head.disk, head
        else:  # prime: the next call averages from here
            psutil.cpu_percent(interval=None, percpu=True)
            psutil.cpu_times_percent(interval=None)
        self._no_pressure: set[str] = set()

    def collect(self) -> HostState:
        ps = self.psutil
        per_cpu = tuple(float(v) for v in ps.cpu_percent(interval=None, percpu=True))
        head, self._head = self._head, None
        if head is not None:
            per_cpu = _without_own(per_cpu, head.own_cpu_share(len(per_cpu) or 1))
        times = ps.cpu_times_percent(interval=None)
        try:
            load = tuple(ps.getloadavg())
        except (AttributeError, OSError):
            load = None
        vm = ps.virtual_memory()
        sw = ps.swap_memory()
        read_s, write_s = self._disk_rates()
        return HostState(
            cpu_count=self._cpu_count,
            cpu_pct=sum(per_cpu) / len(per_cpu) if per_cpu else 0.0,
            per_cpu_pct=per_cpu,
            iowait_pct=getattr(times, "iowait", None),
            load_avg=load,
            mem_total_bytes=vm.total,
            mem_available_bytes=vm.available,
            mem_used_bytes=vm.used,
            swap_total_bytes=sw.total,
            swap_used_bytes=sw.used,
            disk_read_bytes_s=read_s,
            disk_write_bytes_s=write_s,
            pressure=self._pressure(),
        )

    def _disk_rates(self) -> tuple[float | None, float | None]:
        try:
            # the byte counters are 64-bit (/proc/diskstats): psutil's guard against wrapping
            # (nowrap) is not needed, and a wrap would read as one tick of 0 B/s
            io = self.psutil.disk_io_counters(nowrap=False)
        except (OSError, RuntimeError):
            io = None
        if io is None:
            return None, None
        now = self.clock.now()
        prev, self._disk_prev = self._disk_prev, (now, io.read_bytes, io.write_bytes)
        if prev is None or now <= prev[0]:
            return None, None
        dt = now - prev[0]
        return max(0.0, (io.read_bytes - prev[1]) / dt), max(0.0, (io.write_bytes - prev[2]) / dt)

    def _pressure(self) -> dict[str, PressureStall]:
        out = {}
        for res in PRESSURE_RESOURCES:
            if res in self._no_pressure:
                continue
            try:
                stall = parse_pressure(self.procfs.read_text(f"/proc/pressure/{res}"))
            except OSError:  # kernels without PSI, or PSI disabled
                self._no_pressure.add(res)
                continue
            if stall is not None:
                out[res] = stall
        return out
