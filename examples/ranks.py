"""A distributed CPU job (gloo) whose ranks can be made uneven, to see the straggler and the hang:

    gputop-diag watch --probe -- torchrun --standalone --nproc-per-node 4 examples/ranks.py
    gputop-diag watch --probe -- torchrun --standalone --nproc-per-node 4 examples/ranks.py \\
        --slow-rank 2 --slow-ms 50            # rank 2 computes 50 ms longer every step
    ... examples/ranks.py --starve-rank 1 --starve-ms 40   # rank 1's loader is slow
    ... examples/ranks.py --stop-rank 3 --stop-after 100   # rank 3 stops stepping (a hang)
    ... examples/ranks.py --die-rank 3 --die-after 100     # rank 3 is killed

Each step runs `--step-ms` of work in the model's forward (a sleep standing in for the device's
kernels, so that four ranks on two cores keep their timing) and a small MLP, on a batch from a
DataLoader; the gradients are averaged by DistributedDataParallel (`--mode ddp`, the default) or
by an explicit `torch.distributed.all_reduce` per parameter (`--mode allreduce`).
"""

from __future__ import annotations

import argparse
import os
import signal
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Batches(Dataset):
    def __init__(self, size: int, delay_s: float) -> None:
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(size, 32, generator=generator)
        self.y = torch.randn(size, 1, generator=generator)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]

    def __getitems__(self, indices: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
        if self.delay_s:
            time.sleep(self.delay_s)  # the whole batch at once: one slow read per step
        return [self[i] for i in indices]


class Model(nn.Module):
    def __init__(self, work_s: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 128), nn.ReLU(), nn.Linear(128, 1))
        self.work_s = work_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.work_s)
        return self.net(x)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=0, help="0: run until --seconds")
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--step-ms", type=float, default=10.0)
    parser.add_argument("--mode", choices=("ddp", "allreduce"), default="ddp")
    parser.add_argument("--slow-rank", type=int, default=-1)
    parser.add_argument("--slow-ms", type=float, default=50.0)
    parser.add_argument("--starve-rank", type=int, default=-1)
    parser.add_argument("--starve-ms", type=float, default=40.0)
    parser.add_argument("--stop-rank", type=int, default=-1)
    parser.add_argument("--stop-after", type=int, default=100)
    parser.add_argument("--die-rank", type=int, default=-1)
    parser.add_argument("--die-after", type=int, default=100)
    parser.add_argument(
        "--times", metavar="FILE", help="rank 0 writes each step's end (perf_counter s), at the end"
    )
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    work_s = args.step_ms / 1000 + (args.slow_ms / 1000 if rank == args.slow_rank else 0.0)
    starve_s = args.starve_ms / 1000 if rank == args.starve_rank else 0.0
    torch.manual_seed(0)
    model: nn.Module = Model(work_s)
    if args.mode == "ddp":
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Batches(1 << 16, starve_s), batch_size=16, shuffle=False)
    started = time.monotonic()
    ends = [time.perf_counter()]  # the loop's start, then each step's end (--times)
    step = 0
    while True:
        for x, y in loader:
            if rank == args.stop_rank and step == args.stop_after:
                while True:  # stuck: no more steps, never enters the next collective
                    time.sleep(1)
            if rank == args.die_rank and step == args.die_after:
                os.kill(os.getpid(), signal.SIGKILL)
            loss = nn.functional.mse_loss(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            if args.mode == "allreduce":
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= dist.get_world_size()
            optimizer.step()
            step += 1
            ends.append(time.perf_counter())
            if rank == 0 and step % 100 == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
            if args.steps:
                done = step >= args.steps
            elif step % 20 == 0:  # every rank stops at the same step: rank 0's clock decides
                flag = torch.tensor([float(time.monotonic() - started >= args.seconds)])
                dist.broadcast(flag, 0)
                done = bool(flag.item())
            else:
                done = False
            if done:
                if args.times and rank == 0:
                    with open(args.times, "w") as f:
                        f.write("".join(f"{t:.6f}\n" for t in ends))
                dist.destroy_process_group()
                return


if __name__ == "__main__":
    main()
