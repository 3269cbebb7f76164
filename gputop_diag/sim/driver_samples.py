"""The driver's busy-time samples on the simulated machine.

GPU busy time is one signal per GPU (the profile's square wave, `profiles.busy_share`). The
driver samples it every ~1/6 s (`driver_sample`, what `nvmlDeviceGetSamples` returns); the
utilization figure of a tick is the mean of the six samples of the last second, as NVML reports
busy time over its sample period (1 s on these products).

`DriverSamples` is a part of `SimMachine` (`machine.py`): it reads the machine's profiles, GPU
model, seeded noise and the GPUs whose last rank was signalled away.
"""

from __future__ import annotations

from .profiles import busy_share

SAMPLES_PER_S = 6  # the driver samples busy time every ~1/6 s (NVML API reference)


def sample_time_us(k: int) -> int:
    """CPU time (epoch microseconds) of the driver's busy-time sample number k."""
    return k * 1_000_000 // SAMPLES_PER_S


def last_sample(t: float) -> int:
    """The number of the newest driver sample taken at or before time t (epoch seconds)."""
    now_us = round(t * 1e6)
    k = now_us * SAMPLES_PER_S // 1_000_000 + 1
    while sample_time_us(k) > now_us:
        k -= 1
    return k


class DriverSamples:
    """GPU busy time as the driver samples it."""

    def busy_sample(self, gi: int, k: int) -> float:
        """Share of the driver's sample k (the ~1/6 s before it) that GPU gi was busy."""
        t1 = sample_time_us(k) / 1e6
        return self._busy_share(self.profile_at(t1), sample_time_us(k - 1) / 1e6, t1, gi)

    def busy(self, t: float, gi: int) -> float:
        """Share of the last second GPU gi was busy: NVML's utilization over its sample period
        (1 s here), the mean of the driver's six newest samples at time t."""
        k = last_sample(t)
        t0, t1 = sample_time_us(k - SAMPLES_PER_S) / 1e6, sample_time_us(k) / 1e6
        prof = self.profile_at(t1)
        if prof is self.profile_at(sample_time_us(k - SAMPLES_PER_S + 1) / 1e6):
            return self._busy_share(prof, t0, t1, gi)  # one profile over the whole second
        return sum(self.busy_sample(gi, k - j) for j in range(SAMPLES_PER_S)) / SAMPLES_PER_S

    def driver_sample(self, gi: int, k: int, figure: str) -> float | None:
        """The driver's sample k of GPU gi: `figure` ("util", "memctl" in %, "power_w",
        "sm_mhz") over the ~1/6 s before it; None where the device does not report it."""
        t1 = sample_time_us(k) / 1e6
        prof = self.profiles[self.phase_at(t1)[0]]
        since = self.idle_after.get(gi)  # `_busy_share`, written out: one call less per sample
        if since is not None and t1 > since:
            f = 0.0
        else:
            f = busy_share(prof, sample_time_us(k - 1) / 1e6, t1, gi)
        busy, idle, m = prof["busy"], prof["idle"], self.model
        if figure in ("util", "memctl"):
            b, i = busy.get(figure), idle.get(figure)
            if b is None:
                return None
            v = i + f * (b - i) + (self.sample_noise(figure, gi, k) if b or i else 0.0)
            return min(100.0, max(0.0, v))
        key = "power" if figure == "power_w" else "clock"
        v = idle[key] + f * (busy[key] - idle[key]) + self.sample_noise(key, gi, k)
        if figure == "power_w":
            return max(m["idle_w"], v * m["power_limit_w"])
        return float(int(max(m["idle_sm"], min(1.0, v) * m["sm_max"])))

    def _busy_share(self, prof: dict, t0: float, t1: float, gi: int) -> float:
        """`busy_share`, but none after the GPU's last rank was signalled away."""
        since = self.idle_after.get(gi)
        if since is not None and t1 > since:
            return 0.0
        return busy_share(prof, t0, t1, gi)
