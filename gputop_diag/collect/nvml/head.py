"""The first GPM samples of a one-shot command, taken before anything else is loaded.

NVML's GPM figures (SM activity, DRAM bandwidth, tensor pipes) come from two samples at least
`GPM_MIN_INTERVAL_S` apart (https://docs.nvidia.com/deploy/nvml-api/group__nvmlGpmFunctions.html).
`gputop-diag snapshot` takes the first ones here, right after `nvmlInit` and the handles, and only
then imports the model and the collectors and reads everything else: the wait for the second
sample overlaps that work instead of following it. The NVML collector takes the samples over
(`NvmlCollector.take_head`) as if its own first tick had taken them.

This module imports no model (its dataclasses are most of the start-up's import time): only the
guarded call (`query.py`). A failing call here is not an error: the collector makes the same
calls again and reports what fails; a GPU without a head-start sample simply gets its first one
from the collector.
"""

from __future__ import annotations

import time
from typing import Any

from .query import GpuLost, Query

GPM_MIN_INTERVAL_S = 0.1  # NVML needs the two samples at least 100 ms apart


class _WallClock:
    """This machine's clock as the real sources read it (`sources.RealClock`: `time.time`), for a
    head start begun before the sources are loaded (`GpmHeadStart.here`)."""

    @staticmethod
    def now() -> float:
        return time.time()


class GpmHeadStart:
    """`nvmlInit` (a reference of its own: NVML counts them), each GPU's handle and, where the
    GPU has GPM, its first sample with the clock's time. `close()` frees what no collector took
    and balances the init."""

    def __init__(self, nvml: Any, clock: Any) -> None:
        self.nvml, self.clock = nvml, clock
        self.samples: dict[int, tuple[float, Any]] = {}  # GPU index -> (when, sample buffer)
        self.last_at: float | None = None  # when the last GPU's sample was taken
        self._q: Query | None = None
        self._inited = False

    def begin(self) -> GpmHeadStart:
        """The init, the handles and the first samples; what was taken is given back if this is
        interrupted (a Ctrl-C while a GPU answers slowly): no caller holds the head yet."""
        n = self.nvml
        try:
            n.nvmlInit()
        except (n.NVMLError, OSError):  # no driver: the collector says why
            return self
        self._inited = True
        try:
            self._sample_all()
        except BaseException:
            self.close()
            raise
        return self

    def _sample_all(self) -> None:
        n = self.nvml
        q = self._q = Query(n)
        try:
            count = int(n.nvmlDeviceGetCount())
        except n.NVMLError:
            return
        for i in range(count):
            try:
                h = n.nvmlDeviceGetHandleByIndex(i)
                support = q(i, "nvmlGpmQueryDeviceSupport", h)
                if support is None or not support.isSupportedDevice:
                    continue
                s = q(i, "nvmlGpmSampleAlloc")
                if s is None:
                    continue
                if q(i, "nvmlGpmSampleGet", h, s) is None:
                    self._free(i, s)
                    continue
                now = self.clock.now()  # after the sample: the pair's gap is at least the wait
            except (n.NVMLError, GpuLost):
                continue
            self.samples[i] = (now, s)
            self.last_at = now

    @classmethod
    def here(cls) -> GpmHeadStart:
        """Begun on this machine's NVML (`pynvml`) as soon as the command line is read
        (`cli.main`, for `snapshot`): before the sources, the model and the collectors load, so
        that NVML's 0.1 s between two samples overlaps all of their loading."""
        import pynvml

        return cls(pynvml, _WallClock()).begin()

    def take(self, index: int) -> tuple[float, Any] | None:
        """GPU `index`'s sample, handed over: its buffer is the taker's to free."""
        return self.samples.pop(index, None)

    def _free(self, index: int, sample: Any) -> None:
        try:
            self._q(index, "nvmlGpmSampleFree", sample)
        except (self.nvml.NVMLError, GpuLost):
            pass

    def close(self) -> None:
        """Free the samples not taken over and balance `nvmlInit` (once)."""
        for i, (_, s) in list(self.samples.items()):
            self._free(i, s)
        self.samples.clear()
        if self._inited:
            self._inited = False
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass
