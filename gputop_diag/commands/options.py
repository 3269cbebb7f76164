"""The checks every command makes on its time options: a clear usage error, never a traceback;
and the options both the top level and `fleet` take (how to reach Prometheus). Light: the entry
point reads this module to build its parser, before any command is chosen."""

from __future__ import annotations

import argparse
import math

# Ours: a simulated run advances its clock instantly, one tick per interval; past a day of
# simulated time it only burns CPU.
MAX_SIMULATED_S = 24 * 3600.0


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


def capped(seconds: float | None, simulated: bool) -> tuple[float | None, str | None]:
    """(seconds to run, a note when they were cut): a simulated run stops at a day."""
    if simulated and seconds is not None and seconds > MAX_SIMULATED_S:
        return MAX_SIMULATED_S, (
            f"--seconds {seconds:g} under --demo is capped at {MAX_SIMULATED_S:g} s of "
            "simulated time"
        )
    return seconds, None


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
