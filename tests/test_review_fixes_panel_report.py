"""The panel's held figures stay within 5 s of the tick; the report leads with a broken driver
chain as `diagnose` does; figures and counts read as English; a model config that is not the
running job's model is said, never shown as an impossible figure."""

from types import SimpleNamespace

from gputop_diag.diagnose.checks import _plan_mismatch
from gputop_diag.diagnose.measured_render import config_mismatch_words, tflops_text
from gputop_diag.diagnose.types import Diagnosis, Evidence
from gputop_diag.report.markdown import render_markdown
from gputop_diag.tui.side_panel import REFRESH_FIGURES_S, HeldFigures, age_text

GIB = 1024**3


def _diag(sm: float) -> Diagnosis:
    ev = Evidence("sm_util", sm, 70.0, f"SM active {sm:.0f} %", "%")
    return Diagnosis("compute", 0.85, evidence=(ev,))


def test_a_steady_verdict_sampled_every_second_is_never_shown_old():
    held = HeldFigures()
    for t in range(120):  # a figure wobbling by 1 point, never material
        shown, age = held.update(_diag(88.0 + t % 2), ("compute",), 1000.0 + t)
        assert age < REFRESH_FIGURES_S and age_text(age) == ""
        assert abs(shown.evidence[0].value - (88.0 + t % 2)) <= 1
    assert REFRESH_FIGURES_S <= 5


def _doc(alerts):
    return {
        "diagnosis": {
            "primary": "synchronization",
            "confidence": 0.9,
            "evidence": [{"metric": "t_sync", "value": 0.37, "text": "blocked in syncs"}],
            "alerts": alerts,
            "faults": [],
        }
    }


def test_the_report_leads_with_a_broken_driver_chain():
    chain = {
        "kind": "driver_chain",
        "severity": "critical",
        "text": "driver chain broken at the framework build: torch lacks sm_90; "
        "next: install a torch build that lists sm_90",
    }
    md = render_markdown(_doc([chain]))
    assert md.splitlines()[0] == "# gputop-diag report: synchronization (driver chain first)"
    section = md.split("## Diagnosis", 1)[1].strip().splitlines()
    assert section[0].startswith("> **Driver chain (critical):** driver chain broken")
    assert section[1] == "> Next: install a torch build that lists sm_90"
    assert section.index("**SYNCHRONIZATION**, confidence 90%, judged over the last 0 s.") > 2
    plain = render_markdown(_doc([{**chain, "severity": "warning"}]))
    assert plain.splitlines()[0] == "# gputop-diag report: synchronization"


def test_figures_read_as_english():
    assert tflops_text(1490.2) == "1,490" and tflops_text(31.08) == "31.1"
    words = config_mismatch_words(25.35)
    assert "2535" not in words and "does not look like the running job's model" in words


def test_a_plan_far_from_the_measured_memory_is_said_either_way():
    def snap(held_gib):
        return SimpleNamespace(
            gpu_processes=[SimpleNamespace(pid=7, used_memory_bytes=held_gib * GIB)]
        )

    said = _plan_mismatch(snap(74.8), 7, {"total_bytes": 211.4 * GIB})
    assert len(said) == 1 and "211.4 GiB per GPU while pid 7 holds 74.8 GiB" in said[0]
    assert _plan_mismatch(snap(74.8), 7, {"total_bytes": 30 * GIB})  # too small, too
    assert _plan_mismatch(snap(74.8), 7, {"total_bytes": 80 * GIB}) == []
    assert _plan_mismatch(snap(74.8), None, {"total_bytes": 211.4 * GIB}) == []
