"""The sanitized report: what a person pastes into a public issue (`gputop-diag report`, the
live view's `s` key). docs/report.md describes it.

`make_report` turns a window of snapshots and its diagnosis into one JSON document (schema
`gputop-diag.report/1`) and its Markdown: the tool and driver versions, the GPU model and count
of this machine, the diagnosis, a distributed job's ranks (the straggler, the hang:
`report/ranks.py`), memory and headroom per GPU, utilization over the window, throttle reasons,
Xid events as codes and counts with their diagnostic route, the driver chain, the
device-mapping logic and its conclusion, the GPU processes with their commands cut to what is
safe, and what was redacted. Every value that came from the machine passes through one
`Sanitizer` (`sanitize/sanitizer.py`; the sections are built in `report/sections.py`, rendered in
`report/markdown.py`); every finished section is checked again (`Sanitizer.leaks`) and
left out, with a note, if anything in it still looks like an identifier.

Never in a report: host names, user names, GPU UUIDs, serials, PCI bus ids, minor numbers and
device nodes per index (the per-node layout a public note must not carry), raw kernel-log lines,
paths, job ids, command-line arguments that are not known-safe options.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .. import __version__
from ..collect.identity import read_machine_names
from ..collect.model_config import ModelConfig
from ..diagnose.render import to_json
from ..diagnose.types import Diagnosis
from ..driver.compat import fabric_facts
from ..model import Snapshot
from ..model.codec import iso_time, jsonable
from ..model.health import HealthReport
from ..sanitize.sanitizer import Sanitizer, leak_note
from . import sections
from .health import health as health_section
from .health import seed_health
from .measured import measured_section
from .memory_plan import plan_section
from .ranks import ranks_section

REPORT_SCHEMA = "gputop-diag.report/1"


@dataclass
class ReportSource:
    """Where the snapshots came from, in words safe to publish."""

    kind: str  # "live", "simulator", "recording"
    scenario: str | None = None
    interval_s: float = 1.0


@dataclass
class Report:
    doc: dict[str, Any]  # the JSON document
    markdown: str
    sanitizer: Sanitizer
    left_out: list[dict[str, str]] = field(default_factory=list)


# -- the whole report --------------------------------------------------------------------------

SECTIONS: tuple[str, ...] = (
    "diagnosis",
    "memory",
    "utilization",
    "throttle",
    "xid",
    "driver_chain",
    "health",
    "mapping",
    "processes",
    "scheduler",
    "errors",
)
# Sections only some windows have (their builder answers None otherwise): a distributed job's
# ranks, where the probes saw two or more; what the probes measured in the job, where one ran.
OPTIONAL_SECTIONS: tuple[str, ...] = ("ranks", "measured")


def make_report(
    snaps: Sequence[Snapshot],
    diagnosis: Diagnosis,
    *,
    source: ReportSource,
    environ: dict[str, str] | None = None,
    sources: Any = None,
    sanitizer: Sanitizer | None = None,
    model_config: ModelConfig | None = None,
    health: HealthReport | None = None,
) -> Report:
    """The sanitized report of `snaps` (oldest first) and the diagnosis of their end.

    `environ` is this shell's environment (the mapping section reads its CUDA and Slurm
    variables); `sources` (live runs) lets the sanitizer seed what the machine knows beyond
    the snapshots: its names, the job's working directories, `pwd`; and lets the memory
    planner find the config.json the job's command line names. `model_config`
    (`--model-config`) puts the planner's prediction beside what the job holds in the memory
    section. `health`: the health checks' report (`gputop-diag health`), else the one the last
    snapshot carries: its findings that are not ok, and the fabric manager's layer of the
    driver chain."""
    from .markdown import render_markdown, render_section

    if not snaps:
        raise ValueError("a report needs at least one snapshot")
    s = sanitizer if sanitizer is not None else Sanitizer()
    environ = dict(environ or {})
    last = snaps[-1]
    if health is None:
        health = getattr(last, "health", None)  # recorded with the snapshot (the Monitor's)
    _seed(s, snaps, diagnosis, environ, sources)
    seed_health(s, health)
    fabric = fabric_facts(health.findings) if health is not None else None

    doc: dict[str, Any] = {
        "schema": REPORT_SCHEMA,
        "tool": {"name": "gputop-diag", "version": __version__},
        "sanitized": True,
        "time": iso_time(last.timestamp),
        "window": {
            "seconds": round(last.timestamp - snaps[0].timestamp, 1),
            "samples": len(snaps),
            "interval_s": source.interval_s,
        },
        "source": {"kind": source.kind, "scenario": source.scenario},
        "machine": sections.machine(last, s),
    }
    builders: dict[str, Callable[[], dict[str, Any] | None]] = {
        "diagnosis": lambda: s.document(to_json(diagnosis)),
        "ranks": lambda: ranks_section(snaps, s),  # None: not a job of two ranks or more
        "measured": lambda: measured_section(snaps, s),  # None: no probe in the window
        "memory": lambda: _memory(snaps, s, model_config, sources),
        "utilization": lambda: sections.utilization(snaps),
        "throttle": lambda: sections.throttle(snaps),
        "xid": lambda: sections.xid(snaps),
        "driver_chain": lambda: sections.driver_chain(last, diagnosis, s, fabric),
        "health": lambda: health_section(health, s),
        "mapping": lambda: sections.mapping(last, environ, s),
        "processes": lambda: sections.processes(last, s),
        "scheduler": lambda: sections.scheduler(last, s),
        "errors": lambda: sections.errors(last, s),
    }
    left_out: list[dict[str, str]] = []
    for name in (*SECTIONS, *OPTIONAL_SECTIONS):
        try:
            section = builders[name]()
            if section is None:
                continue
            found = s.leaks(
                json.dumps(section, ensure_ascii=False) + "\n" + render_section(name, section)
            )
        except Exception as e:  # noqa: BLE001 - a section we cannot build is left out, said so
            left_out.append({"section": name, "reason": f"could not be built ({type(e).__name__})"})
            continue
        if found:
            left_out.append(
                {
                    "section": name,
                    "reason": f"could not be sanitized with confidence ({leak_note(found)} left)",
                }
            )
            continue
        doc[name] = section
    head_found = s.leaks(json.dumps(doc["machine"], ensure_ascii=False))
    if head_found:
        doc["machine"] = {"gpu_count": len(last.gpus)}
        left_out.append(
            {
                "section": "machine",
                "reason": f"could not be sanitized with confidence ({leak_note(head_found)} left)",
            }
        )
    doc["redactions"] = {"classes": s.summary(), "left_out": left_out}
    markdown = render_markdown(doc)
    final = s.leaks(markdown) + s.leaks(json.dumps(doc, ensure_ascii=False))
    if final:  # a last line of defence: nothing but the summary goes out
        kept = {k: doc[k] for k in ("schema", "tool", "sanitized", "time", "window", "source")}
        left_out = [
            {
                "section": "all",
                "reason": f"could not be sanitized with confidence ({leak_note(final)} left)",
            }
        ]
        doc = {**kept, "redactions": {"classes": s.summary(), "left_out": left_out}}
        markdown = render_markdown(doc)
    return Report(doc=doc, markdown=markdown, sanitizer=s, left_out=left_out)


def _memory(
    snaps: Sequence[Snapshot], s: Sanitizer, model_config: ModelConfig | None, sources: Any
) -> dict[str, Any]:
    """Memory and headroom per GPU, and the planner's prediction where a model's config is
    known."""
    out = sections.memory(snaps, s)
    try:
        plan = plan_section(snaps[-1], model_config, sources)
    except Exception as e:  # noqa: BLE001 - the plan is an extra: the memory table stays
        plan = {"available": False, "why": f"could not be made ({type(e).__name__})"}
        plan["config"] = "given (--model-config)" if model_config else "named by the job"
    if plan is not None:
        out["plan"] = plan
    return out


def _seed(
    s: Sanitizer,
    snaps: Sequence[Snapshot],
    diagnosis: Diagnosis,
    environ: dict[str, str],
    sources: Any,
) -> None:
    """Every seed before the first value is written: names by field from every snapshot of
    the window, then what their free text, the diagnosis, this shell and the machine reveal."""
    # The parts of a snapshot that name things, each distinct one once (they seldom change;
    # the figures around them change every tick).
    parts: dict[str, dict[Any, None]] = {
        k: {}
        for k in (
            "system",
            "gpus",
            "mig_instances",
            "processes",
            "xid_events",
            "errors",
            "scheduler_jobs",
            "kernel_ooms",
            "probes",
        )
    }
    parts["probes"].update(dict.fromkeys(snaps[-1].probes or ()))  # the ranks' nodes, stacks
    for snap in snaps:
        parts["system"][snap.system] = None
        for g in snap.gpus:
            parts["gpus"][g.static] = None
            parts["mig_instances"].update(dict.fromkeys(g.mig_instances))
        for p in snap.processes:
            parts["processes"][dataclasses.replace(p, cpu_pct=None, rss_bytes=None)] = None
        for key in ("xid_events", "errors", "scheduler_jobs", "kernel_ooms"):
            parts[key].update(dict.fromkeys(getattr(snap, key) or ()))
    doc = {k: [jsonable(x) for x in v] for k, v in parts.items()}
    doc["gpus"] = [{"static": g} for g in doc["gpus"]]
    s.seed_environ(environ)
    if sources is not None:
        s.seed_machine(
            read_machine_names(sources, sorted({p.pid for p in snaps[-1].gpu_processes}))
        )
    s.learn_document(doc)
    s.learn_document(to_json(diagnosis))


def default_stem(now: datetime | None = None) -> str:
    """`gputop-diag-report-YYYYmmdd-HHMMSS`, by the wall clock (not a recording's time)."""
    return "gputop-diag-report-" + (now or datetime.now()).strftime("%Y%m%d-%H%M%S")


def save_report(report: Report, directory: str, stem: str | None = None) -> tuple[str, str]:
    """Write the report as `STEM.md` and `STEM.json` into `directory`, never over an existing
    file (two saves in one second keep both); the two paths. OSError when the directory does
    not take them (nothing half-written is left)."""
    stem = stem or default_stem()
    texts = (report.markdown, json.dumps(report.doc, indent=2, ensure_ascii=False) + "\n")
    for n in range(1, 1000):
        base = os.path.join(directory, stem if n == 1 else f"{stem}-{n}")
        paths = (base + ".md", base + ".json")
        if any(os.path.lexists(p) for p in paths):
            continue
        written: list[str] = []
        try:
            for path, text in zip(paths, texts, strict=True):
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                written.append(path)
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    f.write(text)
        except FileExistsError:  # taken meanwhile: the next name
            for path in written:
                os.unlink(path)
            continue
        except OSError:
            for path in written:
                try:
                    os.unlink(path)
                except OSError:
                    pass
            raise
        return paths
    raise FileExistsError(f"{directory}: no free name for {stem}")
