"""`gputop-diag exporter`: serve what the Monitor sees to Prometheus, in dcgm-exporter's names.

The Monitor ticks every --interval seconds (sample, slow sources, classify, as every view does);
each tick rebuilds the metric families (`prometheus.export.TickMetrics`) and a scrape serves the
newest. Headless: no Textual.
"""

from __future__ import annotations

import argparse
import contextlib
import os

from ..model.exits import EXIT_NO_GPU, EXIT_USAGE
from ..monitor.core import Monitor
from ..monitor.run import Run, StopSignals
from ..sources import RealClock, RealProcFS, Sources
from .common import no_driver_error, say, seeded_sanitizer
from .options import add_time_options, time_problem

# dcgm-exporter's variable for its HPC job mapping directory (`prometheus/owners.py`); named
# here so that parsing the options imports nothing of the exporter's.
HPC_JOB_MAPPING_ENV = "DCGM_HPC_JOB_MAPPING_DIR"
# dcgm-exporter's host label, and its spelling before NVIDIA/dcgm-exporter#655 (as
# `prometheus/dcgm_fields.py` HOST_LABELS; named here so that parsing the options imports nothing
# of the exporter's).
HOST_LABELS = ("hostname", "Hostname")
DEFAULT_LISTEN = ":9401"  # dcgm-exporter listens on :9400; both can run on one node
REPLAY = False


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="ADDR:PORT",
        help=f"where to serve /metrics (default {DEFAULT_LISTEN}: every interface, port 9401; "
        "dcgm-exporter's own default is :9400); port 0 picks a free port and prints it",
    )
    add_time_options(
        p,
        None,
        interval_help="seconds between samples (default 1); set Prometheus' scrape_interval "
        "to match",
    )
    p.add_argument(
        "--lint-clean",
        action="store_true",
        help="serve what promtool check metrics accepts instead of dcgm-exporter's exact output: "
        "the GPU model label model_name (not modelName), DCGM's counters untyped (their names "
        "lack _total), the PCIe replay count as gputop_diag_pcie_replays_total (not "
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER). Dashboards written for dcgm-exporter need the default",
    )
    p.add_argument(
        "--hostname-label",
        choices=HOST_LABELS,
        default=HOST_LABELS[0],
        help="the name of the host label: hostname (default), as dcgm-exporter names it since "
        "NVIDIA/dcgm-exporter#655, or Hostname, as its earlier releases did (for dashboards and "
        "alerts written for those; docs/fleet.md shows how to relabel instead)",
    )
    # The earlier opt-in for modelName, now the default: accepted, changes nothing.
    p.add_argument("--dcgm-labels", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "-k",
        "--kubernetes",
        action="store_true",
        help="label every per-GPU series with the pod, namespace and container whose processes "
        "hold the GPU, as dcgm-exporter's --kubernetes does (read from the processes' cgroups; "
        "a label per series: see --owner-info for the cheaper form)",
    )
    p.add_argument(
        "--hpc-job-mapping-dir",
        default=os.environ.get(HPC_JOB_MAPPING_ENV) or None,
        metavar="DIR",
        help="dcgm-exporter's HPC job mapping directory (default: $DCGM_HPC_JOB_MAPPING_DIR): "
        "one file per GPU index, a job id per line, written by the scheduler's prolog; its "
        "jobs are the hpc_job label",
    )
    p.add_argument(
        "--owner-info",
        action="store_true",
        help="serve one gputop_diag_gpu_owner_info{gpu,UUID,pod,namespace,container,hpc_job} "
        "series per GPU instead of labelling every series; join it at query time",
    )
    p.add_argument(
        "--all-probes",
        action="store_true",
        help="publish the ranks of every probe file of this user (in $XDG_RUNTIME_DIR/"
        "gputop-diag, else /tmp/gputop-diag-UID), not only those of the GPU processes: for "
        "ranks NVML does not list (CPU ranks, another PID namespace); under --demo, this "
        "machine's probe files",
    )
    p.add_argument(
        "--sanitize",
        action="store_true",
        default=argparse.SUPPRESS,
        help="drop every identifying label (hostname, UUID, pci_bus_id; hpc_job too, unless "
        "-k, --owner-info or --hpc-job-mapping-dir asks for it: then hpc_job, and the pod, "
        "namespace and container labels, carry pseudonyms such as job-7j4k, keyed per run: "
        "they change when the exporter restarts) and name threads and helpers 'other' unless "
        "the runtime named them (pt_data_worker, NCCL, ...; never a name that holds this "
        "machine's or the job's names); Prometheus' instance label then tells nodes apart",
    )


def parse_listen(text: str) -> tuple[str, int]:
    """`ADDR:PORT`, `:PORT` (every interface) or `[IPv6]:PORT` as (address, port)."""
    addr, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen {text!r}: expected ADDR:PORT, :PORT or [IPv6]:PORT")
    addr = addr.strip("[]") or "0.0.0.0"
    return addr, int(port)


def run(args: argparse.Namespace, feed: Sources) -> int:
    from ..prometheus.serve import start_server

    try:
        addr, port = parse_listen(args.listen)
    except ValueError as e:
        say(e)
        return EXIT_USAGE
    problem = time_problem(None, args.interval)
    if problem is not None:
        say(problem)
        return EXIT_USAGE
    monitor = Monitor(feed, interval=args.interval, threaded_slow=True)
    stack = contextlib.ExitStack()  # the stop signals, once the server may be scraped
    try:
        tick = monitor.tick()
        err = no_driver_error(tick.snapshot)
        if err is not None:
            say(f"{err.message}; next: {err.next_step}")
            return EXIT_NO_GPU
        metrics = tick_metrics(args, feed, monitor, tick)
        metrics.update(tick)
        # Before the server answers: a service manager may stop it as soon as it is scraped.
        signals = stack.enter_context(StopSignals())
        try:
            server, _ = start_server(port, addr, metrics)
        except OSError as e:
            say(
                f"cannot listen on {args.listen}: {e.strerror or e}; choose another "
                "port with --listen ADDR:PORT"
            )
            return EXIT_USAGE
        shown = f"[{addr}]" if ":" in addr else addr
        say(
            f"exporter serving http://{shown}:{server.server_port}/metrics "
            f"({len(tick.snapshot.gpus)} GPUs, a sample every {args.interval:g} s)",
            flush=True,
        )
        _loop(monitor, metrics, feed, args.interval).run(signals)
        # No server.shutdown(): it waits out the server loop's half-second poll. The process
        # ends now; its listening socket closes with it and the server thread is a daemon.
        server.socket.close()
        return 0
    finally:
        stack.close()
        monitor.close()


def tick_metrics(args: argparse.Namespace, feed: Sources, monitor: Monitor, tick):
    """The metric families the exporter serves, after the Monitor's first `tick`; under
    --sanitize judged by the one sanitizer, seeded with this machine's names and the tick's."""
    from ..prometheus.export import SlurmJobs, TickMetrics, window_of
    from ..prometheus.owners import HpcJobMapping

    sanitize = getattr(args, "sanitize", False)
    mapping_dir = getattr(args, "hpc_job_mapping_dir", None)
    return TickMetrics(
        kubernetes=getattr(args, "kubernetes", False),
        owner_info=getattr(args, "owner_info", False),
        hpc_jobs=HpcJobMapping(mapping_dir) if mapping_dir else None,
        sanitize=sanitize,
        sanitizer=seeded_sanitizer(feed, [tick.snapshot]) if sanitize else None,
        lint_clean=getattr(args, "lint_clean", False),
        host_label=getattr(args, "hostname_label", HOST_LABELS[0]),
        jobs=SlurmJobs(feed.psutil),
        source=f"simulator:{feed.scenario}" if feed.simulated else "nvml",
        window=window_of(monitor),
        probe_files=_probe_files(feed) if getattr(args, "all_probes", False) else None,
    )


def _probe_files(feed: Sources):
    """`--all-probes`: this machine's probe files, also under --demo (the simulated shell has
    a runtime directory of its own, and a /proc that knows none of this machine's processes)."""
    from ..prometheus.ranks import ProbeFiles

    if feed.simulated:
        return ProbeFiles(dict(os.environ), RealProcFS())
    return ProbeFiles(dict(feed.environ), feed.procfs)


def _loop(monitor: Monitor, metrics, feed: Sources, interval: float) -> Run:
    """The paced loop: a tick every `interval` of wall time until a stop signal. A simulated
    clock that does not follow the wall clock (headless commands build it so) is moved on by
    the same interval, so a demo exporter's scenario plays at the pace Prometheus scrapes it."""
    sim_at = feed.clock.now()

    def step():
        nonlocal sim_at
        if feed.simulated and feed.clock.now() - sim_at < interval / 2:
            feed.clock.sleep(interval)  # instant: it only moves simulated time on
        sim_at = feed.clock.now()
        return monitor.tick()

    paced = Run(step, clock=RealClock(), interval=interval, wait_first=True)
    return paced.subscribe(metrics.update)
