"""Faults a test or a scenario puts into the simulated machine: NVML calls that raise an error
or block, and GPUs that fall off the bus.

`SimFaults` is a part of `SimMachine` (`machine.py`); the fake pynvml asks it, call by call,
whether to raise (`take_error`) or block (`take_hang`), and whether a GPU is lost (`is_lost`).
"""

from __future__ import annotations

import threading

HANG_CAP_S = 120.0  # the longest a `hang()` blocks a call when nobody releases it


class SimFaults:
    """Injected NVML errors and hangs, lost GPUs."""

    def inject_error(
        self, function_name: str, code: int, gpu: int | None = None, times: int | None = None
    ) -> None:
        """Make fake pynvml `function_name` raise NVMLError(code), for one GPU or all."""
        self.errors.setdefault(function_name, []).append([gpu, code, times])

    def clear_errors(self) -> None:
        self.errors.clear()

    def hang(self, function_name: str, gpu: int | None = None) -> threading.Event:
        """Make fake pynvml `function_name` block (for one GPU or all) until the returned event
        is set, as a call into a failing GPU can block for minutes. A safety cap of
        `HANG_CAP_S` keeps a forgotten hang from stalling a test run forever."""
        release = threading.Event()
        self.hangs.setdefault(function_name, []).append((gpu, release))
        return release

    def take_hang(self, fn: str, gpu: int | None) -> threading.Event | None:
        for g, release in self.hangs.get(fn, ()):
            if (g is None or g == gpu) and not release.is_set():
                return release
        return None

    def lose_gpu(self, index: int, at: float | None = None) -> None:
        """GPU `index` falls off the bus now, or at `at` (epoch, or seconds from the start)."""
        when = self.clock.now() if at is None else at
        if when < self.clock.start / 2:  # a scenario-relative time
            when += self.clock.start
        self.lost_at[index] = when
        self.xids = sorted(
            [*self.xids, (when, index, 79, None, None, "GPU has fallen off the bus.")],
            key=lambda x: x[0],
        )
        self.kernel_lines = self._kernel_lines()

    def take_error(self, fn: str, gpu: int | None) -> int | None:
        rules = self.errors.get(fn)
        if not rules:
            return None
        for r in rules:
            g, code, times = r
            if g is None or g == gpu:
                if times is not None:
                    if times <= 0:
                        continue
                    r[2] = times - 1
                self.raised[fn] += 1
                return code
        return None

    def is_lost(self, gi: int) -> bool:
        t = self.lost_at.get(gi)
        return t is not None and self.clock.now() >= t
