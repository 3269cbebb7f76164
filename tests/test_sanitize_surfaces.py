"""The sanitizer on the surfaces the headless commands of test_sanitize_planted.py leave out.

Identifiers generated and planted as there (`build_case`, `sim/plant.py`), then:

* `watch --sanitize` headless (text and `--json`, stdout and stderr) of a job given by pid and
  by Slurm id on the planted machine, and of a started command whose output lines (NCCL, CUDA
  and PyTorch failure lines) and command line carry every planted form; its status lines;
* that watch's `--record` file, and `--replay FILE report`, `diagnose` and `snapshot` of it;
* the live view under `--sanitize`: every pane, the full panel, the help screen, `s` and `S`
  (the files and the toasts that say where they went), while a started job is watched too,
  the question when quitting while it runs, and the replay of a sanitized recording.

A planted form anywhere fails the test, and so does a refusal ("could not be sanitized").
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import pytest
from test_sanitize_planted import Corpus, build_case, planted, sanity
from test_tui import everything_shown, toasts, wait_for_files
from test_tui_support import FedApp, settled, tick

from gputop_diag import sim
from gputop_diag.cli import main
from gputop_diag.collect.job import JobWatch
from gputop_diag.model.codec import snapshot_to_json
from gputop_diag.recording.store import Recording
from gputop_diag.sim.plant import Plant
from gputop_diag.tui import GpuTopApp, SnapshotReady
from gputop_diag.tui.help import HelpScreen
from gputop_diag.tui.job_quit import QuitJobScreen


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def clean(corpus: Corpus, where: object, text: str) -> None:
    found = corpus.survivors(text)
    assert found == [], (where, found)


def forms(corpus: Corpus) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in corpus.secrets:
        out.setdefault(s.what, []).extend(s.forms)
    return out


def job_lines(plant: Plant, corpus: Corpus) -> list[str]:
    """A job's failure output, as NCCL, CUDA and PyTorch print it, with every planted form in
    it: bus ids in every notation, UUIDs, serials, this host and its domain, peers, addresses,
    MACs, pods, cloud ids, the Slurm job, home and project paths, tokens."""
    f = forms(corpus)
    user, user_up, user_cap, user2, user2_up = f["user"]
    host, host_up, fqdn, domain = f["host"]
    peer, peer_fqdn = f["peer host"]
    ip, ip0, ipdash, ip2 = f["IPv4"]
    macs = f["MAC"]
    jwt, bearer, hf, ghp, akia, aws, password, token, apikey = f["token"][::2]  # (whole, cut)
    pod, kubeflow = f["pod"]
    env = plant.environ
    project, run = f["project"][0], f["run name"][0]
    lines = []
    for g in plant.gpus:
        b = g.bus[1]
        lines += [
            f"{host}:4242:4250 [{g.index}] NCCL INFO cudaDev {g.index} busId {b:02x}000 via "
            f"P2P/IPC GPU/{b:02X}000 GPU/0-{b:02x}000",
            f"RuntimeError: CUDA error: uncorrectable ECC error encountered on {g.uuid} "
            f"({g.uuid.upper()}) PCI:0000:{b:02x}:00 00000000:{b:02X}:00.0 0000:{b:02x}:00.0 "
            f"0000:{b:02x}:00 {b:02x}:00.0 {b:02X}:00 0:{b:02x}:00.0 Board Serial Number: "
            f"{g.serial}",
        ]
    return [
        *lines,
        f"{host_up}:4242:4242 [0] NCCL WARN socketStartConnect: Connect to {ip2}<29500> failed "
        f": Connection refused (remote peer {peer_fqdn}, search {domain}, host {fqdn})",
        f"{host}:4242:4242 [1] NCCL WARN NET/IB : peer {ip0}<40321> ip-{ipdash}.ec2.internal "
        f"ip_{ip} hca mlx5_0 {macs[0]} {macs[1]} ether {macs[2]} HWaddr {macs[3]} {macs[4]}",
        f"[rank1]:[E ProcessGroupNCCL.cpp:616] Watchdog caught collective operation timeout "
        f"(peer {peer}) pod {pod} worker {kubeflow} instance {f['cloud id'][0]}",
        f"torch.OutOfMemoryError: CUDA out of memory. slurm job {f['job id'][0]} "
        f"{env['SLURM_JOB_NAME']} partition={env['SLURM_JOB_PARTITION']} "
        f"account={env['SLURM_JOB_ACCOUNT']} --run-name {run} --project {project}",
        f"RuntimeError: CUDA error: device-side assert triggered at /home/{user}/{project}/"
        f"train.py:12 by {user_cap} (owner={user2_up}, /home/{user2}/x.py, user={user_up}) "
        f"/usr/local/src/{project}/train.py /usr/share/{project}/conf.yaml",
        f"NCCL WARN token={token} password: {password} Authorization: Bearer {bearer} {jwt} "
        f"{hf} {ghp} {akia} AWS_SECRET_ACCESS_KEY={aws} api_key={apikey}",
    ]


def _every_form_in(corpus: Corpus, lines: list[str]) -> None:
    """The job's lines carry every planted form (a form missing would pass for nothing)."""
    text = "\n".join(lines)
    missing = [(s.what, x) for s in corpus.secrets for x in s.forms if x not in text]
    assert not missing, missing


def job_argv(lines: list[str], wait_s: float = 0.0) -> list[str]:
    """A started command: a Python job that prints `lines`, waits, and exits with 3. The
    lines are in its command line too (`-c`), as a job's options carry names."""
    code = f"import sys, time\nfor l in {lines!r}: print(l, flush=True)\n"
    code += f"time.sleep({wait_s})\nsys.exit(3)"
    return [sys.executable, "-c", code]


# -- headless -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed,scenario", [(21, "comm-bound"), (22, "xid-app")])
def test_watch_by_pid_and_by_slurm_job_names_nothing_planted(seed, scenario, monkeypatch, tmp_path):
    plant, corpus, _ = build_case(seed, scenario)
    job = plant.slurm[0]["id"]
    watch = ["--demo", scenario, "watch", "--no-tui", "--seconds", "20"]
    with planted(monkeypatch, tmp_path, plant):
        rc, out, _ = cli([*watch, "--pid", "41200"])
        assert rc == 0 and corpus.survivors(out)  # unsanitized, the plant is in the job
        for target in (["--pid", "41200"], ["--slurm", job]):
            for fmt in ([], ["--json"]):
                argv = [*watch, "--sanitize", *target, *fmt]
                rc, out, err = cli(argv)
                sanity(argv, rc, out + err)
                clean(corpus, (argv, "stdout"), out)
                clean(corpus, (argv, "stderr"), err)
                if fmt:
                    assert json.loads(out)["schema"] == "gputop-diag.watch/1"


@pytest.mark.parametrize("seed,scenario", [(23, "compute-bound"), (28, "idle")])
def test_watch_of_a_started_command_its_recording_and_replays(
    seed, scenario, monkeypatch, tmp_path
):
    """The job's output lines reach the summary (as failure lines), the diagnosis (the job's
    alerts) and the recording (its output tail); none carries a planted form. On `idle` the
    job is all that runs: no other process names its run or its project."""
    plant, corpus, _ = build_case(seed, scenario)
    lines = job_lines(plant, corpus)
    _every_form_in(corpus, lines)
    home = tmp_path / "home" / plant.user  # the job's output and the recording in a home
    home.mkdir(parents=True)
    rec = str(home / "run.jsonl")
    demo = ["--demo", scenario, "watch", "--sanitize", "--no-tui"]
    with planted(monkeypatch, tmp_path, plant):
        rc, out, err = cli([*demo, "--output", str(home / "a.log"), "--", *job_argv(lines)])
        assert rc == 3 and "could not be sanitized" not in err, err
        clean(corpus, "watch stdout", out)
        clean(corpus, "watch stderr", err)
        assert "exited with code 3" in out and "NCCL error at line" in out
        rc, out, err = cli(
            [*demo, "--json", "--record", rec, "--output", str(home / "b.log"), "--"]
            + job_argv(lines)
        )
        assert rc == 3 and "could not be sanitized" not in err, err
        clean(corpus, "watch --json stdout", out)
        clean(corpus, "watch --json stderr", err)
        alerts = json.loads(out)["diagnosis"]["alerts"]
        assert any(a["text"].startswith("job output line") for a in alerts)
    raw = open(rec, encoding="utf-8").read()
    clean(corpus, "the recording", raw)
    snaps = [json.loads(x) for x in raw.splitlines()[1:]]
    assert snaps, "no snapshot recorded"
    tails = [s["job"]["output_tail"] for s in snaps if s.get("job")]
    assert max(map(len, tails)) == len(lines)  # every line went through the sanitizer
    for argv in (
        ["--replay", rec, "report"],
        ["--replay", rec, "report", "--json"],
        ["--replay", rec, "diagnose"],
        ["--replay", rec, "diagnose", "--json"],
        ["--replay", rec, "snapshot"],
        ["--replay", rec, "snapshot", "--json"],
    ):
        rc, out, err = cli(argv)
        sanity(argv, rc, out + err)
        clean(corpus, argv, out + err)


def test_watch_status_lines_name_nothing_planted(monkeypatch, tmp_path):
    """The status line a headless watch prints on stderr while the job runs (every 10 s; here
    every tick, on this machine: the simulator's clock prints none) names the job as the
    summary does: a started command's label is its command line sanitized."""
    from gputop_diag.commands import watch

    plant, corpus, _ = build_case(27, "idle")
    monkeypatch.setattr(watch, "STATUS_EVERY_S", 0.0)
    argv = ["watch", "--sanitize", "--no-tui", "--interval", "0.2"]
    argv += ["--output", str(tmp_path / "job.log"), "--"]
    rc, out, err = cli(argv + job_argv(job_lines(plant, corpus), wait_s=0.5))
    assert rc == 3 and err.count(": running;") >= 2, err
    clean(corpus, "the status lines", err)


# -- the live view ----------------------------------------------------------------------------


async def _visit(app, pilot, corpus: Corpus, keys: str) -> None:
    """Each pane of `keys`, the full panel (`p`) and the help: nothing planted on any."""
    for key in keys:
        await pilot.press(key)
        await pilot.pause()
        clean(corpus, f"pane {key}", everything_shown(app))
    await pilot.press("p")  # under 100 columns: the whole panel
    await pilot.pause()
    clean(corpus, "the full panel", everything_shown(app))
    await pilot.press("p", "question_mark")
    await pilot.pause()
    assert isinstance(app.screen, HelpScreen)
    clean(corpus, "the help", everything_shown(app))
    await pilot.press("escape")


async def _save_both(app, pilot, corpus: Corpus, folder) -> None:
    """`s` and `S` into `folder` (a directory under the planted user's home): the files and
    the toasts that say where they went name nothing planted."""
    await pilot.press("s")
    written = await wait_for_files(pilot, folder, "gputop-diag-report-*", 2)
    await pilot.press("S")
    assert await settled(pilot, lambda: toasts(app).count("written to") >= 2, tries=100)
    files = sorted(folder.glob("gputop-diag-*"))
    assert len(written) == 2 and len(files) == 3, files
    clean(corpus, "the toasts", toasts(app))
    clean(corpus, "the screen with its toasts", everything_shown(app))
    for f in files:
        clean(corpus, f.name, f.read_text())


def _state_home(monkeypatch, tmp_path, plant: Plant):
    """`s` and `S` write under ~/.local/state, the planted user's home."""
    state = tmp_path / "home" / plant.user / ".local" / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    return state / "gputop-diag"


async def test_live_view_under_sanitize_names_nothing_planted(monkeypatch, tmp_path):
    plant, corpus, _ = build_case(24, "xid-app")
    folder = _state_home(monkeypatch, tmp_path, plant)
    with planted(monkeypatch, tmp_path, plant):
        app = FedApp("xid-app", sanitize=True)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await pilot.pause()
        clean(corpus, "before the first tick", everything_shown(app))
        app.feed(8)
        await pilot.pause()
        assert corpus.survivors(json.dumps(snapshot_to_json(app.latest.sampled)))  # planted
        await _visit(app, pilot, corpus, "12345")
        await _save_both(app, pilot, corpus, folder)


class _WatchApp(GpuTopApp):
    """The live view of `gputop-diag watch --sanitize`, ticked by the test."""

    def __init__(self, watch: JobWatch, sources) -> None:
        super().__init__(sources, start_collectors=False, job_watch=watch, sanitize=True)


async def test_watched_job_view_and_s_during_watch_name_nothing_planted(monkeypatch, tmp_path):
    plant, corpus, _ = build_case(25, "compute-bound")
    lines = job_lines(plant, corpus)
    folder = _state_home(monkeypatch, tmp_path, plant)
    with planted(monkeypatch, tmp_path, plant):
        sources = sim.build("compute-bound")
    log = tmp_path / "home" / plant.user / "job.log"
    log.parent.mkdir(parents=True)
    w = JobWatch.for_command(sources, job_argv(lines, wait_s=30), log_path=str(log))
    try:
        app = _WatchApp(w, sources)
        async with app.run_test(size=(80, 24), notifications=True) as pilot:

            def read_all() -> bool:
                tick(app)
                return app.latest is not None and app.latest.snapshot.job.output_lines >= len(lines)

            assert await settled(pilot, read_all, tries=100)
            tick(app)
            await pilot.pause()
            assert w.running  # `s` and `S` while the job runs
            await _visit(app, pilot, corpus, "612345")
            await _save_both(app, pilot, corpus, folder)
            await pilot.press("q")  # the job still runs: the view asks first
            await pilot.pause()
            assert isinstance(app.screen, QuitJobScreen)
            clean(corpus, "the quit question", everything_shown(app))
            await pilot.press("n")
            report = json.loads(next(folder.glob("gputop-diag-report-*.json")).read_text())
            alerts = [a["text"] for a in report["diagnosis"]["alerts"]]
            assert any(a.startswith("job output line") for a in alerts)  # the lines went in
            w.detach()
    finally:
        if w.popen.poll() is None:
            w.popen.kill()
            w.popen.wait()


async def test_replay_of_a_sanitized_recording_names_nothing_planted(monkeypatch, tmp_path):
    """A sanitized recording (of a watched job) replayed in the live view without --sanitize
    (what was recorded is what is shown): nothing planted on screen, in `s` or in `S`."""
    plant, corpus, _ = build_case(26, "comm-bound")
    rec = str(tmp_path / "run.jsonl")
    with planted(monkeypatch, tmp_path, plant):
        argv = ["--demo", "comm-bound", "watch", "--sanitize", "--no-tui", "--pid", "41200"]
        rc, _, err = cli([*argv, "--seconds", "10", "--record", rec])
    assert rc == 0, err
    folder = tmp_path / "saved"
    folder.mkdir()
    app = GpuTopApp(
        None,
        replay=Recording.open(rec),
        start_collectors=False,
        save_dir=str(folder),
    )
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        for snap in app.replay.snapshots():  # what the replay's player posts, tick by tick
            app.post_message(SnapshotReady(app.feeder.add(snap)))
        await pilot.pause()
        await _visit(app, pilot, corpus, "12345")
        await _save_both(app, pilot, corpus, folder)
