"""Xid triage: the catalog, GPU mapping by UUID, groups and the route (question before action),
the four history patterns, the follow-up chains, and what --sanitize leaves out."""

from __future__ import annotations

from pathlib import Path

import pytest

from gputop_diag.model import (
    GpuProcess,
    GpuState,
    GpuStatic,
    ProcessInfo,
    Snapshot,
    SystemInfo,
    XidEvent,
)
from gputop_diag.xid.catalog import (
    ACTIONS,
    APPLICATION_XIDS,
    CAUSES,
    DRIVER_MESSAGES,
    XID_CATALOG,
    describe,
    entry,
    sxid_entry,
)
from gputop_diag.xid.events import KernelEvent, parse_lines
from gputop_diag.xid.triage import triage
from gputop_diag.xid.types import GpuRef, TriageContext, map_gpus, sanitized

DATA = Path(__file__).parent / "data"
T0 = 1_768_471_920.0  # 2026-01-15 10:12:00 UTC
UUID3 = "GPU-33333333-3333-3333-3333-333333333333"
UUID5 = "GPU-55555555-5555-5555-5555-555555555555"
GPUS = (
    GpuRef(3, UUID3, "0000:3b:00"),
    GpuRef(5, UUID5, "0000:5d:00"),
    GpuRef(6, "GPU-66666666-6666-6666-6666-666666666666", "0000:ab:00"),
)


def ev(code=None, t=T0, pci="0000:3b:00", kind="xid", **kw) -> KernelEvent:
    return KernelEvent(
        kind=kind, timestamp=t, code=code, pci=pci, source="journal", sources=("journal",), **kw
    )


# -- the catalog ---------------------------------------------------------------------------------


def test_catalog_holds_every_code_nvidia_publishes():
    lines = (DATA / "xid_codes_nvidia.txt").read_text("utf-8").splitlines()
    codes = {int(c) for line in lines if not line.startswith("#") for c in line.split()}
    assert len(codes) >= 60
    assert codes <= set(XID_CATALOG), sorted(codes - set(XID_CATALOG))


@pytest.mark.parametrize("code", sorted(XID_CATALOG))
def test_every_entry_is_complete_data(code):
    e = entry(code)
    assert e.code == code and e.name and e.meaning and e.source
    assert e.action in ACTIONS and e.severity in ("info", "warning", "critical")
    assert all(c in CAUSES for c in e.causes) and e.causes
    assert e.question.endswith("?") or "?" in e.question  # a question, not an order
    name, meaning, step, severity = describe(code)
    assert step.index(e.question) < step.index(e.step)  # the question leads, then the action


def test_a_code_alone_is_not_a_root_cause_rma_comes_after_the_question():
    for code in (48, 64, 74, 79, 95):
        step = describe(code)[2]
        q_end = step.index("?")
        for word in ("RMA", "contact support", "drain"):
            if word in step:
                assert step.index(word) > q_end, (code, word)


def test_application_codes_blame_the_application_first():
    for code in (13, 31, 43, 45, 68):
        assert entry(code).causes[0] == "app" and code in APPLICATION_XIDS


def test_unknown_codes_still_get_a_route():
    e = entry(999)
    assert not e.known and e.name == "XID_999" and "Xid catalog" in e.step and "?" in e.question


def test_sxid_units_and_driver_messages():
    assert sxid_entry(22013).unit == "minion/link" and sxid_entry(12028).meaning.startswith(
        "non-posted"
    )
    assert sxid_entry(10004).unit == "host" and "THERMAL" in sxid_entry(10004).step
    assert DRIVER_MESSAGES["fallen_off_bus"].as_xid == 79
    for d in DRIVER_MESSAGES.values():
        assert "?" in d.question and d.step and d.severity in ("info", "warning", "critical")


# -- mapping and groups --------------------------------------------------------------------------


def test_events_map_to_gpus_through_nvml_bus_ids_and_the_drivers_uuid_lines():
    events = map_gpus(
        [
            ev(kind="gpu_announce", code=None, pci="0000:ab:00", gpu_uuid="GPU-other"),
            ev(13, pci="0000:3b:00"),
            ev(13, pci="0000:ab:00"),  # announced with another UUID: a different GPU now
            ev(13, pci="0000:99:00"),  # NVML does not know it
        ],
        GPUS,
    )
    assert [(e.gpu_index, e.gpu_uuid) for e in events[1:]] == [
        (3, UUID3),
        (None, "GPU-other"),
        (None, None),
    ]


def test_same_gpu_is_the_same_uuid_even_when_its_index_moved():
    before = ev(31, t=T0, pci="0000:3b:00", gpu_uuid=UUID3, pid=1, process_name="train")
    after = ev(31, t=T0 + 86400, pci="0000:5d:00", gpu_uuid=UUID3, pid=2, process_name="eval")
    out = triage([before, after], TriageContext(gpus=GPUS))
    (group,) = [g for g in out.groups if g.code == 31]
    assert group.count == 2 and group.gpu_uuid == UUID3


def test_route_is_most_urgent_first_and_leads_with_the_question():
    events = [ev(13, t=T0, pid=7, process_name="python"), ev(79, t=T0 + 5, pci="0000:5d:00")]
    out = triage(events, TriageContext(gpus=GPUS))
    assert [g.code for g in out.groups] == [79, 13]
    first = out.route[0]
    assert first.startswith("Xid 79 FALLEN_OFF_BUS on GPU 5: ask: ")
    assert first.index("ask:") < first.index("Then: drain the node")


# -- chains --------------------------------------------------------------------------------------


def test_45_caused_by_a_previous_xid_follows_it_and_leaves_the_route():
    lines = [
        "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x0)",
        "NVRM: Xid (PCI:0018:01:00): 45, pid=1818990, name=python3, Ch 00000001 caused by "
        "previous Xid 149",
    ]
    out = triage(parse_lines(lines).events)
    (g45,) = [g for g in out.groups if g.code == 45]
    assert g45.follows == "Xid 149"
    assert [r.split(":")[0] for r in out.route] == ["Xid 149 NVLINK_NETIR_ERROR on GPU at 0018"]
    assert any(c.first == "Xid 149" and "45" in c.then for c in out.chains)


def test_43_soon_after_an_app_fault_follows_it():
    out = triage([ev(13, t=T0), ev(43, t=T0 + 1), ev(43, t=T0 + 600)])
    g43 = [g for g in out.groups if g.code == 43][0]
    assert g43.follows is None  # the one 10 minutes later follows nothing
    out = triage([ev(13, t=T0), ev(43, t=T0 + 1)])
    assert [g.follows for g in out.groups if g.code == 43] == ["Xid 13"]


def test_follow_ups_of_different_faults_name_each_leader_with_its_count():
    out = triage(
        [ev(13, t=T0), ev(43, t=T0 + 1), ev(13, t=T0 + 60), ev(43, t=T0 + 61)]
        + [ev(31, t=T0 + 120), ev(43, t=T0 + 121)]
    )
    (g43,) = [g for g in out.groups if g.code == 43]
    assert g43.follows == "Xid 13 ×2, Xid 31 ×1"  # not all three credited to Xid 13


@pytest.mark.parametrize(
    ("later", "then", "severity"),
    [
        (64, "Xid 64 ROW_REMAP_FAILURE", "critical"),
        (63, "Xid 63 ROW_REMAP_EVENT", "warning"),
        (None, "no Xid 63/64 yet", "critical"),
    ],
)
def test_48_then_63_or_64(later, then, severity):
    events = [ev(48, t=T0)] + ([ev(later, t=T0 + 1)] if later else [])
    chains = triage(events, TriageContext(gpus=GPUS)).chains
    assert [
        (c.first, c.then, c.gpu, c.severity) for c in chains if c.first.startswith("Xid 48")
    ] == [("Xid 48 ECC_DBE", then, "GPU 3", severity)]


def test_79_then_a_lost_gpu_and_aer_before_it():
    gpus = (GpuRef(3, UUID3, "0000:3b:00", lost=True),)
    events = [
        ev(kind="pcie_aer", t=T0 - 2, pci="0000:3b:00", detail="AER: Uncorrected (Fatal)"),
        ev(79, t=T0),
        ev(kind="fallen_off_bus", t=T0, pci="0000:3b:00"),
    ]
    out = triage(events, TriageContext(gpus=gpus))
    pairs = {(c.first, c.then) for c in out.chains}
    assert ("Xid 79 FALLEN_OFF_BUS", "NVML: GPU lost") in pairs
    assert ("PCIe AER error", "Xid 79 FALLEN_OFF_BUS") in pairs
    fell = [g for g in out.groups if g.kind == "fallen_off_bus"][0]
    assert fell.follows == "Xid 79"  # one incident, not two in the route
    assert out.lost_gpus == ("GPU 3",)


def test_a_gpu_gone_from_nvml_after_79():
    out = triage([ev(79, pci="0000:c1:00")], TriageContext(gpus=GPUS))
    assert any(c.then == "missing from NVML now" for c in out.chains)


def test_154_names_its_trigger_and_the_action():
    lines = [
        "NVRM: Xid (PCI:0018:01:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x025001c6 0x0)",
        "NVRM: Xid (PCI:0018:01:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) "
        "to 0x1 (GPU Reset Required)",
    ]
    events = [e for e in parse_lines(lines).events]
    events = [
        KernelEvent(**{**{f: getattr(e, f) for f in e.__slots__}, "timestamp": T0}) for e in events
    ]
    chain = [c for c in triage(events).chains if c.then.startswith("Xid 154")][0]
    assert chain.first == "Xid 149 NVLINK_NETIR_ERROR" and "GPU Reset Required" in chain.then


def test_62_then_a_storm_of_45():
    events = [ev(62, t=T0)] + [ev(45, t=T0 + k) for k in range(1, 5)]
    assert any(c.then == "a storm of Xid 45" for c in triage(events).chains)


# -- the history patterns -------------------------------------------------------------------------


def finding(out, evidence):
    found = [f for f in out.findings if f.evidence == evidence]
    return found[0] if found else None


def test_repeated_on_one_device_same_job_points_at_the_job():
    events = [ev(31, t=T0 + k * 60, pid=41280, process_name="pt_main_thread") for k in range(3)]
    out = triage(events, TriageContext(gpus=GPUS))
    f = finding(out, "repeated Xid on one device")
    assert f.question == "same physical GPU, same job type, or same time window?"
    assert "×3 on GPU 3" in f.detail and "every time from pt_main_thread" in f.detail
    assert "over 2 min" in f.detail and "no other GPU had it" in f.detail
    assert f.action.startswith("run the same job on another GPU") and f.severity == "warning"


def test_repeated_on_one_device_different_jobs_points_at_the_gpu():
    events = [ev(31, t=T0, process_name="train"), ev(31, t=T0 + 3600, process_name="eval")]
    f = finding(triage(events, TriageContext(gpus=GPUS)), "repeated Xid on one device")
    assert "2 different processes (train, eval)" in f.detail
    assert "suspect the GPU" in f.action and "dcgmi diag" in f.action and f.severity == "critical"


def test_repeated_13_on_the_same_sm_is_the_hardware():
    text = "Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address"
    events = [
        ev(13, t=T0 + k, process_name="train", detail=text, location="GPC 1, TPC 3, SM 0")
        for k in (0, 100)
    ]
    f = finding(triage(events), "repeated Xid on one device")
    assert "always at GPC 1, TPC 3, SM 0" in f.detail and "suspect the GPU" in f.action


def test_across_many_devices_within_minutes():
    events = [
        ev(79, t=T0, pci="0000:3b:00"),
        ev(79, t=T0 + 40, pci="0000:5d:00"),
        ev(79, t=T0 + 90000, pci="0000:ab:00"),
    ]
    out = triage(events, TriageContext(gpus=GPUS))
    (f,) = [f for f in out.findings if f.evidence == "Xid across many devices"]
    assert f.question == "host, driver, PCIe, power, or scheduler-wide event?"
    assert f.gpus == ("GPU 3", "GPU 5") and "within 40 s" in f.detail
    assert "ipmitool sel" in f.action and f.severity == "critical"


def test_across_devices_counts_real_devices_only():
    fell = ev(kind="fallen_off_bus", t=T0 + 120, pci="0000:3b:00")
    no_device = ev(kind="gsp_timeout", t=T0 + 130, pci=None)  # names no GPU: not a device
    out = triage([fell, no_device])
    assert finding(out, "Xid across many devices") is None
    # an Xid 79 named by its UUID and the driver's line by bus id, minutes apart: one GPU
    out = triage([ev(79, t=T0, gpu_uuid=UUID3), fell])
    assert finding(out, "Xid across many devices") is None
    out = triage([ev(79, t=T0, gpu_uuid=UUID3), fell, ev(79, t=T0 + 150, pci="0000:5d:00")])
    f = finding(out, "Xid across many devices")
    assert f.gpus == ("GPU at 0000:3b:00", "GPU at 0000:5d:00") and "the host" not in f.detail
    assert "within 2 min" in f.detail


def test_a_fall_off_the_bus_is_one_story_in_the_route():
    (line,) = parse_lines(["NVRM: GPU 3b:00.0: GPU has fallen off the bus."]).events
    (g,) = triage([line], TriageContext(gpus=GPUS)).groups
    assert (g.gpu, g.title, g.severity) == ("GPU 3", "GPU fell off the bus (Xid 79)", "critical")
    assert "reported without" not in g.meaning and "Xid 79" in g.meaning


def test_across_devices_from_one_job_points_at_the_job():
    events = [
        ev(13, t=T0, pci="0000:3b:00", process_name="pt_main_thread"),
        ev(13, t=T0 + 2, pci="0000:5d:00", process_name="pt_main_thread"),
    ]
    f = finding(triage(events, TriageContext(gpus=GPUS)), "Xid across many devices")
    assert "one multi-GPU job" in f.detail and f.action.startswith("the job spans them all")


def test_after_a_driver_update():
    loads = [
        ev(kind="driver_loaded", t=T0 - 10 * 86400, pci=None, version="565.57.01"),
        ev(kind="driver_loaded", t=T0 - 86400, pci=None, version="570.124.06"),
    ]
    out = triage([*loads, ev(119, t=T0), ev(119, t=T0 - 9 * 86400)], TriageContext(gpus=GPUS))
    f = finding(out, "Xid after driver update")
    assert f.question == "driver/runtime compatibility or reboot/module state?"
    assert "565.57.01 → 570.124.06" in f.detail and "1 Xid event since (Xid 119)" in f.detail
    assert "torch.version.cuda" in f.action and f.severity == "warning"
    assert [e.version for e in out.driver_loads] == ["565.57.01", "570.124.06"]


def test_module_and_library_disagree_means_reboot():
    ctx = TriageContext(gpus=GPUS, module_version="570.124.06", library_version="575.51.03")
    f = finding(triage([ev(13)], ctx), "Xid after driver update")
    assert "module is 570.124.06 but NVML's library is 575.51.03" in f.detail
    assert f.action.startswith("reboot") and f.severity == "critical"


def test_api_mismatch_lines_mean_reboot():
    lines = [
        "NVRM: API mismatch: the client has the version 515.48.07, but",
        "NVRM: this kernel module has the version 510.73.05.  Please",
    ]
    f = finding(triage(parse_lines(lines).events), "Xid after driver update")
    assert "user space 515.48.07, kernel module 510.73.05" in f.detail and "reboot" in f.action


def gpu_state(index, util, power, temp, mem_pct, reasons=()) -> GpuState:
    static = GpuStatic(index=index, uuid=UUID3, pci_bus_id="00000000:3B:00.0", power_limit_w=700)
    total = 80 * 1024**3
    return GpuState(
        index=index,
        static=static,
        util_gpu_pct=util,
        power_w=power,
        temperature_c=temp,
        mem_total_bytes=total,
        mem_used_bytes=int(total * mem_pct / 100),
        clock_event_reasons=tuple(reasons),
    )


def snapshot(t, g: GpuState) -> Snapshot:
    return Snapshot(
        timestamp=t,
        system=SystemInfo(hostname="h", driver_version="570.124.06"),
        gpus=(g,),
        gpu_processes=(GpuProcess(pid=41280, gpu_index=g.index, kind="compute"),),
        processes=(ProcessInfo(pid=41280, name="pt_main_thread"),),
    )


def test_during_high_utilization_joins_the_sampled_history():
    history = [
        snapshot(T0 - 2, gpu_state(3, 20, 100, 40, 10)),
        snapshot(T0 - 1, gpu_state(3, 99, 690, 88, 97, ("hw_thermal",))),
        snapshot(T0 + 1, gpu_state(3, 0, 60, 40, 10)),
    ]
    out = triage([ev(31, t=T0)], TriageContext(gpus=GPUS, history=history))
    f = finding(out, "Xid during high utilization")
    assert f.question == "power, thermal, memory pressure, or workload-specific kernel?"
    for fact in (
        "99 % busy",
        "690 W (99 % of the limit)",
        "88 °C with thermal slowdown",
        "memory 97 % full",
        "running pid 41280 pt_main_thread",
    ):
        assert fact in f.detail
    assert "power at the limit" in f.action and "cooling" in f.action and "memory" in f.action
    assert out.notes == ()


def test_an_xid_on_an_idle_gpu_says_so():
    history = [snapshot(T0 - 1, gpu_state(3, 3, 80, 35, 5))]
    out = triage([ev(31, t=T0)], TriageContext(gpus=GPUS, history=history))
    assert finding(out, "Xid during high utilization") is None
    assert finding(out, "Xid while the GPU was not busy").severity == "info"


def test_without_history_the_triage_says_how_to_get_it():
    out = triage([ev(31, t=T0)], TriageContext(gpus=GPUS))
    assert any("gputop-diag record" in n for n in out.notes)


# -- NVML events ---------------------------------------------------------------------------------


def test_nvml_events_fold_into_their_kernel_lines():
    nvml = [XidEvent(timestamp=T0 + 0.8, xid=13, gpu_index=3, source="nvml")]
    out = triage([ev(13, t=T0, pid=5, process_name="python")], TriageContext(gpus=GPUS), nvml)
    (e,) = out.events
    assert e.sources == ("journal", "nvml") and e.process_name == "python"
    nvml_only = [XidEvent(timestamp=T0, xid=94, gpu_index=5, source="nvml")]
    (e,) = triage([], TriageContext(gpus=GPUS), nvml_only).events
    assert (e.code, e.gpu_uuid, e.pci) == (94, UUID5, "0000:5d:00")


def test_nvml_mismatch_is_an_event():
    out = triage([], TriageContext(nvml_mismatch=True))
    assert [e.kind for e in out.events] == ["nvml_mismatch"]
    assert out.groups[0].severity == "critical" and "reboot" in out.groups[0].step


# -- sanitize ------------------------------------------------------------------------------------


def test_sanitized_triage_holds_no_identifiers():
    events = [
        ev(
            31,
            t=T0 + k,
            pid=41280,
            process_name="secret_proj",
            gpu_uuid=UUID3,
            detail="MMU Fault at 0x7f29_5b8c9000",
            raw="node7 kernel: NVRM: ...",
        )
        for k in range(2)
    ] + [ev(31, t=T0 + 5, pci="0000:5d:00")]
    history = [snapshot(T0, gpu_state(3, 99, 690, 70, 50))]
    out = triage(sanitized(events), TriageContext(history=history, private=False))
    text = " ".join(
        [*out.route, *(f.detail + f.action for f in out.findings), *(c.meaning for c in out.chains)]
    )
    for secret in (
        "secret_proj",
        "41280",
        UUID3,
        "0000:3b:00",
        "0000:5d:00",
        "pt_main_thread",
        "0x7f29",
        "node7",
    ):
        assert secret not in text
    assert all(e.detail == "" and e.raw == "" and e.pid is None for e in out.events)
    assert {e.pci for e in out.events} == {"pci-1", "pci-2"}  # still two GPUs apart
    assert "×2" in out.route[0]


def test_after_a_driver_update_read_offline_says_only_what_is_known():
    """A log read offline knows neither the loaded module nor NVML's library: the action must
    not say they agree; knowing both and equal, it may."""
    loads = [
        ev(kind="driver_loaded", t=T0 - 10 * 86400, pci=None, version="565.57.01"),
        ev(kind="driver_loaded", t=T0 - 86400, pci=None, version="570.124.06"),
    ]
    offline = finding(triage([*loads, ev(119, t=T0)]), "Xid after driver update")
    assert "agree" not in offline.action and "not known" in offline.action
    one = TriageContext(gpus=GPUS, library_version="570.124.06")
    half = finding(triage([*loads, ev(119, t=T0)], one), "Xid after driver update")
    assert "agree" not in half.action and "only the NVML library was read" in half.action
    both = TriageContext(gpus=GPUS, module_version="570.124.06", library_version="570.124.06")
    known = finding(triage([*loads, ev(119, t=T0)], both), "Xid after driver update")
    assert "agree (570.124.06)" in known.action
