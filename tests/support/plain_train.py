"""A small gloo DDP training script that knows nothing of ddprof, for the tests of ``ddprof launch``.

    torchrun --standalone --nproc-per-node 2 tests/support/plain_train.py --steps 6 --slow-rank 1
    python tests/support/plain_train.py --spawn 2 --steps 6          # ranks started by torch.multiprocessing.spawn

``--optimizers 2``: an SGD optimizer for the first layer and an Adam optimizer for the rest, both stepped
every iteration (SGD first). ``--optimizers 0``: no optimizer; each iteration is one call of
:func:`plain_steps.train_step`, which updates the weights by hand (``ddprof launch --step-on
plain_steps:train_step`` counts the steps). ``--slow-rank R`` sleeps ``--slow-ms`` before each forward on
rank R (from iteration ``--slow-from`` on); ``--step-ms`` sleeps on every rank. ``--stop-file F``: a long-running job (up to ``--steps``) that
ends once ``F`` exists, every rank at the same iteration (the ranks all-reduce a stop flag each step).
``--loader``: the batches come from a ``torch.utils.data.DataLoader`` (one epoch of ``--steps`` batches) instead
of one tensor reused; ``--accumulate K`` steps the optimizers every K batches (gradient accumulation).
``--step-times F`` (``{rank}`` becomes the rank) writes each iteration's duration in seconds as JSON, for
``benchmarks/capture_overhead.py``; ``--hidden`` sets the width of the hidden layers (256).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import plain_steps
import torch
import torch.distributed as dist
from torch import nn


def optimizers(model: nn.Module, count: int) -> list[torch.optim.Optimizer]:
    params = list(model.parameters())
    if count == 1:
        return [torch.optim.SGD(params, lr=0.01)]
    if count == 2:
        return [torch.optim.SGD(params[:2], lr=0.01), torch.optim.Adam(params[2:], lr=0.001)]
    return []


def train(rank: int, world: int, args: argparse.Namespace) -> None:
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    h = args.hidden
    model = nn.parallel.DistributedDataParallel(
        nn.Sequential(nn.Linear(128, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10)))
    opts = optimizers(model, args.optimizers)
    data = torch.randn(args.batch, 128, generator=torch.Generator().manual_seed(rank))
    if args.loader:
        samples = torch.randn(args.steps * args.batch, 128, generator=torch.Generator().manual_seed(rank))
        loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(samples), batch_size=args.batch)
        batches = (batch for (batch,) in loader)
    else:
        batches = (data for _ in range(args.steps))
    step_s = []
    t0 = time.perf_counter()
    for i, data in enumerate(batches):
        if args.stop_file:
            stop = torch.tensor([float(os.path.exists(args.stop_file))])
            dist.all_reduce(stop, dist.ReduceOp.MAX)
            if stop.item():
                break
        time.sleep(args.step_ms / 1000)
        if rank == args.slow_rank and i >= args.slow_from:
            time.sleep(args.slow_ms / 1000)
        if not opts:
            plain_steps.train_step(model, data)
        else:
            model(data).square().mean().backward()
            if (i + 1) % args.accumulate == 0:
                for opt in opts:
                    opt.step()
                for opt in opts:
                    opt.zero_grad(set_to_none=True)
        step_s.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
    if args.step_times:
        with open(args.step_times.format(rank=rank), "w") as out:
            json.dump(step_s, out)
    dist.barrier()  # gloo aborts a rank whose peers tear down while it still writes
    dist.destroy_process_group()


def spawned(rank: int, world: int, args: argparse.Namespace) -> None:
    train(rank, world, args)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=6)
    p.add_argument("--optimizers", type=int, choices=[0, 1, 2], default=1)
    p.add_argument("--slow-rank", type=int, default=None)
    p.add_argument("--slow-ms", type=float, default=60.0)
    p.add_argument("--slow-from", type=int, default=0, help="the slow rank sleeps from this iteration on")
    p.add_argument("--step-ms", type=float, default=0.0)
    p.add_argument("--stop-file", default=None)
    p.add_argument("--step-times", default=None)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--loader", action="store_true", help="batches from a torch.utils.data.DataLoader")
    p.add_argument("--accumulate", type=int, default=1, help="optimizer step every this many batches")
    p.add_argument("--spawn", type=int, default=0, help="start this many ranks with torch.multiprocessing.spawn")
    args = p.parse_args()
    if args.spawn:
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", os.environ.get("PLAIN_TRAIN_PORT", "29533"))
        torch.multiprocessing.spawn(spawned, args=(args.spawn, args), nprocs=args.spawn)
    else:
        train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)


if __name__ == "__main__":
    main()
