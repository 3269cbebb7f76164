"""The checks every command makes on its time options: a clear usage error, never a traceback;
and the options both the top level and `fleet` take (how to reach Prometheus). Light: the entry
point reads this module to build its parser, before any command is chosen."""

from __future__ import annotations

import argparse
import math
import sys
import time

# Ours: a simulated run advances its clock instantly, one tick per interval, and a tick costs
# the CPU a real one costs (about 7 ms for `diagnose`, 12 ms for `record`, 8 GPUs, on a loaded
# 2-core machine). A scenario plays its timeline once (600 s at most) and then holds or loops
# it, so past 1,200 ticks (twice the longest) a run only burns CPU: about 8 s of `diagnose`.
MAX_SIMULATED_S = 24 * 3600.0
MAX_SIMULATED_TICKS = 1200
PROGRESS_EVERY_S = 3.0  # wall-clock seconds between two progress lines of a simulated run


INTERVAL_HELP = "seconds between samples (default 1, at least 0.1)"


def add_time_options(
    p: argparse.ArgumentParser, seconds_help: str | None, interval_help: str = INTERVAL_HELP
) -> None:
    """`--seconds N` (left out where `seconds_help` is None) and `--interval S`, which falls back
    to the top-level `--interval` (default 1) when not given after the command."""
    if seconds_help is not None:
        p.add_argument("--seconds", type=float, default=None, metavar="N", help=seconds_help)
    p.add_argument(
        "--interval", type=float, default=argparse.SUPPRESS, metavar="S", help=interval_help
    )


def time_problem(seconds: float | None, interval: float) -> str | None:
    """Why --seconds or --interval cannot be used, or None."""
    from ..monitor.run import interval_problem  # the floor, once: the paced loop's

    problem = interval_problem(interval)
    if problem is not None:
        return problem
    if seconds is not None and (not math.isfinite(seconds) or seconds <= 0):
        return f"--seconds must be a positive number of seconds, not {seconds:g}"
    return None


def capped(
    seconds: float | None, simulated: bool, interval: float = 1.0
) -> tuple[float | None, str | None]:
    """(seconds to run, a note when they were cut): a simulated run stops at
    `MAX_SIMULATED_TICKS` ticks, at most a day of simulated time."""
    cap = min(MAX_SIMULATED_S, MAX_SIMULATED_TICKS * interval)
    if simulated and seconds is not None and seconds > cap:
        return cap, (
            f"--seconds {seconds:g} under --demo is capped at {cap:g} s of simulated time "
            f"({MAX_SIMULATED_TICKS:,} samples at --interval {interval:g}): each costs the CPU "
            "of a real one, so it takes a while here; progress follows on stderr"
        )
    return seconds, None


class SimulatedProgress:
    """An `on_tick` of a simulated run: every `PROGRESS_EVERY_S` of wall-clock time, how much
    of the simulated span is done and about how long the rest takes, on stderr (simulated time
    runs as fast as the CPU allows, so a long span is minutes without a sign otherwise)."""

    def __init__(self, seconds: float, then=None, clock=time.monotonic, out=None) -> None:
        self.seconds, self.then, self.clock = seconds, then, clock
        self.out = out
        self.first: float | None = None  # the first tick's simulated time
        self.started = self.last = clock()
        self.said = 0

    def __call__(self, tick) -> None:
        t = tick.snapshot.timestamp
        if self.first is None:
            self.first = t
        now = self.clock()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            done = min(max(t - self.first, 0.0), self.seconds)
            share = done / self.seconds if self.seconds > 0 else 1.0
            left = (now - self.started) * (1 - share) / share if share > 0 else None
            rest = f", about {left:.0f} s left" if left is not None else ""
            print(
                f"gputop-diag: simulated {done:,.0f} of {self.seconds:,.0f} s ({share:.0%}){rest}",
                file=self.out or sys.stderr,
                flush=True,
            )
            self.said += 1
        if self.then is not None:
            self.then(tick)


def with_progress(on_tick, seconds: float | None, simulated: bool):
    """`on_tick`, with the progress of a simulated run of `seconds` said on stderr."""
    if not simulated or seconds is None:
        return on_tick
    return SimulatedProgress(seconds, then=on_tick)


def add_access_arguments(p: argparse.ArgumentParser) -> None:
    """How to reach a Prometheus behind TLS or a proxy that checks a token (the names of
    Prometheus' own http_config: bearer token file, CA file, client certificate and key,
    insecure_skip_verify)."""
    p.add_argument(
        "--bearer-token-file",
        metavar="FILE",
        help="send the token in FILE as 'Authorization: Bearer' (a proxy in front of "
        "Prometheus checks it); the token is never printed",
    )
    p.add_argument(
        "--ca-file",
        metavar="FILE",
        help="PEM certificates of the CA that signed Prometheus' TLS certificate (https://)",
    )
    p.add_argument(
        "--cert-file",
        metavar="FILE",
        help="a client certificate (PEM) for mutual TLS, its key in it or in --key-file",
    )
    p.add_argument("--key-file", metavar="FILE", help="the client certificate's key (PEM)")
    p.add_argument(
        "--insecure-skip-verify",
        action="store_true",
        help="do not verify Prometheus' TLS certificate (a self-signed test setup)",
    )
