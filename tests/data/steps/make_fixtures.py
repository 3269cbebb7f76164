"""Make the held-out step logs of tests/test_step_rate.py: small real processes whose step rate
is set by sleeps print their progress as real trainers do, and what they print is captured as it
arrives, each chunk with the time it came (seconds from the start). Run once; the JSON files
beside this script are what the tests read.

    python tests/data/steps/make_fixtures.py            # all of them (about two minutes)
    python tests/data/steps/make_fixtures.py hf-bar     # one

Each file: `about` (how it was made), `step_ends` (each step's end, seconds from the start, as
the process itself took them: the truth), `pause_steps` (the steps that ended a pause, left out
of the truth as the rate is the job's while it steps), `chunks` ([seconds, text], as read from
the pipe: a chunk may end inside a line, as a tqdm redraw does).

The `hf-*` logs need `transformers` and `accelerate` (a CPU `Trainer` on a 2-layer model); the
`tqdm-*` logs need `tqdm`.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# A loop whose steps take STEP_S (uniform jitter of +-JITTER), one pause of PAUSE_S at step
# PAUSE_AT, printing as PRINT says; each step's end goes to the side file.
LOOP = r"""
import json, os, random, sys, time
cfg = json.loads(sys.argv[1]); rnd = random.Random(cfg["seed"])
ends = open(cfg["ends"], "w")
def step_time(i):
    s = cfg["step_s"] * (1 + cfg["jitter"] * (2 * rnd.random() - 1))
    return s + (cfg["pause_s"] if i == cfg["pause_at"] else 0.0)
if cfg["print"] == "tqdm":
    from tqdm import tqdm
    for i in tqdm(range(1, cfg["steps"] + 1)):
        time.sleep(step_time(i)); ends.write(f"{time.time()}\n")
elif cfg["print"] == "deepspeed":
    import logging
    log = logging.getLogger("DeepSpeed"); log.setLevel(logging.INFO); log.propagate = False
    h = logging.StreamHandler(sys.stdout)
    h.setFormatter(logging.Formatter(
        "[%(asctime)s] [%(levelname)s] [%(filename)s:%(lineno)d:%(funcName)s] %(message)s"))
    log.addHandler(h)
    t0 = time.time()
    for i in range(1, cfg["steps"] + 1):
        time.sleep(step_time(i)); ends.write(f"{time.time()}\n")
        if i % cfg["every"] == 0:
            log.info(f"[Rank 0] step={i}, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]")
            sps = 32 * i / (time.time() - t0)
            log.info(f"[Rank 0] epoch=0/micro_step={4 * i}/global_step={i}, "
                     f"RunningAvgSamplesPerSec={sps:.4f}, CurrSamplesPerSec={sps:.4f}, "
                     "MemAllocated=1.2GB, MaxMemAllocated=3.4GB")
else:
    for i in range(1, cfg["steps"] + 1):
        time.sleep(step_time(i)); ends.write(f"{time.time()}\n")
        if i % cfg["every"] == 0:
            print(f"step {i} | loss {2.0 / i ** 0.5:.4f} | lr 1.0e-04", flush=True)
"""

# A Hugging Face Trainer on the CPU: a 2-layer model whose forward sleeps STEP_S; each step's
# end from a callback.
HF = r"""
import json, sys, time, torch
from torch import nn
from transformers import Trainer, TrainerCallback, TrainingArguments
cfg = json.loads(sys.argv[1])
class Data(torch.utils.data.Dataset):
    def __len__(self): return cfg["examples"]
    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(8, generator=g), "labels": torch.randn(1, generator=g)}
class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    def forward(self, x, labels=None):
        time.sleep(cfg["step_s"])
        out = self.net(x)
        return {"loss": nn.functional.mse_loss(out, labels), "logits": out}
class Ends(TrainerCallback):
    def __init__(self): self.f = open(cfg["ends"], "w")
    def on_step_end(self, args, state, control, **kw): self.f.write(f"{time.time()}\n")
args = TrainingArguments(
    output_dir=cfg["out"], per_device_train_batch_size=4, num_train_epochs=cfg["epochs"],
    logging_steps=cfg["every"], save_strategy="no", report_to=[], use_cpu=True,
    disable_tqdm=cfg["no_bar"], dataloader_num_workers=0)
Trainer(model=Model(), args=args, train_dataset=Data(), callbacks=[Ends()]).train()
"""

CASES = {
    # the filed case: every 10 steps at 14.24 steps/s
    "print-every10": dict(kind="loop", print="plain", every=10, step_s=1 / 14.24, jitter=0.2,
                          steps=700, pause_at=0, pause_s=0.0, seed=1),
    "print-every7-pause": dict(kind="loop", print="plain", every=7, step_s=0.45, jitter=0.3,
                               steps=140, pause_at=70, pause_s=20.0, seed=2),
    "tqdm-fast": dict(kind="loop", print="tqdm", every=1, step_s=0.011, jitter=0.3,
                      steps=3000, pause_at=0, pause_s=0.0, seed=3),
    "tqdm-slow-pause": dict(kind="loop", print="tqdm", every=1, step_s=1.6, jitter=0.2,
                            steps=40, pause_at=20, pause_s=15.0, seed=4),
    "deepspeed-every10": dict(kind="loop", print="deepspeed", every=10, step_s=0.12, jitter=0.2,
                              steps=500, pause_at=0, pause_s=0.0, seed=5),
    # the Trainer: its bar and its log dicts in one stream (2>&1, as watch -- CMD and Slurm's
    # one output file have them)
    "hf-bar": dict(kind="hf", step_s=0.1, every=10, examples=480, epochs=2, no_bar=False,
                   verbosity=None),
    # its log dicts alone, with its banner at INFO: the steps per epoch are said
    "hf-dicts-banner": dict(kind="hf", step_s=0.1, every=10, examples=480, epochs=2,
                            no_bar=True, verbosity="info"),
    # its log dicts alone (the bar elsewhere): the closing metrics only
    "hf-dicts-only": dict(kind="hf", step_s=0.05, every=10, examples=240, epochs=2, no_bar=True,
                          verbosity=None),
}  # fmt: skip


def capture(argv: list[str], env: dict[str, str], stderr_too: bool) -> tuple[float, list]:
    """Run argv; its output as [seconds, text] chunks as they came, and when it started."""
    t0 = time.time()
    p = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT if stderr_too else subprocess.DEVNULL,
        env=env,
    )
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    chunks = []
    while True:
        sel.select()
        data = os.read(p.stdout.fileno(), 65536)
        if not data:
            break
        chunks.append([round(time.time() - t0, 4), data.decode("utf-8", errors="replace")])
    p.wait()
    if p.returncode != 0:
        raise SystemExit(f"{argv[:3]}: exit {p.returncode}")
    return t0, chunks


def make(name: str, case: dict) -> None:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp:
        ends_path = os.path.join(tmp, "ends.txt")
        cfg = dict(case, ends=ends_path, out=os.path.join(tmp, "out"))
        if case["kind"] == "hf":
            if case["verbosity"]:
                env["TRANSFORMERS_VERBOSITY"] = case["verbosity"]
            # the dicts go to stdout (print / tqdm.write), the bar and the banner to stderr:
            # with neither, stderr is left out (a file of its own)
            argv = [sys.executable, "-c", HF, json.dumps(cfg)]
            stderr_too = not case["no_bar"] or bool(case["verbosity"])
            t0, chunks = capture(argv, env, stderr_too=stderr_too)
            about = (
                f"a real transformers Trainer (CPU, 2-layer model, forward sleeps "
                f"{case['step_s']} s), logging_steps={case['every']}, "
                f"{'its bar on stderr in the same stream' if not case['no_bar'] else 'no bar'}"
                + (
                    f", TRANSFORMERS_VERBOSITY={case['verbosity']}, stderr in the same stream"
                    if case["verbosity"]
                    else ""
                )
            )
            pause_steps: list[int] = []
        else:
            argv = [sys.executable, "-c", LOOP, json.dumps(cfg)]
            t0, chunks = capture(argv, env, stderr_too=True)
            about = (
                f"a loop printing as {case['print']} does, every {case['every']} step(s), steps "
                f"of {case['step_s']:.4g} s +-{case['jitter']:.0%}"
            )
            if case["pause_s"]:
                about += f", a pause of {case['pause_s']} s at step {case['pause_at']}"
            pause_steps = [case["pause_at"]] if case["pause_s"] else []
        with open(ends_path) as f:
            ends = [round(float(x) - t0, 4) for x in f.read().split()]
    doc = {"about": about, "step_ends": ends, "pause_steps": pause_steps, "chunks": chunks}
    (HERE / f"{name}.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"{name}: {len(ends)} steps, {len(chunks)} chunks", file=sys.stderr)


if __name__ == "__main__":
    for name in sys.argv[1:] or list(CASES):
        make(name, CASES[name])
