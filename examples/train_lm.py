"""A tiny language model to try the probe's sampled steps on (CPU is enough): token batches as a
Hugging Face loop gives them (a dict of "input_ids" and "labels" from a DataLoader), an
embedding, one transformer encoder layer and an output layer over a vocabulary of 1001 tokens
(not a multiple of 8: the tensor cores' alignment rule flags it), AdamW.

    python examples/train_lm.py --steps 50
    GPUTOP_DIAG_PROBE_SAMPLE_S=2 gputop-diag watch --probe --no-tui --json --seconds 10 -- \\
        python examples/train_lm.py --seconds 8 --autocast bf16

`--autocast bf16|fp16` runs the forward under `torch.autocast` (on the CPU here, on the GPU with
`--device cuda`); `--scaler` scales the loss with `torch.amp.GradScaler`; `--tf32` sets
`torch.set_float32_matmul_precision("high")`. The probe reports the batch (samples and tokens a
second), the FLOPs, the precision, the misaligned shapes and the loss of a sampled step.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class Tokens(Dataset):
    """Random token sequences; each sample a dict, as a tokenizer's dataset gives them."""

    def __init__(self, size: int, seq: int, vocab: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.ids = torch.randint(0, vocab, (size, seq), generator=generator)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class TinyLM(nn.Module):
    def __init__(self, vocab: int, hidden: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layer = nn.TransformerEncoderLayer(hidden, 4, 2 * hidden, batch_first=True)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embed(input_ids)))


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps to run")
    parser.add_argument("--seconds", type=float, default=None, help="or run this long")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=1001)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--autocast", choices=sorted(DTYPES), default=None)
    parser.add_argument("--scaler", action="store_true", help="torch.amp.GradScaler")
    parser.add_argument("--tf32", action="store_true", help="fp32 matmul precision 'high'")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps is None and args.seconds is None:
        args.steps = 50
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    if args.tf32:
        torch.set_float32_matmul_precision("high")
    device = torch.device(args.device)
    data = Tokens(512, args.seq, args.vocab, args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True, drop_last=True)
    model = TinyLM(args.vocab, args.hidden).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type, enabled=args.scaler)
    dtype = DTYPES.get(args.autocast)
    step, started = 0, time.monotonic()
    while True:
        for batch in loader:
            batch = {k: v.to(device, non_blocking=True) for k, v in batch.items()}
            with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
                logits = model(batch["input_ids"])
            loss = nn.functional.cross_entropy(
                logits.float().reshape(-1, args.vocab), batch["labels"].reshape(-1)
            )
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            step += 1
            if step % 10 == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
            if _done(args, step, started):
                return


def _done(args: argparse.Namespace, step: int, started: float) -> bool:
    if args.steps is not None and step >= args.steps:
        return True
    return args.seconds is not None and time.monotonic() - started >= args.seconds


if __name__ == "__main__":
    main()
