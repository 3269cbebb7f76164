"""`gputop-diag exporter --sanitize` against planted identifiers: the Prometheus text it serves.

The identifiers of `test_sanitize_planted.build_case` are planted in the simulated machine
(`sim/plant.py`), with thread and helper names shaped like a runtime's around them
(`pt_<project>`, `cuda-<user>`, `NCCL <User> 0`: a title cut to 15 characters, or a thread a
job named). The exporter's families are built as the command builds them
(`commands.exporter.tick_metrics`: the one sanitizer, seeded with the machine's names) and,
end to end, scraped from `gputop-diag exporter --sanitize` itself. No planted form may survive
in any label value; the metric names, the GPU model, the runtime's own thread names and the
figures stay.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_sanitize_planted import Corpus, build_case, planted, run, sanity

from gputop_diag import sim
from gputop_diag.commands.exporter import tick_metrics
from gputop_diag.monitor.core import Monitor
from gputop_diag.sim.plant import PLANT_ENV, Plant, PlantedProcess

MODEL = "NVIDIA H100 80GB HBM3"
RUNTIME_NAMES = ("pt_main_thread", "pt_data_worker", "NCCL Progress 0", "cuda-EvtHandlr")


def plant_names(plant: Plant, corpus: Corpus) -> list[str]:
    """Threads of a rank and two of its dataloader workers named like a runtime's around the
    planted names (the kernel keeps 15 characters of a name)."""
    f: dict[str, list[str]] = {}
    for s in corpus.secrets:
        f.setdefault(s.what, []).extend(s.forms)
    user, host, project = f["user"][0], f["host"][0], f["project"][0]
    partition, run_name = f["partition"][0], f["run name"][0]
    threads = [
        f"pt_{project}",
        "pt_data_pin",
        f"cuda-{user}",
        f"nccl-{host}",
        f"NCCL {user.capitalize()} 0",
        f"python {run_name}",
    ]
    threads = [t[:15] for t in threads]
    workers = [f"cuda-{partition}"[:15], f"pt_{user}_{project}"[:15]]
    plant.processes += [
        PlantedProcess(4, threads=threads),
        PlantedProcess(12, name=workers[0]),  # a worker of the rank above
        PlantedProcess(20, name=workers[1]),
    ]
    return [threads[0], threads[2], *workers]


def args(**kw) -> argparse.Namespace:
    return argparse.Namespace(**{"sanitize": True, **kw})


def exposition(scenario: str, seconds: float, **kw) -> str:
    """What a scrape serves after `seconds` of the exporter's ticks, built as `exporter` does."""
    feed = sim.build(scenario)
    monitor = Monitor(feed)
    metrics = tick_metrics(args(**kw), feed, monitor, monitor.tick())
    monitor.run_for(seconds, metrics.update)
    return metrics.exposition().decode()


def label_values(text: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            for k, v in s.labels.items():
                out.setdefault(k, set()).add(v)
    return out


def useful(text: str) -> None:
    """The sanitized exposition still says what the node does."""
    names = {s.name for fam in text_string_to_metric_families(text) for s in fam.samples}
    assert {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "gputop_diag_bottleneck"} <= names
    labels = label_values(text)
    assert labels["modelName"] == {MODEL}
    assert set(RUNTIME_NAMES) <= labels["name"]
    assert labels["class"] == {"input_pipeline"}
    assert not {"hostname", "Hostname", "UUID", "pci_bus_id", "hpc_job"} & labels.keys()
    figures = [
        s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
        if s.name == "DCGM_FI_DEV_GPU_UTIL"
    ]
    assert len(figures) == 8 and all(0 <= v <= 100 for v in figures)


@pytest.mark.parametrize("seed", [41, 42])
def test_no_planted_identifier_survives_in_the_sanitized_exposition(seed, monkeypatch, tmp_path):
    plant, corpus, _ = build_case(seed, "input-starved")
    names = plant_names(plant, corpus)
    with planted(monkeypatch, tmp_path, plant):
        raw = exposition("input-starved", 12, sanitize=False)
        text = exposition("input-starved", 12)
    # planted: the raw exposition names the host, the GPUs and the runtime-shaped names
    assert plant.hostname in raw and plant.gpus[0].uuid in raw
    assert [n for n in names if f'name="{n}"' in raw] == names
    assert corpus.survivors(text) == []
    assert not [n for n in names if n in text]
    assert 'name="other"' in text
    useful(text)


def test_without_sanitize_the_exposition_names_what_it_reads(monkeypatch, tmp_path):
    """The plant is what makes the test above fail: unsanitized, its names are served."""
    plant, corpus, _ = build_case(43, "input-starved")
    plant_names(plant, corpus)
    with planted(monkeypatch, tmp_path, plant):
        feed = sim.build("input-starved")
        monitor = Monitor(feed)
        metrics = tick_metrics(args(), feed, monitor, monitor.tick())
    assert metrics.sanitizer is not None
    assert metrics._name("pt_data_worker") == "pt_data_worker"
    assert metrics._name("ForkPoolWorker-3") == "ForkPoolWorker-3"  # what the classifier reads
    assert metrics._name("tf_data_private") == "tf_data_private"
    user = plant.user
    assert metrics._name(f"cuda-{user}") == "other" and metrics._name(f"pt_{user}") == "other"


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        return r.read().decode()


@pytest.mark.e2e
@pytest.mark.slow
def test_the_exporter_command_serves_nothing_planted(tmp_path):
    plant, corpus, _ = build_case(44, "input-starved")
    names = plant_names(plant, corpus)
    path = tmp_path / "plant.json"
    path.write_text(json.dumps(plant.to_json()), encoding="utf-8")
    argv = ["--demo", "input-starved", "exporter", "--sanitize", "--listen", "127.0.0.1:0"]
    p = subprocess.Popen(
        [sys.executable, "-m", "gputop_diag", *argv, "--interval", "0.25"],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env={**os.environ, PLANT_ENV: str(path)},
    )
    try:
        line = p.stderr.readline()
        assert "serving http://" in line, line + p.stderr.read()
        port = int(line.split("serving http://")[1].split("/")[0].rsplit(":", 1)[1])
        first = _scrape(port)
        time.sleep(1.0)  # a few ticks later: the names the sanitizer learned since
        second = _scrape(port)
        p.send_signal(signal.SIGTERM)
        assert p.wait(timeout=5) == 0
        rest = p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    for where, text in (("first", first), ("second", second), ("stderr", line + rest)):
        assert corpus.survivors(text) == [], (where, corpus.survivors(text))
        assert not [n for n in names if n in text]
    for text in (first, second):
        assert f'modelName="{MODEL}"' in text
        assert "DCGM_FI_DEV_GPU_UTIL{" in text and "gputop_diag_bottleneck{" in text
    assert 'name="other"' in second and 'name="pt_data_worker"' in second  # CPU: two samples


def test_the_same_names_leave_snapshot_sanitize_as_arguments(monkeypatch, tmp_path):
    """The rule is the sanitizer's (`Sanitizer.process_name`), so every surface keeps it: a
    runtime's shape around a planted name is no runtime's name in `snapshot --sanitize`
    either, and nothing is refused."""
    plant, corpus, _ = build_case(45, "input-starved")
    names = plant_names(plant, corpus)
    argv = ["--demo", "input-starved", "snapshot", "--sanitize", "--json"]
    with planted(monkeypatch, tmp_path, plant):
        rc, raw = run(argv[:-2] + ["--json"])
        rc2, text = run(argv)
    shown = [n for n in names if n in raw]  # the snapshot has the busiest threads only
    assert rc == rc2 == 0 and len(shown) >= 2, shown
    sanity(argv, rc2, text)
    assert corpus.survivors(text) == [] and not [n for n in names if n in text]
    assert "pt_main_thread" in text and "pt_data_worker" in text
