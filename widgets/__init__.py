"""Reusable renderers and widgets that know nothing of NVML."""

from .glyphs import history, stacked_bar

__all__ = ["history", "stacked_bar"]
