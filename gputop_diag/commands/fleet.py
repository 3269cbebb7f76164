"""`gputop-diag fleet`: diagnose many nodes from Prometheus (dcgm-exporter's series or ours)."""

from __future__ import annotations

import argparse
import json
import re
import time
from datetime import datetime

from ..model.exits import EXIT_NO_GPU, EXIT_PROMETHEUS, EXIT_USAGE
from .options import add_access_arguments

REPLAY = False
DEFAULT_WINDOW = "6m"  # at 15 s scrapes, the span a memory leak needs (fleet/read.py)
DEFAULT_TIMEOUT_S = 10.0
# Ours: a window holds at least two scrape intervals (three samples) to judge anything; a
# window under 30 s is checked against the interval read off the last 30 s (a shorter span
# holds too few samples to tell it).
MIN_WINDOW_STEPS = 2
MIN_DETECT_SPAN_S = 30.0
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)?$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prometheus",
        required=True,
        metavar="URL",
        help="Prometheus' address, e.g. http://prometheus:9090",
    )
    add_access_arguments(p)
    p.add_argument(
        "--match",
        default="",
        metavar="SELECTOR",
        help="PromQL label matchers that pick the GPU series, e.g. '{cluster=\"a\"}' or "
        "'Hostname=~\"gpu-0[1-4]\"'",
    )
    p.add_argument(
        "--window",
        default=DEFAULT_WINDOW,
        metavar="DURATION",
        help=f"how far back to judge (default {DEFAULT_WINDOW}; 30s, 5m, 1h)",
    )
    p.add_argument(
        "--step",
        default=None,
        metavar="DURATION",
        help="seconds between samples (default: the scrape interval, read off the data)",
    )
    p.add_argument(
        "--at",
        default=None,
        metavar="TIME",
        help="judge the window ending at TIME (unix seconds or ISO 8601) instead of now",
    )
    p.add_argument(
        "--group-by",
        default=None,
        metavar="LABEL",
        help="the label that names a multi-node job (default hpc_job: the Slurm job, as "
        "dcgm-exporter and gputop-diag exporter label it)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT_S,
        metavar="S",
        help=f"seconds to wait for each answer from Prometheus (default {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        metavar="N",
        help="processes that read and judge the nodes (default: one per CPU, up to 4; "
        "1: this process alone)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (schema gputop-diag.fleet/1, see docs/fleet.md)",
    )
    from .common import add_sanitize

    add_sanitize(p)


def access_of(args: argparse.Namespace):
    """The `prometheus.client.Access` the options ask for."""
    from ..prometheus.client import Access

    return Access(
        bearer_token_file=getattr(args, "bearer_token_file", None),
        ca_file=getattr(args, "ca_file", None),
        cert_file=getattr(args, "cert_file", None),
        key_file=getattr(args, "key_file", None),
        insecure_skip_verify=bool(getattr(args, "insecure_skip_verify", False)),
    )


def run_live(args: argparse.Namespace) -> int:
    """`gputop-diag --prometheus URL`: the live view's Fleet pane (Textual, imported here)."""
    from ..fleet.live import FleetQuery
    from ..prometheus.client import Prometheus
    from .common import say

    try:
        prom = Prometheus(args.prometheus, timeout=DEFAULT_TIMEOUT_S, access=access_of(args))
    except ValueError as e:
        say(e)
        return EXIT_USAGE
    from ..tui.fleet_app import run_fleet_view

    return run_fleet_view(
        FleetQuery(prom), sanitize=args.sanitize, low_bandwidth=args.low_bandwidth
    )


def parse_duration(text: str, what: str) -> float:
    m = _DURATION.match(text.strip())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"{what} {text!r}: expected a duration such as 30s, 5m or 1h")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


def _duration_text(seconds: float) -> str:
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def parse_time(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"--at {text!r}: expected unix seconds or ISO 8601 (2026-01-15T10:00:00Z)"
        ) from None
    return t.timestamp() if t.tzinfo else t.astimezone().timestamp()


def run(args: argparse.Namespace, sources=None) -> int:
    from ..fleet.judge import render_fleet_text, to_fleet_json
    from ..fleet.query import detect_step
    from ..fleet.read import NoFleetData
    from ..fleet.stream import stream_fleet
    from ..prometheus.client import Prometheus, PrometheusError
    from ..prometheus.dcgm_fields import JOB_LABEL
    from .common import say

    group_by = args.group_by or JOB_LABEL
    try:
        window = parse_duration(args.window, "--window")
        step = parse_duration(args.step, "--step") if args.step else None
        at = parse_time(args.at) if args.at else None
        if args.timeout <= 0:
            raise ValueError("--timeout must be positive")
        if args.workers is not None and args.workers < 1:
            raise ValueError("--workers must be 1 or more (1: this process alone)")
        if step is not None and step > window:
            raise ValueError("--step must not exceed --window")
        prom = Prometheus(args.prometheus, timeout=args.timeout, access=access_of(args))
    except ValueError as e:
        say(e)
        return EXIT_USAGE
    try:
        if at is None:
            at = time.time()
        least = step
        if least is None and window < MIN_DETECT_SPAN_S:  # too short to read the interval off
            least = detect_step(prom, args.match, MIN_DETECT_SPAN_S, at)
        if least is not None and window < MIN_WINDOW_STEPS * least:
            return _window_too_short(args, least)
        verdict = stream_fleet(
            prom,
            window_s=window,
            step_s=step,
            match=args.match,
            at=at,
            group_by=group_by,
            workers=args.workers,
        )
    except PrometheusError as e:
        say(f"{e.message}; next: {e.next_step}")
        return EXIT_PROMETHEUS
    except NoFleetData as e:
        say(
            f"{e}; next: check that Prometheus scrapes dcgm-exporter or "
            "`gputop-diag exporter` (curl its /metrics), and --match and --window"
        )
        return EXIT_NO_GPU
    if window < MIN_WINDOW_STEPS * verdict.data.step_s:
        return _window_too_short(args, verdict.data.step_s)
    if getattr(args, "sanitize", False):
        return _print_sanitized(verdict, args, group_by, prom.url)
    if args.json:
        doc = to_fleet_json(verdict, prometheus=prom.url, match=args.match, group_by=group_by)
        print(json.dumps(doc, indent=2))
    else:
        print(render_fleet_text(verdict, width=text_width()))
    return 0


def text_width() -> int:
    """The width the text is laid out for: the terminal's (or `COLUMNS`), at least 60; where
    the output goes to a file or a pipe, none: every line whole, for grep and for reading."""
    import os
    import shutil
    import sys

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() or sys.stdout.isatty():
        return max(60, shutil.get_terminal_size().columns)
    return 1_000_000


def _window_too_short(args: argparse.Namespace, step: float) -> int:
    from .common import say

    say(
        f"--window {args.window} is shorter than {MIN_WINDOW_STEPS} steps "
        f"of {step:g} s ({'--step' if args.step else 'the scrape interval here'}): "
        f"give at least --window {_duration_text(MIN_WINDOW_STEPS * step)}"
    )
    return EXIT_USAGE


def _print_sanitized(verdict, args: argparse.Namespace, group_by: str, url: str) -> int:
    """The fleet with pseudonyms for nodes, instances, job labels, UUIDs and bus ids, and no
    Prometheus address or selector; nothing at all where a leak check still finds a name."""
    from ..fleet.judge import render_fleet_text, to_fleet_json
    from ..fleet.sanitize import FleetNames
    from ..monitor.run import session_key
    from .common import sanitized_output

    names = FleetNames(session_key())  # the run's key, as every sanitized surface of it
    shown = names.verdict(verdict)
    if args.json:
        doc = to_fleet_json(shown, prometheus=None, match=None, group_by=group_by)
        text = json.dumps(doc, indent=2)
    else:
        text = render_fleet_text(shown, width=text_width())
    if url in text:
        text = text.replace(url, "Prometheus")
    out = sanitized_output(text, names.s)
    if out is None:
        return 1
    print(out)
    return 0
