"""The probe inside the simulated job's ranks: each rank of a scenario with `probe` writes the
file the real probe would (gputop_diag/probe/schema.py) under the machine's $XDG_RUNTIME_DIR, its
hello, model and note first, then its steps and sync call sites as simulated time passes.

`RankProbes` is a part of `SimMachine` (`machine.py`): it reads the machine's scenario, processes
and timeline, and the memory the machine gives each rank (`SimMachine._probe_memory`).
"""

from __future__ import annotations

import json
import math
import os

from .population import SimProc
from .profiles import probe_step

# The probe's file format (gputop_diag/probe/schema.py: the simulator may not import the probe,
# tests/test_probe_reader.py checks that the two agree).
PROBE_SCHEMA = "gputop-diag.probe/1"
PROBE_MAX_BYTES = 4 * 1024 * 1024
PROBE_BACKFILL = 60  # steps written for a job that ran before the view opened
PROBE_SITES_EVERY_S = 5.0
PROBE_FIRST_STEP_S = 20.0  # a rank's first step ends this long after it started (loading)
SIM_NOTE = "simulated: written by the gputop-diag --demo simulator, no probe ran"


class RankProbes:
    """The probe files of the simulated ranks, written as `SimMachine.state()` advances."""

    def _write_probes(self, st: dict) -> None:
        """Append each rank's steps up to the state's time to its probe file, as the probe
        inside it would (probe/schema.py), the first time after its hello, model and note."""
        spec, t = self.spec["probe"], st["t"]
        ranks = [p for p in self.procs.values() if p.role == "rank" and self.alive(p.pid, t)]
        folder = os.path.join(self.runtime_dir, "gputop-diag")
        os.makedirs(folder, mode=0o700, exist_ok=True)
        for p in ranks:
            step_s = self.profile_at(t).get("period", spec.get("step_s", 1.0))
            origin = p.create_time + PROBE_FIRST_STEP_S
            last = math.floor((t - origin) / step_s)
            w = self._probed.get(p.pid)
            if w is None:
                ticks = int((p.create_time - self.boot_time) * 100)  # as /proc/<pid>/stat says
                name = f"probe-{p.pid}-{ticks}.jsonl"
                w = dict(path=os.path.join(folder, name), ticks=ticks, k=max(0, last - 60))
                w.update(syncs=0, sync_s=0.0, sites_at=None)
                self._probed[p.pid] = w
                self._probe_append(w, self._probe_head(p, w, len(ranks)))
            records = []
            while w["k"] <= last:
                end = origin + w["k"] * step_s
                rec = probe_step(self.profile_at(end), step_s, w["k"], len(ranks))
                w["syncs"] += rec["sync_count"]
                w["sync_s"] += rec["t_sync_s"]
                measured = ["t_input", "t_sync"]  # as the real probe: never t_gpu
                measured += ["t_comm"] if rec.get("t_comm_s") is not None else []
                mem = self._probe_memory(p, st, end - origin)
                records.append(
                    dict(kind="step", t=end, step=w["k"], **rec, measured=measured, mem=mem)
                )
                w["k"] += 1
            if w["sites_at"] is None or t - w["sites_at"] >= PROBE_SITES_EVERY_S:
                w["sites_at"] = t
                records.append(dict(kind="sync_sites", t=t, sites=self._probe_sites(p, w)))
            self._probe_append(w, records[-PROBE_BACKFILL:], p, len(ranks))

    def _probe_head(self, p: SimProc, w: dict, world: int) -> list[dict]:
        t = p.create_time + 5.0
        params = int(self.spec["probe"].get("params", 1e9))
        return [
            dict(
                kind="hello",
                t=t,
                schema=PROBE_SCHEMA,
                pid=p.pid,
                start_ticks=w["ticks"],
                argv=list(p.cmdline),
                python="3.11.9",
                torch="2.7.1+cu128",
                cuda=True,
                rank=int(p.environ.get("RANK", 0)),
                world=world,
                measures=dict(
                    t_input=True, t_sync=True, t_comm=world > 1, t_gpu=False, memory=True
                ),
            ),
            dict(kind="note", t=t, text=SIM_NOTE),
            # bf16 weights and gradients, fp32 Adam state (master copy and two moments)
            dict(
                kind="model",
                t=t + 10.0,
                params_bytes=2 * params,
                grads_bytes=2 * params,
                optimizer_bytes=12 * params,
                kv_cache_bytes=None,
            ),
        ]

    def _probe_sites(self, p: SimProc, w: dict) -> list[dict]:
        script = next((a for a in p.cmdline[1:] if a.endswith(".py")), "train.py")
        sites = self.spec["probe"].get("sites") or ((f"/home/{p.user}/{script}:57", ".item", 1),)
        return [
            dict(site=s, call=c, count=round(w["syncs"] * share), seconds=w["sync_s"] * share)
            for s, c, share in sites
        ]

    def _probe_append(
        self, w: dict, records: list[dict], p: SimProc | None = None, world: int = 1
    ) -> None:
        """Append records; past PROBE_MAX_BYTES the file becomes `<name>.1` and a new one
        starts with its hello, as the probe rotates."""
        path = w["path"]
        if p is not None and os.path.exists(path) and os.path.getsize(path) > PROBE_MAX_BYTES:
            os.replace(path, path + ".1")
            records = self._probe_head(p, w, world) + records
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)
