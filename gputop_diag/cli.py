"""The `gputop-diag` entry point. Headless subcommands never import Textual.

Start-up: building the parser imports no command. The subcommands are named from the static
`COMMANDS` table; a command's own options are added (its module imported) only when argparse
reaches that command, so `gputop-diag --help` and `--version` import nothing of ours beyond this
module and `commands.options`, and `gputop-diag snapshot ...` imports the snapshot command alone.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import errno
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from . import __version__
from .commands.options import add_access_arguments

# Not imported here, for start-up time: `model` (its package builds every snapshot dataclass),
# `recording`, any command module. `main` imports what the command line asks for once it has
# parsed.

# subcommand -> (module under gputop_diag.commands, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "snapshot": ("snapshot", "one sample of everything"),
    "diagnose": ("diagnose", "sample for N seconds and name the current bottleneck"),
    "record": ("record", "record samples to a file (-o FILE) for a later --replay FILE"),
    "xid": ("xid", "read the kernel log, triage Xid/SXid events and driver errors"),
    "mapping": (
        "mapping",
        "which physical GPU each CUDA device is: NVML index, CUDA ordinal, /dev/nvidiaN, bus id, "
        "UUID, Slurm's GPUs, the findings",
    ),
    "driver": (
        "driver",
        "the driver -> CUDA runtime -> framework chain, layer by layer, with the verdict "
        "(--probe-python PATH)",
    ),
    "health": (
        "health",
        "node and job health checks (environment, D state, PCIe, ACS, InfiniBand, fabric "
        "manager), each tied to the bottleneck it causes",
    ),
    "report": ("report", "write a sanitized report, safe to paste into a public issue"),
    "compare": ("compare", "two runs side by side: what changed beyond the runs' own variation"),
    "memory": (
        "memory",
        "where a model's memory goes on one GPU, whether it fits, and what each lever saves "
        "(--config config.json, offline)",
    ),
    "exporter": ("exporter", "serve Prometheus metrics in dcgm-exporter's names (--listen)"),
    "fleet": ("fleet", "diagnose many nodes from Prometheus (--prometheus URL)"),
    "watch": ("watch", "watch a job: --pid PID, --slurm JOBID, or -- CMD ARGS..."),
    "demo": ("demo", "list the simulator scenarios (--list)"),
}
DEFAULT_DEMO = "tour"


def _add_common(p: argparse.ArgumentParser, top: bool) -> None:
    default = None if top else argparse.SUPPRESS
    p.add_argument(
        "--demo",
        metavar="SCENARIO",
        nargs="?",
        const=DEFAULT_DEMO,
        default=default,
        help="replace every source with the simulator (default scenario: tour; "
        "`gputop-diag demo --list` lists them)",
    )
    p.add_argument(
        "--replay",
        metavar="FILE",
        default=default,
        help="read the snapshots of a recording (`gputop-diag record`) instead of the machine: "
        "the live view plays it, snapshot shows its last, diagnose judges it",
    )


def build_parser(full: bool = False) -> argparse.ArgumentParser:
    """The whole command line. A command's own options are added when it is parsed; `full`
    adds every command's now (importing every command module)."""
    p = argparse.ArgumentParser(
        prog="gputop-diag",
        description="What limits this GPU workload right now: live memory, utilization, "
        "device mapping and Xid events, with the current bottleneck, its evidence and the "
        "next checks. Run with no command for the live view.",
        epilog="Exit statuses: 0 success; 1 failure (unexpected, or an output that failed "
        "part-way); 2 usage error (an option, a value, a file to read or write: said before "
        "any work); 3 no usable NVIDIA driver or GPU; 4 no answer from Prometheus (fleet); "
        "5 partial answer (printed, but part of what was asked is missing: said on stderr); "
        "128+N stopped by signal N; 141 the output closed; watch -- CMD: the command's own. "
        "Each command's are in the README (Exit statuses).",
    )
    p.add_argument("--version", action="version", version=f"gputop-diag {__version__}")
    p.add_argument(
        "--debug",
        action="store_true",
        help="show the traceback of an unexpected failure (also GPUTOP_DIAG_DEBUG=1)",
    )
    _add_common(p, top=True)
    p.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds between samples: the live view, diagnose, record (default 1, at least 0.1)",
    )
    p.add_argument(
        "--sanitize",
        action="store_true",
        help="pseudonyms instead of host and user names, GPU UUIDs, serials, PCI bus ids, paths "
        "and command-line arguments, for every command (also accepted after it); record: write "
        "them; report: always",
    )
    p.add_argument(
        "--low-bandwidth",
        action="store_true",
        help="for slow links: interval of at least 2 s, plain glyphs, no clock",
    )
    p.add_argument(
        "--prometheus",
        metavar="URL",
        default=None,
        help="the live view of many nodes from Prometheus (dcgm-exporter's series or "
        "`gputop-diag exporter`'s): the Fleet pane, Enter opens a node; TLS and tokens as for "
        "`fleet` (--bearer-token-file, --ca-file, ...)",
    )
    add_access_arguments(p)
    _add_live_view(p)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", action=_LazyCommands)
    for name, (_, helptext) in COMMANDS.items():
        sp = sub.add_parser(name, help=helptext, description=helptext)
        _add_common(sp, top=False)
        if name in ("report", "watch"):  # after the command as well as before it
            _add_model_config(sp, top=False)
    if full:
        for name in COMMANDS:
            sub.add_command_arguments(name)
    return p


class _LazyCommands(argparse._SubParsersAction):
    """The subcommands, each with the common options only until argparse reaches it: then its
    module is imported and its `add_arguments` adds the rest, before its arguments (or its
    `--help`) are parsed."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._complete: set[str] = set()

    def add_command_arguments(self, name: str) -> None:
        if name in self._complete or name not in COMMANDS:
            return
        module = importlib.import_module(f".commands.{COMMANDS[name][0]}", __package__)
        module.add_arguments(self.choices[name])
        self._complete.add(name)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        self.add_command_arguments(values[0])
        super().__call__(parser, namespace, values, option_string)


def _numbers(text: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"numbers separated by commas, not {text!r}") from None


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


MODEL_CONFIG_HELP = (
    "a model's config.json (Hugging Face; a local file, never downloaded): the memory planner's "
    "prediction beside what the job holds, in the Memory pane and the report; without it, a "
    "config.json the job's command line names is used"
)


def _add_model_config(p, top: bool) -> None:
    p.add_argument(
        "--model-config",
        metavar="FILE",
        default=None if top else argparse.SUPPRESS,
        help=MODEL_CONFIG_HELP,
    )


def _add_live_view(p: argparse.ArgumentParser) -> None:
    """The live view's own options (nvitop's filters, where `s` and `S` write, the model's
    config for the memory planner)."""
    g = p.add_argument_group("live view")
    _add_model_config(g, top=True)
    g.add_argument(
        "--save-dir",
        metavar="DIR",
        default=None,
        help="where s (the sanitized report) and S (the snapshot) write (it must exist); "
        "default: $XDG_STATE_HOME/gputop-diag, else ~/.local/state/gputop-diag (made when "
        "missing), else $TMPDIR or /tmp",
    )
    g.add_argument(
        "--only",
        metavar="GPU[,GPU]",
        dest="live_gpus",
        type=_numbers,
        action="append",
        default=[],
        help="show only these GPUs and their processes (the f and g keys change it)",
    )
    g.add_argument(
        "--user",
        metavar="NAME[,NAME]",
        dest="live_users",
        type=_names,
        action="append",
        default=[],
        help="show only the GPU processes of these users",
    )
    g.add_argument(
        "--pid",
        metavar="PID[,PID]",
        dest="live_pids",
        type=_numbers,
        action="append",
        default=[],
        help="show only these GPU processes",
    )


def _fix_bare_demo(argv: list[str]) -> list[str]:
    """`--demo` followed by a subcommand or an option means the default scenario."""
    out = list(argv)
    for i, a in enumerate(out):
        if a == "--demo" and (
            i + 1 == len(out) or out[i + 1] in COMMANDS or out[i + 1].startswith("-")
        ):
            out.insert(i + 1, DEFAULT_DEMO)
            break
    return out


def make_sources(args: argparse.Namespace, realtime: bool):
    from .sources import Sources

    if args.demo:
        from . import sim

        # the shell's CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER and Slurm variables reach the
        # simulated shell, so their forms can be tried on the simulator
        return sim.build(args.demo, realtime=realtime, host_env=os.environ)
    return Sources.real()


def closed_output() -> int:
    """Standard output's reader is gone: nothing more is printed, and what Python would flush
    at exit goes nowhere (the recipe of the Python docs, "Note on SIGPIPE"); 141, as a shell
    reports `yes | head` (docs/architecture.md, "Stopping")."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    return 128 + getattr(signal, "SIGPIPE", 13)


# ASCII spellings of what the output uses beyond ASCII, for a terminal or pipe that takes only
# ASCII (PYTHONIOENCODING=ascii, a Latin-1 locale); never a double quote, so JSON stays JSON.
_ASCII_SPELLINGS = {
    "\u2192": "->",
    "\u2190": "<-",
    "\u2014": "--",
    "\u2013": "-",
    "\u2212": "-",
    "\u2026": "...",
    "\u00b7": ".",
    "\u00d7": "x",
    "\u2265": ">=",
    "\u2264": "<=",
    "\u2248": "~",
    "\u00b1": "+/-",
    "\u00b0": " deg",
    "\u00b5": "u",
    "\u00b2": "^2",
    "\u2018": "'",
    "\u2019": "'",
    "\u201c": "'",
    "\u201d": "'",
    "\u2022": "*",
    "\u03a8": "Psi",
    "\u03a3": "Sum",
    "\u1d40": "^T",
}
ASCII_ERRORS = "gputop-diag-ascii"


def _escaped(ch: str) -> str:
    """`ch` as a JSON string escapes it (`\\u00f6`; two for a character beyond the BMP): a
    path or a name stays that one path, and a JSON document stays JSON with the same data
    (https://www.rfc-editor.org/rfc/rfc8259#section-7)."""
    code = ord(ch)
    if code > 0xFFFF:
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"
    return f"\\u{code:04x}"


def _ascii_spelling(err: UnicodeError) -> tuple[str, int]:
    """A codec error handler (`codecs.register_error`): each character the output's encoding
    cannot take. The tool's own characters (an arrow, a dash, a bar's block) are spelled in
    ASCII; any other is data (a file name, a process's name) and is escaped, never replaced by
    a look-alike: `n\\u00f6.json`, not `no.json`, which names another file."""
    if not isinstance(err, UnicodeEncodeError):
        raise err
    out = []
    for ch in err.object[err.start : err.end]:
        spelled = _ASCII_SPELLINGS.get(ch)
        if spelled is None:
            spelled = "#" if "\u2580" <= ch <= "\u259f" else _escaped(ch)
        out.append(spelled)
    return "".join(out), err.end


codecs.register_error(ASCII_ERRORS, _ascii_spelling)


def ascii_safe_streams() -> None:
    """Standard output and error that cannot encode what we print (PYTHONIOENCODING=ascii, a
    Latin-1 locale) spell it in ASCII instead of failing: the one place every command's output
    passes. Files written (reports, recordings) are UTF-8 whatever the locale."""
    for stream in (sys.stdout, sys.stderr):
        encoding = getattr(stream, "encoding", None)
        if encoding is None or not hasattr(stream, "reconfigure"):
            continue
        try:
            "\u2192\u2014\u2026\u00b7".encode(encoding)
        except UnicodeEncodeError:
            with contextlib.suppress(ValueError, OSError):
                stream.reconfigure(errors=ASCII_ERRORS)
        except LookupError:
            continue


def main(argv: Sequence[str] | None = None) -> int:
    ascii_safe_streams()
    argv = _fix_bare_demo(list(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(argv)

    if args.demo is not None and not args.demo.strip():
        parser.error(
            "--demo takes a scenario's name (`gputop-diag demo --list`), not an empty one; "
            "--demo alone runs tour"
        )

    head = None
    try:  # a Ctrl-C or a failure in the head start is answered as anywhere else in the run
        if args.command == "snapshot":  # its module is loaded: it gave the parser its options
            from .commands.snapshot import head_start

            head = head_start(args)
        if args.command == "demo":
            if args.replay is not None:
                parser.error(
                    "demo lists the simulator's scenarios: it reads no recording (--replay)"
                )
            from .commands import demo

            return demo.run(args)
        from .monitor.run import interval_problem

        problem = interval_problem(args.interval)
        if problem is not None:  # one line, as every command says it
            print(f"gputop-diag: {problem}", file=sys.stderr)
            return _exit_usage()
        if args.replay is not None and args.demo:
            parser.error(
                "--replay and --demo cannot be used together: a recording replaces "
                "the machine, and so does the simulator"
            )
        if args.prometheus is not None and args.command is None:
            if args.replay is not None or args.demo:
                parser.error(
                    "--prometheus reads many nodes: it cannot be used with --replay or --demo"
                )
            from .commands.fleet import run_live

            return run_live(args)
        module = None
        if args.command is not None:
            module = importlib.import_module(f".commands.{COMMANDS[args.command][0]}", __package__)
            if args.replay is not None and not getattr(module, "REPLAY", False):
                parser.error(f"{args.command} does not read recordings (--replay)")
        try:
            if args.replay is not None:
                from .recording.store import Recording

                shown = None
                if args.sanitize:  # its messages name the file by its pseudonym
                    from .commands.common import shown_path

                    shown = shown_path(args.replay)
                feed = Recording.open(args.replay, shown=shown)
            else:
                feed = make_sources(args, realtime=args.command is None)
        except (ValueError, _recording_error()) as e:  # an unknown scenario, a bad recording
            print(f"gputop-diag: {e}", file=sys.stderr)
            return _exit_usage()
        if module is None and not sys.stdout.isatty():
            from .commands.snapshot import print_one_snapshot

            return _flushed(print_one_snapshot(feed, args.sanitize))
        if module is None:
            from gputop_diag.tui import run_app

            interval = max(args.interval, 2.0) if args.low_bandwidth else args.interval
            replaying = args.replay is not None  # then `feed` is the Recording
            return run_app(
                None if replaying else feed,
                interval=interval,
                sanitize=args.sanitize,
                low_bandwidth=args.low_bandwidth,
                replay=feed if replaying else None,
                save_dir=args.save_dir,
                only_gpus=[g for part in args.live_gpus for g in part],
                users=[u for part in args.live_users for u in part],
                pids=[n for part in args.live_pids for n in part],
                model_config=args.model_config,
            )
        return _flushed(module.run(args, feed))
    except _recording_error() as e:  # a recording damaged past its header
        print(f"gputop-diag: {e}", file=sys.stderr)
        return _exit_usage()
    except KeyboardInterrupt:
        return 130
    except _stopped() as e:  # a stop signal in a one-shot command's warm-up
        return e.status
    except BrokenPipeError:  # `gputop-diag snapshot | head`: the reader is gone
        return closed_output()
    except OSError as e:
        if e.errno not in _WRITE_ERRORS:
            return _unexpected(e, args.debug)
        # A full disk or a broken terminal is the machine's state, not a bug to report.
        with contextlib.suppress(OSError):
            print(f"gputop-diag: cannot write the output: {e.strerror}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - never a raw traceback without a message
        return _unexpected(e, args.debug)
    finally:
        if head is not None:  # what no collector took over (a usage error came first): freed
            head.close()


def _exit_usage() -> int:
    """`EXIT_USAGE`, imported when a usage error needs it: `model.exits` loads the model package
    (every snapshot dataclass), which `snapshot` loads only after its first NVML samples."""
    from .model.exits import EXIT_USAGE

    return EXIT_USAGE


def _flushed(code: int) -> int:
    """`code`, once what was printed has reached standard output: a reader that is gone is
    found here, inside `main`, not by the interpreter's last flush at exit."""
    sys.stdout.flush()
    return code


def _stopped() -> type[BaseException]:
    """`monitor.run.Stopped` once the paced loop is loaded (only it raises it)."""
    run = sys.modules.get(f"{__package__}.monitor.run")
    return _NotRaised if run is None else run.Stopped


class _NotRaised(Exception):
    """What `_recording_error()` names while no recording code is loaded: nothing raises it."""


def _recording_error() -> type[Exception]:
    """`RecordingError`, once `recording.store` is loaded (only its code raises it); evaluated
    when an exception reaches the `except`, so a run that reads no recording never imports
    it (it brings the sanitizer along)."""
    store = sys.modules.get(f"{__package__}.recording.store")
    return _NotRaised if store is None else store.RecordingError


# What writing the output can meet on a sane machine: a full disk (/dev/full), a quota, a
# read-only file system, a terminal gone.
_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})


def _unexpected(e: BaseException, debug: bool) -> int:
    print(f"gputop-diag: unexpected failure: {type(e).__name__}: {e}", file=sys.stderr)
    print(
        "gputop-diag: please report this with the command you ran (--debug shows the traceback)",
        file=sys.stderr,
    )
    if debug or os.environ.get("GPUTOP_DIAG_DEBUG"):
        raise e
    return 1


if __name__ == "__main__":
    sys.exit(main())
