"""Small gloo/CPU training jobs profiled with ddprof, for the tests, the samples and the benchmark (not
installed with ddprof: run this file by its path).

Run one rank per process with the launcher's environment (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...)::

    torchrun --standalone --nproc-per-node 4 tests/support/jobs.py ddp -o runs/ddp --slow-rank 2
    torchrun --standalone --nproc-per-node 4 tests/support/jobs.py pipeline -o runs/gpipe

``ddp``: an MLP under DistributedDataParallel; ``--slow-rank R`` makes rank R sleep ``--slow-ms`` before
each forward. ``moe``: one mixture-of-experts layer, an expert per rank, its tokens routed unevenly (``--hot-share``
to ``--hot-rank``) with ``all_to_all_single``. ``pipeline``: one MLP split into ``WORLD_SIZE`` stages, GPipe schedule (all forwards of the
micro-batches, then all backwards), activations and gradients sent with ``send``/``recv``.
``--fault KIND --fault-rank R`` injects one fault with a known cause into rank R (:data:`FAULTS`; the
fault matrix of ``benchmarks/fault_matrix.py`` runs each): ``compute`` (its batch ``--fault-factor`` times
larger: the same ops on more rows), ``input`` (its DataLoader takes ``--fault-ms`` to fetch each batch),
``stalls`` (a pause of ``--fault-ms`` every ``--fault-every``-th step, between forward and backward, as a
garbage collection would), ``contention`` (a thread of its process hashing memory throughout, beside the
training thread on the rank's core), ``machine`` (another process, not the job's, busy throughout on the
rank's CPUs: the machine's load; with ``--pin``, on the rank's core alone), ``comm`` (its DDP communication hook waits ``--fault-ms`` before
each bucket's all-reduce), ``pipeline`` (stage R holds ``--fault-factor`` times the layers of the
others); ``none`` is the clean run of the same job. With any ``--fault`` (``none`` too) every rank of the
``ddp`` job all-reduces through the same Python communication hook, waiting only on a ``comm`` fault's
rank, so a faulty run and a clean one run the same ops. ``--loader`` feeds the ``ddp`` job's batches
through a DataLoader (always, with a fault), ``--alternate`` puts an ``input`` or ``compute`` fault in the
odd steps only (the even steps are the same job without it, run at the same time: a counterfactual that
the machine's drift between two runs does not move), ``--pin`` keeps each rank on CPU ``rank mod cpus`` (so a
busy thread contends with the ranks of its CPU only), ``--pipe-width W`` makes every stage W wide.
``--crash-rank R --crash-step K`` kills rank R (``os._exit``) at step K, to show that the other ranks'
data stays usable. ``--facts FILE`` (``{rank}`` in the name becomes the rank) writes what the rank knows
independently of the trace (DDP bucket sizes, bytes sent per peer, step times) as JSON, for tests and
benchmarks. :func:`spawn_local` starts the ranks of a job on this machine without torchrun.

Other scripts import it with the repository on ``sys.path`` (``from tests.support.jobs import spawn_local``); the
ranks run it as ``python tests/support/jobs.py ...`` (:data:`JOBS`) and import ddprof as installed.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import ddprof

#: This file: what the ranks run (``[sys.executable, str(JOBS), "ddp", ...]``).
JOBS = Path(__file__).resolve()
DDP_LAYERS = (256, 512, 512, 10)
PIPE_WIDTHS = (64, 96, 128, 80, 32)  # stage s maps PIPE_WIDTHS[s] -> PIPE_WIDTHS[s + 1]
#: The faults ``--fault`` injects, and the job each runs in.
FAULTS = {"none": "ddp", "compute": "ddp", "input": "ddp", "stalls": "ddp", "contention": "ddp", "comm": "ddp",
          "pipeline": "pipeline", "machine": "ddp"}


class SlowBatches(torch.utils.data.Dataset):
    """``n`` random batches of ``rows x width`` (one item is one batch), each fetched after ``delay_s``
    of waiting, as a loader reading from slow storage does; ``fault_rows``: the rows of a faulty batch
    (default ``rows``). ``alternate``: only the odd batches are faulty (late, ``fault_rows``)."""

    def __init__(self, n: int, rows: int, width: int, seed: int, delay_s: float = 0.0,
                 fault_rows: int | None = None, alternate: bool = False) -> None:
        self.n, self.rows, self.width, self.seed, self.delay_s = n, rows, width, seed, delay_s
        self.fault_rows, self.alternate = fault_rows or rows, alternate

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        fault = not self.alternate or i % 2 == 1
        if self.delay_s and fault:
            time.sleep(self.delay_s)
        rows = self.fault_rows if fault else self.rows
        return torch.randn(rows, self.width, generator=torch.Generator().manual_seed(self.seed * 10_000 + i))


def busy_thread(stop: threading.Event) -> threading.Thread:
    """A daemon thread that hashes 1 MiB over and over until ``stop``: hashlib lets go of the GIL while
    it hashes, so it takes CPU time from the threads beside it on its core, not the interpreter."""
    block = os.urandom(1 << 20)

    def spin() -> None:
        while not stop.is_set():
            hashlib.sha256(block).digest()

    t = threading.Thread(target=spin, name="busy", daemon=True)
    t.start()
    return t


def delayed_allreduce_hook(delay_s: float) -> Any:
    """A DDP communication hook: wait ``delay_s``, then all-reduce the bucket and average it (DDP's own
    default, late). Unannotated: DDP refuses a hook whose annotations are not its own classes, and this
    module's annotations are strings."""

    def hook(state, bucket):
        buf = bucket.buffer().div_(dist.get_world_size())
        if delay_s:
            time.sleep(delay_s)
        return dist.all_reduce(buf, async_op=True).get_future().then(lambda f: f.value()[0])

    return hook


def mlp(widths: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:], strict=False)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def faulty(args: argparse.Namespace, rank: int, kind: str) -> bool:
    return args.fault == kind and rank == args.fault_rank


def run_ddp(args: argparse.Namespace, prof: Any, rank: int) -> dict[str, Any]:
    torch.manual_seed(0)
    widths = (DDP_LAYERS[0], *(args.hidden,) * 2, DDP_LAYERS[-1]) if args.hidden else DDP_LAYERS
    model = nn.parallel.DistributedDataParallel(mlp(widths), bucket_cap_mb=args.bucket_cap_mb)
    if args.fault:  # every rank of a fault's job all-reduces through the same hook: the ops are the same
        model.register_comm_hook(None, delayed_allreduce_hook(args.fault_ms / 1000 if faulty(args, rank, "comm")
                                                              else 0.0))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    rows = args.batch * (int(args.fault_factor) if faulty(args, rank, "compute") else 1)
    data = torch.randn(rows, widths[0], generator=torch.Generator().manual_seed(rank))
    batches = iter(torch.utils.data.DataLoader(
        SlowBatches(args.steps, args.batch, widths[0], rank,
                    args.fault_ms / 1000 if faulty(args, rank, "input") else 0.0, rows, args.alternate),
        batch_size=None)) if args.loader or args.fault else None
    step_s = []
    for i in range(args.steps):
        t0 = time.perf_counter()
        if rank == args.crash_rank and i == args.crash_step:
            os._exit(17)  # a rank dying without any cleanup
        if rank == args.slow_rank:
            time.sleep(args.slow_ms / 1000)
        if batches is not None:
            data = next(batches)
        loss = model(data).square().mean()
        if faulty(args, rank, "stalls") and i % args.fault_every == args.fault_every - 1:
            time.sleep(args.fault_ms / 1000)  # a pause of the whole interpreter, as a full collection
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        prof.step()
        step_s.append(time.perf_counter() - t0)
    logging_data = model._get_ddp_logging_data()
    return {"param_bytes": [p.numel() * p.element_size() for p in model.module.parameters()],
            "bucket_sizes": str(logging_data.get("rebuilt_bucket_sizes") or logging_data.get("bucket_sizes")),
            "step_s": step_s}


def run_pipeline(args: argparse.Namespace, prof: Any, rank: int, world: int) -> dict[str, Any]:
    """GPipe on ``world`` stages: forward all micro-batches, then backward all, then one optimizer step."""
    if not args.pipe_width and world + 1 > len(PIPE_WIDTHS):  # --pipe-width: every stage alike, any number
        raise SystemExit(f"pipeline example supports at most {len(PIPE_WIDTHS) - 1} stages without --pipe-width")
    torch.manual_seed(rank)
    d_in, d_out = (args.pipe_width,) * 2 if args.pipe_width else (PIPE_WIDTHS[rank], PIPE_WIDTHS[rank + 1])
    depth = 1 + (int(args.fault_factor) - 1) * faulty(args, rank, "pipeline")  # hidden layers
    stage = mlp((d_in, *(d_out,) * depth, d_out))
    opt = torch.optim.SGD(stage.parameters(), lr=0.01)
    first, last = rank == 0, rank == world - 1
    sent: dict[int, list[int]] = {}
    step_s = []

    def send(t: torch.Tensor, peer: int) -> None:
        dist.send(t.contiguous(), peer)
        sent.setdefault(peer, []).append(t.numel() * t.element_size())

    for _ in range(args.steps):
        t0 = time.perf_counter()
        inputs, outputs = [], []
        for _m in range(args.microbatches):
            if first:
                x = torch.randn(args.batch, d_in)
            else:
                x = torch.empty(args.batch, d_in)
                dist.recv(x, rank - 1)
                x.requires_grad_()
            y = stage(x)
            if not last:
                send(y.detach(), rank + 1)
            inputs.append(x)
            outputs.append(y)
        for m in range(args.microbatches):
            if last:
                outputs[m].square().mean().backward()
            else:
                grad = torch.empty(args.batch, d_out)
                dist.recv(grad, rank + 1)
                outputs[m].backward(grad)
            if not first:
                grad_in = inputs[m].grad
                if grad_in is None:  # x.requires_grad_() was set, so backward must have filled it
                    raise RuntimeError(f"pipeline stage {rank}: microbatch {m} input has no gradient after backward")
                send(grad_in, rank - 1)
        opt.step()
        opt.zero_grad(set_to_none=True)
        prof.step()
        step_s.append(time.perf_counter() - t0)
    return {"stage_widths": [d_in, d_out], "sent_bytes": {str(k): v for k, v in sent.items()}, "step_s": step_s}


def moe_splits(world: int, tokens: int, hot_rank: int, hot_share: float) -> list[int]:
    """Tokens a rank routes to each rank's expert: ``hot_share`` of ``tokens`` to ``hot_rank``, the rest evenly
    to the others (the remainder to the first of them)."""
    hot = round(tokens * hot_share)
    others = [r for r in range(world) if r != hot_rank]
    each, extra = divmod(tokens - hot, len(others)) if others else (0, 0)
    splits = [each] * world
    splits[hot_rank] = hot
    if others:
        splits[others[0]] += extra
    return splits


def run_moe(args: argparse.Namespace, prof: Any, rank: int, world: int) -> dict[str, Any]:
    """One mixture-of-experts layer per step, an expert per rank: a router sends ``--hot-share`` of every
    rank's ``--tokens`` to rank ``--hot-rank``'s expert (dispatch: ``all_to_all_single`` with uneven splits),
    each expert runs on the tokens it received (its time grows with them), and a second all-to-all returns
    them (combine)."""
    torch.manual_seed(rank)
    width = args.moe_width
    expert = mlp((width, 4 * width, width))
    send = moe_splits(world, args.tokens, args.hot_rank, args.hot_share)
    recv = [moe_splits(world, args.tokens, args.hot_rank, args.hot_share)[rank] for _ in range(world)]
    x = torch.randn(args.tokens, width)
    step_s = []
    with torch.no_grad():
        for _ in range(args.steps):
            t0 = time.perf_counter()
            got = torch.empty(sum(recv), width)
            dist.all_to_all_single(got, x, recv, send)
            out = expert(got)
            for _r in range(args.expert_repeat - 1):
                out = expert(got)
            back = torch.empty(args.tokens, width)
            dist.all_to_all_single(back, out, send, recv)
            prof.step()
            step_s.append(time.perf_counter() - t0)
    row = width * x.element_size()
    return {"send_splits": send, "recv_splits": recv, "row_bytes": row, "step_s": step_s}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn_local(args: list[str], world_size: int, log_dir: Path, *, timeout: float = 600.0) -> dict[int, int]:
    """Run ``python tests/support/jobs.py ARGS`` as ``world_size`` ranks on this machine, with the
    environment torchrun would give them; each rank's output goes to ``log_dir/rank-N.log``. Returns the
    exit status per rank (-9 for a rank killed at ``timeout``)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR_", "TORCH_NCCL_", "DDPROF_"))}
    procs = []
    for rank in range(world_size):
        env = base | {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
                      "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        with open(log_dir / f"rank-{rank}.log", "wb") as out:
            procs.append(subprocess.Popen([sys.executable, str(JOBS), *args], env=env,
                                          stdout=out, stderr=subprocess.STDOUT))
    deadline = time.monotonic() + timeout
    codes = {}
    for rank, proc in enumerate(procs):
        try:
            codes[rank] = proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            codes[rank] = proc.wait()
    return codes


def capture_sample(dest: Path, job: list[str], world_size: int) -> None:
    """Run an example job under ``ddprof launch`` + torchrun and copy its ``raw/`` capture to ``dest/raw``
    (the store is re-derived with ``ddprof ingest dest/raw -o RUN_DIR``). Used by ``sample_traces/*/make.py``."""
    from ddprof.collectors.launch import launch

    with tempfile.TemporaryDirectory(prefix="ddprof-sample-") as tmp:
        run_dir = Path(tmp) / "run"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world_size}",
               str(JOBS), *job, "--wait-ingest"]
        rc = launch(run_dir, cmd, environ={**os.environ, "OMP_NUM_THREADS": "1"})
        if rc != 0:
            raise SystemExit(f"the job failed with exit status {rc}")
        run = ddprof.open_run(run_dir)
        if run.ranks != list(range(world_size)):
            raise SystemExit(f"capture incomplete: ranks {run.ranks}, warnings {run.manifest['collector']['warnings']}")
        shutil.rmtree(dest / "raw", ignore_errors=True)
        shutil.copytree(run_dir / "raw", dest / "raw")


class _NoProfile:
    def step(self) -> None:
        pass


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python tests/support/jobs.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("job", choices=["ddp", "pipeline", "moe"])
    p.add_argument("-o", "--run-dir", type=Path, default=None, help="default: $DDPROF_RUN_DIR (ddprof launch)")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--hidden", type=int, default=0, help="ddp: hidden width (default 512)")
    p.add_argument("--bucket-cap-mb", type=float, default=0.5)
    p.add_argument("--slow-rank", type=int, default=None)
    p.add_argument("--slow-ms", type=float, default=50.0)
    p.add_argument("--fault", choices=sorted(FAULTS), default=None, help="a fault with a known cause (module doc)")
    p.add_argument("--fault-rank", type=int, default=1)
    p.add_argument("--fault-ms", type=float, default=20.0, help="input, stalls, comm: the delay")
    p.add_argument("--fault-factor", type=float, default=4.0, help="compute: batch rows; pipeline: layers")
    p.add_argument("--fault-every", type=int, default=4, help="stalls: one step in this many")
    p.add_argument("--loader", action="store_true", help="ddp: batches from a DataLoader")
    p.add_argument("--alternate", action="store_true", help="input, compute: the fault in odd steps only")
    p.add_argument("--pin", action="store_true", help="each rank on CPU rank mod cpus")
    p.add_argument("--pipe-width", type=int, default=0, help="pipeline: every stage this wide")
    p.add_argument("--crash-rank", type=int, default=None)
    p.add_argument("--crash-step", type=int, default=0)
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--tokens", type=int, default=600, help="moe: tokens per rank per step")
    p.add_argument("--hot-rank", type=int, default=1, help="moe: the rank whose expert the router favours")
    p.add_argument("--hot-share", type=float, default=0.6, help="moe: share of tokens sent to --hot-rank")
    p.add_argument("--moe-width", type=int, default=64, help="moe: token width (floats)")
    p.add_argument("--expert-repeat", type=int, default=4, help="moe: expert passes per step (its compute time)")
    p.add_argument("--wait", type=int, default=1)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--active", type=int, default=2)
    p.add_argument("--no-profile", action="store_true", help="run the same job without ddprof")
    p.add_argument("--wait-ingest", action="store_true")
    p.add_argument("--ingest-timeout", type=float, default=120.0, help="seconds rank 0 waits for the others")
    p.add_argument("--facts", type=Path, default=None, help="JSON file of facts; {rank} becomes the rank")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.fault and FAULTS[args.fault] != args.job:
        raise SystemExit(f"--fault {args.fault} is a fault of the {FAULTS[args.fault]} job")
    rank_env = int(os.environ.get("RANK", "0"))
    if args.pin and hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank_env % len(cpus)]})  # before any thread: they inherit it
    stop = threading.Event()
    if args.fault == "contention" and rank_env == args.fault_rank:
        busy_thread(stop)
    other = None
    if args.fault == "machine" and rank_env == args.fault_rank:  # on the CPUs this process may use (inherited)
        other = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    if not args.no_profile:
        ddprof.init(args.run_dir)  # before the process group: switches the Flight Recorder on
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    capture: Any = contextlib.nullcontext(_NoProfile()) if args.no_profile else ddprof.profile(
        args.run_dir, wait=args.wait, warmup=args.warmup, active=args.active, wait_ingest=args.wait_ingest,
        ingest_timeout_s=args.ingest_timeout)
    with capture as prof:
        if args.job == "ddp":
            facts = run_ddp(args, prof, rank)
        elif args.job == "moe":
            facts = run_moe(args, prof, rank, world)
        else:
            facts = run_pipeline(args, prof, rank, world)
        dist.barrier()  # gloo aborts a rank whose peers tear down while it still exports
    if args.facts:
        path = Path(str(args.facts).format(rank=rank))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"rank": rank, "world_size": world, "pid": os.getpid(), **facts}))
    stop.set()
    if other is not None:
        other.kill()
        other.wait()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
