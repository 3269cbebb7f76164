"""gputop-diag: what limits this GPU workload right now."""

__version__ = "0.1.0"
