"""The probe inside the simulated job's ranks: each rank of a scenario with `probe` writes the
file the real probe would (gputop_diag/probe/schema.py) under the machine's $XDG_RUNTIME_DIR, its
hello (with its torch build's GPU architectures: `SimFaults.torch_arch_list`, so the fault
`torch-arch:LIST` reaches it), model and note first, then its steps and sync call sites as
simulated time passes. Where the scenario's probe names the job's `model` and `batch`, a step is
sampled as probe/sample.py samples one (the third, then one a minute): its "step" record says
"sampled" (slower) and a "sample" record follows with the matmul shapes and FLOPs torch's
counter would give that model (forward and backward), the batch, the loss (falling as the job
trains), the precision settings, the host-to-device copies and the GPU.

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
TORCH = "2.7.1"
# The probe's sampling (probe/sample.py: SAMPLE_FIRST_STEP, SAMPLE_EVERY_S): the third step,
# then the first to begin a minute after the last sampled one.
SAMPLE_FIRST_STEP = 3
SAMPLE_EVERY_S = 60.0
SAMPLED_SLOWER = 1.4  # a sampled step runs every operator through a dispatch mode
# Elements a matmul dimension must be a multiple of for the tensor cores, by dtype (sample.ALIGN)
ALIGN = {"float16": 8, "bfloat16": 8, "float8_e4m3fn": 16, "float8_e5m2": 16, "int8": 16}
MAX_SHAPES = 12
PINNED_BPS, PAGEABLE_BPS = 24e9, 6e9  # host-to-device copy rates: pinned, pageable (staged)


def sampled(k: int, step_s: float) -> bool:
    """Whether step k is one the probe samples."""
    every = math.ceil(SAMPLE_EVERY_S / step_s) + 1  # never two in a row (sample.py: n + 2)
    return k >= SAMPLE_FIRST_STEP and (k - SAMPLE_FIRST_STEP) % every == 0


def _matmuls(model: dict, body: str, head: str) -> list[tuple[int, int, int, str, bool]]:
    """(out, in, count, dtype, the output head) of the model's linear layers: each block's
    query-key-value, output projection and MLP, then the head over the vocabulary."""
    h, inter, layers = model["hidden"], model["intermediate"], model["layers"]
    ups = 2 if model.get("gated") else 1
    out = [(3 * h, h, layers, body, False), (h, h, layers, body, False)]
    out += [(ups * inter, h, layers, body, False), (h, inter, layers, body, False)]
    if model.get("vocab"):
        out.append((model["vocab"], h, 1, head, True))
    return out


def sample_record(spec: dict, k: int, t: float, wall_s: float, gpu: dict) -> dict:
    """The "sample" record of step k of a rank whose job trains `spec["model"]` on
    `spec["batch"]` (probe/schema.py), as probe/sample.py writes it: each linear layer's forward
    matmul and the backward's two (grad input, grad weight) with torch's 2·M·N·K FLOPs, attention
    (scaled_dot_product_attention: 4·s·d a token and layer forward, twice that backward)."""
    model, batch = spec["model"], spec["batch"]
    seq, ids = batch.get("seq", 1), batch.get("ids", True)  # ids: token ids (else images)
    rows = batch["samples"] * seq
    body = spec.get("dtype", "bfloat16")
    shapes, dtype_flops = [], {}
    bias = "addmm" if model.get("bias") else "mm"
    for n_out, n_in, count, dtype, head in _matmuls(model, body, spec.get("head_dtype", body)):
        for op, dims in (
            (bias if not head else "mm", dict(M=rows, N=n_out, K=n_in)),
            ("mm", dict(M=rows, N=n_in, K=n_out)),  # the gradient of the input
            ("mm", dict(M=n_out, N=n_in, K=rows)),  # the gradient of the weight
        ):
            flops = 2 * dims["M"] * dims["N"] * dims["K"] * count
            bad = [d for d, n in dims.items() if dtype in ALIGN and n % ALIGN[dtype]]
            forward = dims["M"] == rows and dims["N"] == n_out
            site = spec.get("head_site") if head and forward and bad else None
            shapes.append(
                dict(op=op, dtype=dtype, dims=dims, count=count, flops=flops, misaligned=bad)
                | dict(site=site)
            )
            dtype_flops[dtype] = dtype_flops.get(dtype, 0) + flops
    matmul = sum(x["flops"] for x in shapes)
    attention = 12 * model["layers"] * model["hidden"] * seq * rows
    shapes.sort(key=lambda x: (not x["misaligned"], -x["flops"]))
    return dict(
        kind="sample",
        t=t,
        step=k,
        wall_s=round(wall_s, 6),
        ops=40 * model["layers"] + 60,
        flops=matmul + attention,
        matmul_flops=matmul,
        misaligned_flops=sum(x["flops"] for x in shapes if x["misaligned"]),
        dtype_flops=dtype_flops,
        shapes=shapes[:MAX_SHAPES],
        transfers=_transfers(spec.get("h2d")),
        batch={
            "samples": batch["samples"],
            "tokens": rows if ids else None,
            "from": "the batch's input_ids" if ids else "batch",
        },
        loss=_loss(spec.get("loss", (7.5, 2.8, 4000.0)), k),
        backward=True,
        grad_scaler=True if spec.get("scaler") else None,
        autocast=dict(spec.get("autocast", {"cuda": "bfloat16"})),
        matmul_precision="high" if spec.get("tf32") else "highest",
        allow_tf32=bool(spec.get("tf32")),
        cudnn_tf32=True,
        capability=list(gpu["cc"]),
        device_name=gpu["name"],
    )


def _transfers(h2d: dict | None) -> dict:
    """The sampled step's host-to-device copies: the batch, pinned or pageable, non_blocking
    or not (a pageable non_blocking copy is staged: the rate of a pageable one)."""
    if not h2d:
        return {}
    nbytes, pinned = int(h2d["bytes"]), bool(h2d.get("pinned"))
    count = h2d.get("count", 1)
    return dict(
        h2d=dict(
            count=count,
            bytes=nbytes,
            seconds=round(nbytes / (PINNED_BPS if pinned else PAGEABLE_BPS) + 2e-5 * count, 6),
            pinned_bytes=nbytes if pinned else 0,
            non_blocking=count if h2d.get("non_blocking") else 0,
        )
    )


def _loss(spec: tuple[float, float, float], k: int) -> float:
    """The training loss at step k: from `start` towards `floor` over `steps` steps, a little
    noisy."""
    start, floor, steps = spec
    return round(floor + (start - floor) * math.exp(-k / steps) + 0.03 * math.sin(0.7 * k), 4)


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
            first = w is None
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
                step = dict(kind="step", t=end, step=w["k"], **rec, measured=measured, mem=mem)
                records.append(step)
                if spec.get("model") and sampled(w["k"], step_s):
                    records.append(self._sampled(step, end))
                w["k"] += 1
            if w["sites_at"] is None or t - w["sites_at"] >= PROBE_SITES_EVERY_S:
                w["sites_at"] = t
                records.append(dict(kind="sync_sites", t=t, sites=self._probe_sites(p, w)))
            records = records[-PROBE_BACKFILL:]
            if first and spec.get("model"):  # the file holds the sample before the view opened
                records = self._earlier_sample(records, origin, step_s, last) + records
            self._probe_append(w, records, p, len(ranks))

    def _sampled(self, step: dict, end: float) -> dict:
        """Make `step` a sampled one (slower, said so); its "sample" record."""
        extra = (SAMPLED_SLOWER - 1.0) * step["wall_s"]
        step.update(
            sampled=True,
            wall_s=step["wall_s"] + extra,
            t_host_s=step["t_host_s"] + extra,
            gpu_span_s=step["gpu_span_s"] + extra,
        )
        return sample_record(self.spec["probe"], step["step"], end, step["wall_s"], self.model)

    def _earlier_sample(
        self, records: list[dict], origin: float, step_s: float, last: int
    ) -> list[dict]:
        """The newest sampled step before `records` where they hold none (a job that ran
        before the view opened wrote it then)."""
        if any(r["kind"] == "sample" for r in records):
            return []
        k = next((n for n in range(last, SAMPLE_FIRST_STEP - 1, -1) if sampled(n, step_s)), None)
        if k is None:
            return []
        end = origin + k * step_s
        return [sample_record(self.spec["probe"], k, end, SAMPLED_SLOWER * step_s, self.model)]

    def _probe_head(self, p: SimProc, w: dict, world: int) -> list[dict]:
        t = p.create_time + 5.0
        params = int(self.spec["probe"].get("params", 1e9))
        cuda = p.torch_cuda
        return [
            dict(
                kind="hello",
                t=t,
                schema=PROBE_SCHEMA,
                pid=p.pid,
                start_ticks=w["ticks"],
                argv=list(p.cmdline),
                python="3.11.9",
                torch=f"{TORCH}+cu{cuda.replace('.', '')}",
                cuda=True,
                arch_list=list(self.torch_arch_list(cuda)),  # torch._C._cuda_getArchFlags()
                torch_cuda=cuda,
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
