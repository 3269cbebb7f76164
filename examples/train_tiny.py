"""A tiny CPU training job to try the probe on: a small MLP, a real DataLoader over a synthetic
dataset, AdamW.

    python examples/train_tiny.py --steps 200
    python -m gputop_diag.probe examples/train_tiny.py --seconds 30 --slow-loader --workers 2
    gputop-diag watch --probe -- python examples/train_tiny.py --seconds 60 --sync-every 1
    torchrun --nproc-per-node 2 examples/train_tiny.py --steps 100   # gloo, explicit all_reduce

`--slow-loader` makes the workers sleep in `__getitem__` (the job is input-bound);
`--sync-every K` reads the loss with `.item()` every K steps (0: only once, at the end) and
prints `step N loss X` then; under torchrun (WORLD_SIZE > 1) the gradients are averaged with
`torch.distributed.all_reduce` on the gloo backend, or by DistributedDataParallel with `--ddp`.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class Synthetic(Dataset):
    """A fixed random regression problem; `delay_s` of sleep per sample when asked."""

    def __init__(self, size: int, features: int, delay_s: float, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.x = torch.randn(size, features, generator=generator)
        weights = torch.randn(features, 1, generator=generator)
        self.y = self.x @ weights + 0.1 * torch.randn(size, 1, generator=generator)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[index], self.y[index]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps to run")
    parser.add_argument("--seconds", type=float, default=None, help="or run this long")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    parser.add_argument(
        "--slow-loader",
        nargs="?",
        type=float,
        const=0.002,
        default=0.0,
        metavar="SECONDS",
        help="workers sleep this long per sample (default 0.002 s: input-bound)",
    )
    parser.add_argument(
        "--worker-start",
        choices=("fork", "spawn", "forkserver"),
        default=None,
        help="how DataLoader workers start (default: the platform's)",
    )
    parser.add_argument("--sync-every", type=int, default=10, metavar="K", help=".item() every K")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--ddp", action="store_true", help="DistributedDataParallel under torchrun")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.steps is None and args.seconds is None:
        args.steps = 100
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        dist.init_process_group("gloo")

    features = 16
    dataset = Synthetic(4096, features, args.slow_loader, args.seed)
    sampler = DistributedSampler(dataset, seed=args.seed) if world > 1 else None
    loader = DataLoader(
        dataset,
        batch_size=args.batch_size,
        shuffle=sampler is None,
        sampler=sampler,
        num_workers=args.workers,
        generator=torch.Generator().manual_seed(args.seed),
        persistent_workers=args.workers > 0,
        multiprocessing_context=args.worker_start if args.workers > 0 else None,
    )
    model: nn.Module = nn.Sequential(
        nn.Linear(features, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, args.hidden),
        nn.ReLU(),
        nn.Linear(args.hidden, 1),
    )
    if world > 1 and args.ddp:
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    step = 0
    loss = None
    started = time.monotonic()
    epoch = 0
    while not _done(args, step, started):
        if sampler is not None:
            sampler.set_epoch(epoch)
        for x, y in loader:
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if world > 1 and not args.ddp:
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world
            optimizer.step()
            step += 1
            if args.sync_every and step % args.sync_every == 0:
                value = loss.item()
                if rank == 0:
                    print(f"step {step} loss {value:.6f}", flush=True)
            if _done(args, step, started):
                break
        epoch += 1
    if not args.sync_every and loss is not None and rank == 0:
        print(f"step {step} loss {loss.item():.6f}", flush=True)
    if world > 1:
        dist.destroy_process_group()


def _done(args: argparse.Namespace, step: int, started: float) -> bool:
    if args.steps is not None and step >= args.steps:
        return True
    if args.seconds is None:
        return False
    done = time.monotonic() - started >= args.seconds
    if dist.is_initialized():  # the ranks stop together, or one would wait for the other forever
        flag = torch.tensor([float(done)])
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        done = bool(flag[0] > 0)
    return done


if __name__ == "__main__":
    main()
