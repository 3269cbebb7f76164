"""The memory planner in the report: for the job holding most GPU memory, what the plan of its
model predicts per GPU beside what the job holds, with the difference, what was assumed and the
levers that would make it fit. Only with a model's config (`--model-config`, or a config.json
the job's command line names); nothing from the config but its shape reaches the report (no
path, no model name), so the section needs no sanitizing beyond the report's own check.
"""

from __future__ import annotations

from typing import Any

from ..collect.model_config import ConfigFinder, ModelConfig
from ..model import Snapshot
from ..planner.configs import FAMILIES
from ..planner.live import job_plan

GIB = 2**30


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / GIB, 2)


def plan_section(
    last: Snapshot, model_config: ModelConfig | None, sources: Any = None
) -> dict[str, Any] | None:
    """The plan beside the job, or None without a config (given or named by the job)."""
    proc = last.job_process()
    config, how = model_config, "given (--model-config)"
    if config is None and sources is not None and proc is not None:
        info = last.process(proc.pid)
        config = ConfigFinder(sources).find(proc.pid, info.cmdline if info else None)
        how = "named by the job's command line"
    if config is None:
        return None
    if proc is None:
        return {"config": how, "available": False, "why": "no process holds GPU memory"}
    jp = job_plan(last, config.read, gpu_index=proc.gpu_index, pids=(proc.pid,))
    if jp is None:
        return {"config": how, "available": False, "why": "no process holds GPU memory"}
    doc = jp.doc
    shape = doc["model"]["shape"]
    family = doc["model"]["family"]
    w = doc["workload"]
    return {
        "config": how,
        "available": True,
        "gpu": proc.gpu_index,
        "model": {
            "family": family if family in FAMILIES else "other",
            "parameters": doc["model"]["parameters"],
            "layers": shape["layers"],
            "hidden": shape["hidden"],
            "heads": shape["heads"],
            "kv_heads": shape["kv_heads"],
            "experts": shape["experts"],
        },
        "workload": {
            k: w[k]
            for k in (
                "mode",
                "dtype",
                "precision",
                "optimizer",
                "batch",
                "seq",
                "zero_stage",
                "world",
                "checkpointing",
                "flash_attention",
                "kv_dtype",
            )
        },
        "assumed": list(jp.assumed),
        "from_command_line": list(jp.said),
        "terms": [
            {"term": t["label"], "gib": _gib(t["bytes"]), "share": t["share"]} for t in doc["terms"]
        ],
        "total_gib": _gib(doc["total_bytes"]),
        "gpu_gib": _gib(doc["gpu"]["bytes"]) if doc["gpu"] else None,
        "fits": doc["fits"],
        "compared": [
            {
                "figure": r.label,
                "predicted_gib": _gib(r.predicted),
                "measured_gib": _gib(r.measured),
                "difference_gib": _gib(r.difference),
                "measured_by": r.how,
            }
            for r in jp.rows
        ],
        "what_ifs": [
            {
                "lever": r["lever"],
                "change": r["change"],
                "saves_gib": _gib(r["saves"]),
                "fits": r["fits"],
            }
            for r in doc["what_ifs"]
            if r["saves"] is not None
        ],
    }
