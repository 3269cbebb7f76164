"""The sanitized report (`report/build.py`) as Markdown that reads well in a GitHub issue.

It renders only what the JSON document holds (already sanitized), so the two formats say the
same thing. Table cells are escaped (`|`, newlines) and text that came from the machine is
shown as code where Markdown could read it as markup.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..diagnose.lead import Lead, lead_of
from ..diagnose.types import Alert, Diagnosis, Evidence
from ..model import formats
from .measured import measured_markdown
from .ranks import ranks_markdown
from .sections import gpu_list

SECTION_TITLES = {
    "diagnosis": "Diagnosis",
    "ranks": "Ranks",
    "measured": "Measured in the job",
    "memory": "Memory and headroom",
    "utilization": "Utilization over the window",
    "throttle": "Throttle reasons",
    "xid": "Xid events",
    "driver_chain": "Driver chain",
    "health": "Node and job health",
    "mapping": "Device mapping",
    "processes": "GPU processes",
    "scheduler": "Scheduler",
    "errors": "What could not be read",
}


def _cell(v: Any) -> str:
    if v is None:
        return "n/a"
    text = str(v).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _code(v: Any, in_table: bool = False) -> str:
    text = str(v).replace("\n", " ")
    if in_table:  # GitHub ends a cell at a pipe even inside a code span
        text = text.replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}" if text else ""


def _md(v: Any) -> str:
    """Text from the machine in running Markdown: `<partition>` is not an HTML tag."""
    return str(v).replace("<", "&lt;").replace("\n", " ")


def _table(header: list[str], rows: list[list[Any]], align: str | None = None) -> list[str]:
    """A GitHub table; `align` one letter per column, l or r."""
    marks = [("---:" if a == "r" else "---") for a in (align or "l" * len(header))]
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join(marks) + " |"]
    out += [
        "| " + " | ".join(c if isinstance(c, _Raw) else _cell(c) for c in r) + " |" for r in rows
    ]
    return out


class _Raw(str):
    """A cell already in Markdown (code spans)."""


_pct = formats.pct


def _gib(v: Any) -> str:
    return "n/a" if v is None else f"{v:.1f} GiB"


def _gpus(indices: list[int]) -> str:
    return gpu_list(indices) if indices else "?"


_duration = formats.span


# -- sections ----------------------------------------------------------------------------------


def _lead(d: dict[str, Any]) -> Lead | None:
    """What heads the diagnosis, as `diagnose` says it (`diagnose.lead`), from the document:
    a hardware fault, a broken driver chain, throttling that explains the class, memory growing
    towards full."""
    if not d:
        return None

    def alert(a: dict[str, Any]) -> Alert:
        return Alert(a.get("kind") or "", a.get("severity") or "", a.get("text") or "")

    return lead_of(
        Diagnosis(
            d.get("primary") or "",
            d.get("confidence") or 0.0,
            evidence=tuple(
                Evidence(e.get("metric") or "", e.get("value"), None, e.get("text") or "")
                for e in d.get("evidence") or ()
            ),
            alerts=tuple(alert(a) for a in d.get("alerts") or ()),
            faults=tuple(alert(a) for a in d.get("faults") or ()),
        )
    )


def _diagnosis(d: dict[str, Any]) -> list[str]:
    out = []
    for f in d.get("faults") or ():
        out.append(f"> **Fault ({f['severity']}):** {_md(f['text'])}")
    if d.get("faults"):
        out += ["> A hardware fault comes first: the workload class below is secondary to it.", ""]
    lead = _lead(d)
    if lead is not None and lead.label != "FAULT":
        said = lead.alert.text
        if lead.next_step and "next: " in said:  # its next step on a line of its own, once
            said = said.split("next: ", 1)[0].rstrip("; ,")
        out.append(f"> **{lead.label.capitalize()} ({lead.alert.severity}):** {_md(said)}")
        if lead.next_step:
            out.append(f"> Next: {_md(lead.next_step)}")
        out += ["> This comes first: the workload class below is read in its light.", ""]
    primary = _headline(d)
    conf = d.get("confidence")
    conf_text = (
        f"confidence {conf:.0%}"
        if conf is not None
        else "no confidence figure: the evidence that decides is missing"
    )
    scope = d.get("scope") or {}
    where = ""
    if scope.get("gpus"):
        where = f" on GPU {_gpus(scope['gpus'])}"
    if scope.get("job"):
        job = str(scope["job"])
        where += f" ({job if job.startswith('pid ') else 'job ' + job})"
    out.append(
        f"**{primary}**, {conf_text}{where}, judged over the last {d.get('window_s', 0):.0f} s."
    )
    if d.get("secondary"):
        out += ["", f"Also near its limit: **{d['secondary'].replace('_', ' ')}**"]
        out += [f"- {_md(e['text'])}" for e in d.get("secondary_evidence") or ()]
    if d.get("evidence"):
        out += ["", "Evidence:"] + [f"- {_md(e['text'])}" for e in d["evidence"]]
    if d.get("evidence_available") or d.get("evidence_missing"):
        out.append("")
        if d.get("evidence_available"):
            out.append("Evidence read: " + "; ".join(d["evidence_available"]) + ".")
        if d.get("evidence_missing"):
            out.append(
                "Evidence missing (lower confidence): " + "; ".join(d["evidence_missing"]) + "."
            )
    if d.get("ruled_out"):
        out += ["", "Why not the others:", ""]
        out += _table(
            ["class", "why not"],
            [[r["class"].replace("_", " "), r["text"]] for r in d["ruled_out"]],
        )
    if d.get("checks"):
        out += ["", "Next checks:"] + [f"{i}. {_md(c)}" for i, c in enumerate(d["checks"], 1)]
    if d.get("alerts"):
        out += ["", "Alerts:"] + [f"- **{a['severity']}**: {_md(a['text'])}" for a in d["alerts"]]
    return out


def _headline(d: dict[str, Any]) -> str:
    """The class with its finding, as `diagnose` says it: "SYNCHRONIZATION (launch-bound)"."""
    finding = d.get("finding")
    tail = f" ({finding.replace('_', '-')})" if finding else ""
    return (d.get("primary") or "?").replace("_", " ").upper() + tail


def _memory(m: dict[str, Any]) -> list[str]:
    rows = []
    for g in m.get("gpus") or ():
        if g.get("lost"):
            rows.append([g["gpu"], "lost", "", "", "", "", "", "", ""])
            continue
        trend = g.get("trend_mib_per_min")
        trend_text = "steady" if trend is None or abs(trend) < 1 else f"{trend:+.0f} MiB/min"
        rows.append(
            [
                g["gpu"],
                f"{_gib(g['used_gib'])} of {_gib(g['total_gib'])}",
                _pct(g.get("used_pct")),
                _gib(g.get("reserved_gib")),
                f"{_gib(g.get('processes_gib'))} ({g.get('processes', 0)})",
                _gib(g.get("unattributed_gib")),
                _gib(g.get("headroom_gib")),
                _gib(g.get("lowest_headroom_gib")),
                trend_text,
            ]
        )
        for mig in g.get("mig") or ():
            rows.append(
                [
                    f"MIG {mig['instance']}",
                    f"{_gib(mig['used_gib'])} of {_gib(mig['total_gib'])}",
                    "",
                    "",
                    mig.get("profile") or "",
                    "",
                    "",
                    "",
                    "",
                ]
            )
    out = _table(
        [
            "GPU",
            "used",
            "used %",
            "driver reserve",
            "processes (count)",
            "not attributed",
            "headroom",
            "lowest headroom",
            "trend",
        ],
        rows,
        "rlrrrrrrl",
    )
    holders = m.get("by_user") or ()
    if holders:
        parts = [
            f"{h['user'] or 'a user it may not read'}: {_gib(h['gib'])} on GPU {_gpus(h['gpus'])}"
            for h in holders
        ]
        out += ["", "Held by: " + "; ".join(parts) + "."]
    out += [
        "",
        "Used memory includes the driver's reserve; *not attributed* is what no listed process "
        "holds (contexts of processes NVML does not list, or per-process figures it does not "
        "give, as under MIG). *Lowest headroom* is over the whole window.",
    ]
    if m.get("plan"):
        out += _plan(m["plan"])
    return out


def _plan(p: dict[str, Any]) -> list[str]:
    """The memory planner's prediction beside what the job holds."""
    out = ["", f"**Memory plan** (gputop-diag memory; the model's config {p['config']}):"]
    if not p.get("available"):
        return [*out, "", f"Not made: {p.get('why')}."]
    m, w = p["model"], p["workload"]
    mode = "training" if w["mode"] == "train" else "inference"
    out += [
        "",
        f"{m['family']}, {m['parameters'] / 1e9:.2f} B parameters ({m['layers']} layers, hidden "
        f"{m['hidden']}, {m['heads']} heads, {m['kv_heads']} KV heads"
        + (f", {m['experts']} experts" if m["experts"] else "")
        + f"); {mode}, {w['dtype']}, batch {w['batch']} × {w['seq']} tokens, on GPU {p['gpu']}: "
        f"{_gib(p['total_gib'])} predicted of {_gib(p['gpu_gib'])}"
        + ("" if p["fits"] is None else (", fits" if p["fits"] else ", does not fit"))
        + ".",
    ]
    if p["assumed"]:
        out += ["", "Assumed (not on the command line): " + ", ".join(p["assumed"]) + "."]
    out += [""] + _table(
        ["figure", "predicted", "measured", "difference", "measured by"],
        [
            [
                r["figure"],
                _gib(r["predicted_gib"]),
                _gib(r["measured_gib"]),
                "n/a" if r["difference_gib"] is None else f"{r['difference_gib']:+.1f} GiB",
                r["measured_by"],
            ]
            for r in p["compared"]
        ],
        "lrrrl",
    )
    out += [""] + _table(
        ["term", "predicted", "share"],
        [[t["term"], _gib(t["gib"]), f"{t['share'] * 100:.0f} %"] for t in p["terms"]],
        "lrr",
    )
    if p["what_ifs"]:
        out += [""] + _table(
            ["what if", "change", "saves", "fits"],
            [
                [r["lever"], r["change"], _gib(r["saves_gib"]), "yes" if r["fits"] else "no"]
                for r in p["what_ifs"]
            ],
            "llrl",
        )
    return out


def _utilization(u: dict[str, Any]) -> list[str]:
    rows = [
        [
            g["gpu"],
            _pct(g["busy_median_pct"]),
            _pct(g["busy_p95_pct"]),
            _pct(g["busy_min_pct"]),
            _Raw(_code(g["busy_sparkline"], True)) if g.get("busy_sparkline") else "n/a",
            _pct(g["memory_controller_median_pct"]),
            _pct(g["sm_active_median_pct"]),
            _pct(g["power_median_pct_of_limit"]),
            _pct(g["sm_clock_median_pct_of_max"]),
        ]
        for g in u.get("gpus") or ()
    ]
    return [
        f"Busy time is `utilization.gpu`: the share of each sample period in which one or more "
        f"kernels ran (a symptom, not a diagnosis); the line runs oldest to newest on a fixed "
        f"0–100 % scale over {u.get('samples', 0)} samples.",
        "",
        *_table(
            [
                "GPU",
                "busy median",
                "p95",
                "min",
                "busy time",
                "memory controller",
                "SM active (GPM)",
                "power / limit",
                "SM clock / max",
            ],
            rows,
            "rrrrlrrrr",
        ),
    ]


def _throttle(t: dict[str, Any]) -> list[str]:
    groups = t.get("groups") or ()
    if not any(g["reasons"] for g in groups):
        return [
            "No clock-event reason (power cap, thermal or hardware slowdown) in the window, "
            "GPU idle aside."
        ]
    rows = [
        [
            _gpus(g["gpus"]),
            ", ".join(f"{r['reason']} {r['share_pct']} %" for r in g["reasons"]) or "none",
        ]
        for g in groups
    ]
    return [
        "Share of samples each reason was set (GPU idle left out):",
        "",
        *_table(["GPU", "reasons"], rows),
    ]


def _xid(x: dict[str, Any]) -> list[str]:
    codes = x.get("codes") or ()
    note = (
        "Codes, classes and counts only: raw kernel-log lines are never part of a report. "
        "An Xid is a classification step, not a root cause."
    )
    if not codes:
        return ["No Xid event in the window.", "", note]
    rows = [
        [
            f"Xid {c['xid']}",
            c["name"],
            c.get("cause") or "unknown",
            c["severity"],
            c["count"],
            _gpus(c["gpus"]),
            f"{c['first_s']:.0f}–{c['last_s']:.0f} s",
        ]
        for c in codes
    ]
    out = [
        note,
        "",
        *_table(
            ["code", "name", "likely cause", "severity", "count", "GPU", "when (window)"],
            rows,
            "lllrrll",
        ),
        "",
        "The diagnostic route, code by code:",
    ]
    out += [
        f"- **Xid {c['xid']}** ({_md(c['meaning'])}): {_md(c['question'])} Then: {_md(c['action'])}"
        for c in codes
    ]
    return out


def _driver_chain(d: dict[str, Any]) -> list[str]:
    chain = " → ".join(
        f"{layer['layer']} {layer['version'] or 'n/a'}" for layer in d.get("layers") or ()
    )
    tail = "" if d.get("problems") is not None else " → the CUDA runtime the framework bundles"
    out = [
        f"{chain}{tail} → the application's kernels.",
        "",
        f"Verdict: {_md(d['verdict'])}.",
        f"Next: {_md(d['next_step'])}.",
    ]
    problems = d.get("problems") or []
    if len(problems) > 1 or any(p.get("error_text") for p in problems):
        out += ["", "Problems, host layer first:"]
        out += [
            f"- [{p['severity']}] {_md(p['layer'])}: {_md(p['text'].rstrip('.'))}. Users see: "
            f"{_code(p['error_text'])}."
            for p in problems
        ]
    return out


def _health(h: dict[str, Any]) -> list[str]:
    if not h.get("read"):
        return [
            "The health checks were not read for this report (`gputop-diag health` reads them)."
        ]
    c = h.get("counts") or {}
    found = h.get("findings") or ()
    out = [
        f"Read at {h['read_at']}: {c.get('critical', 0)} critical, "
        f"{formats.count(c.get('warning', 0), 'warning')}, "
        f"{c.get('info', 0)} info, {c.get('ok', 0)} ok.",
    ]
    if not found:
        return [*out, "", "Every check is ok."]
    for x in found:
        bears = ", ".join(b.replace("_", " ") for b in x["bears_on"])
        tail = f" (bears on {bears})" if bears else ""
        out += ["", f"- **{x['severity']}**: {_md(x['title'])}{tail}"]
        out += [f"  - {_md(e['text'])} ({_md(e['read_from'])})" for e in x["evidence"]]
        if x.get("next_step"):
            out.append(f"  - next: {_code(x['next_step'])}")
    return out


def _mapping(m: dict[str, Any]) -> list[str]:
    out = ["How it was mapped:", *[f"- {_md(x)}" for x in m.get("logic") or ()], ""]
    out.append("Conclusions:")
    out += [f"- {_md(c)}" for c in m.get("conclusions") or ()] or ["- no process on a GPU"]
    if m.get("checks"):
        out += ["", "By user:", *[f"- {_md(c['text'])}" for c in m["checks"]]]
    if m.get("findings"):
        out += ["", "Findings:"]
        out += [
            f"- [{f['severity']}] {_md(f['text'])}; next: {_md(f['next_step'])}"
            for f in m["findings"]
        ]
    shell = m.get("this_shell") or {}
    if shell:
        out += ["", "This shell: " + ", ".join(_code(f"{k}={v}") for k, v in shell.items()) + "."]
    out += [
        "",
        f"To confirm on the machine, privately: {_code(m['confirm_privately'])}. Keep its output "
        "to yourself: bus ids, UUIDs and minor numbers per index are the node's device layout.",
    ]
    return out


def _processes(p: dict[str, Any]) -> list[str]:
    procs = p.get("processes") or ()
    owned = any(r.get("owner") for r in procs)  # an owner column where any runs for one
    rows = [
        [
            r["gpu"],
            r["pid"],
            r.get("user") or "n/a",
            *([r.get("owner") or "-"] if owned else []),
            _gib(r.get("gpu_memory_gib")),
            _pct(r.get("cpu_pct")),
            _Raw(_code(r["command"], True)),
        ]
        for r in procs
    ]
    if not rows:
        return ["No process on a GPU."]
    head = ["GPU", "PID", "user", *(["runs for"] if owned else []), "GPU memory", "CPU", "command"]
    out = _table(head, rows, "rrl" + ("l" if owned else "") + "rrl")
    if p.get("more"):
        out += ["", f"…and {p['more']} more."]
    out += [
        "",
        "Commands keep the program's name and known-safe options; every other argument is a "
        "pseudonym (`arg-…`).",
    ]
    return out


def _scheduler(s: dict[str, Any]) -> list[str]:
    if not s.get("queried"):
        return ["Slurm was not asked in this window."]
    if not s.get("jobs"):
        return ["No Slurm job of this user (or Slurm is not installed)."]
    rows = [
        [
            j["job"],
            j.get("name") or "",
            j.get("user") or "",
            j["state"],
            j.get("reason") or "",
            _duration(j.get("wait_s")),
            _duration(j.get("time_left_s")),
        ]
        for j in s["jobs"]
    ]
    return _table(["job", "name", "user", "state", "reason", "waited", "time left"], rows)


def _errors(e: dict[str, Any]) -> list[str]:
    errs = e.get("errors") or ()
    if not errs:
        return ["Every source answered."]
    out = []
    for x in errs:
        where = f" (GPU {x['gpu']})" if x.get("gpu") is not None else ""
        out.append(f"- **{x['source']}**{where}: {_md(x['message'])}. Next: {_md(x['next_step'])}")
    return out


def _ranks(r: dict[str, Any]) -> list[str]:
    return ranks_markdown(r, _table, _md)


def _measured(m: dict[str, Any]) -> list[str]:
    return measured_markdown(m, _table, _md)


RENDERERS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "diagnosis": _diagnosis,
    "ranks": _ranks,
    "measured": _measured,
    "memory": _memory,
    "utilization": _utilization,
    "throttle": _throttle,
    "xid": _xid,
    "driver_chain": _driver_chain,
    "health": _health,
    "mapping": _mapping,
    "processes": _processes,
    "scheduler": _scheduler,
    "errors": _errors,
}


def render_section(name: str, section: dict[str, Any]) -> str:
    return "\n".join(RENDERERS[name](section))


def _redactions(r: dict[str, Any]) -> list[str]:
    classes = r.get("classes") or {}
    out = [
        "Every name below was replaced before this report was written. A pseudonym (`host-…`, "
        "`user-…`, `GPU-…`, `pci-…`) is a keyed hash under a key made for this report alone and "
        "never saved: the same identifier has the same pseudonym throughout this report and a "
        "different one in any other, and nothing here turns it back.",
        "",
    ]
    if classes:
        out += _table(
            ["what", "replaced", "distinct"],
            [
                [c["label"], c["replaced"], "removed" if c["distinct"] is None else c["distinct"]]
                for c in classes.values()
            ],
            "lrr",
        )
    else:
        out.append("Nothing needed replacing.")
    for lo in r.get("left_out") or ():
        title = SECTION_TITLES.get(lo["section"], lo["section"])
        out += ["", f"**Left out: {title}**: {lo['reason']}."]
    return out


def render_markdown(doc: dict[str, Any]) -> str:
    """The whole report as Markdown."""
    d = doc.get("diagnosis") or {}
    verdict = ""
    if d:
        verdict = ": " + (d.get("primary") or "?").replace("_", " ")
        if d.get("finding"):
            verdict += f" ({d['finding'].replace('_', '-')})"
        lead = _lead(d)
        if d.get("faults"):
            verdict += " (hardware fault first)"
        elif lead is not None:
            verdict += f" ({lead.label.lower()} first)"
    out = [f"# gputop-diag report{verdict}", ""]
    out += [
        "Sanitized by gputop-diag: host and user names, GPU UUIDs, serials, PCI bus ids, paths, "
        "job ids and command-line arguments are pseudonyms; raw kernel-log lines and the "
        "node's device layout are not included. What was replaced is listed at the end.",
        "",
    ]
    m = doc.get("machine") or {}
    w = doc.get("window") or {}
    src = doc.get("source") or {}
    source = {
        "live": "this machine, live",
        "recording": "a recording",
        "simulator": f"the simulator, scenario {_code(src.get('scenario'))}",
    }.get(src.get("kind"), src.get("kind") or "?")
    models = (
        ", ".join(f"{x['count']} × {x['model']}" for x in m.get("gpu_models") or ()) or "no GPU"
    )
    if m.get("mig_enabled"):
        models += f" (MIG, {m.get('mig_instances', 0)} instances)"
    tool = doc.get("tool") or {}
    rows = [
        ["Tool", f"gputop-diag {tool.get('version')}, report schema {doc.get('schema')}"],
        [
            "Window",
            f"{w.get('seconds', 0):.0f} s, {w.get('samples', 0)} samples every "
            f"{w.get('interval_s', 0):g} s, ending {doc.get('time')}",
        ],
        ["Source", source],
    ]
    if m.get("host") is not None:
        rows.append(["Machine", f"{m['host']}: {models}"])
    if "driver_version" in m:
        rows.append(
            [
                "Driver",
                f"{m.get('driver_version') or 'n/a'}, NVML {m.get('nvml_version') or 'n/a'}, "
                f"CUDA up to {m.get('driver_max_cuda') or 'n/a'}",
            ]
        )
    out += [f"- **{k}:** {v}" for k, v in rows] + [""]
    for name, title in SECTION_TITLES.items():
        if name in doc:
            out += [f"## {title}", "", *RENDERERS[name](doc[name]), ""]
    out += ["## What was redacted", "", *_redactions(doc.get("redactions") or {}), ""]
    return "\n".join(out)
