"""Reusable widgets that know nothing of NVML."""
