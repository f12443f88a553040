"""Step-time overhead of ddprof.profile on a 2-rank gloo DDP job (CPU), per schedule phase.

    python benchmarks/capture_overhead.py [--steps 80 --repeats 4 --hidden 1024 --batch 64]

Runs the same job (``python tests/support/jobs.py ddp``) without ddprof and with ``ddprof.init``
+ ``ddprof.profile(wait=W, warmup=2, active=A, repeat=1)``, in ``--repeats`` pairs ordered ABBA (so a
slow drift of the machine cancels), and compares, pair by pair, the median step time of each phase with
the same steps of the run without ddprof:

* inactive (wait)  : profiler not yet started (Flight Recorder on, ``prof.step()`` called);
* warmup, active   : the Kineto profiler warming up / recording;
* inactive (after) : the cycle is done and written;
* transitions      : the three steps whose ``prof.step()`` prepares, starts, or stops+exports the trace.

Step 0 (process-group and DDP set-up) is left out. Medians are over both ranks; the overhead printed is
the median over pairs, with the lowest and highest pair beside it (that range is the noise).
On a shared 2-core machine that floor is several per cent, far above the 1 % target, so the script
also measures the two things ddprof adds to an inactive step, each in isolation and repeated enough to
be precise: ``Profile.step()`` (in this process) and the Flight Recorder's cost per collective (a
1-rank gloo all-reduce with the recorder on and off, each in a fresh process). Their sum per step, over
the unprofiled step time, is the inactive-phase overhead bound.

``ddprof launch`` (no edit to the script) is measured the same two ways: ``tests/support/plain_train.py`` (which
never imports ddprof) run with and without ``ddprof launch --active 0`` (the bootstrap installed, the
on-demand listener on, nothing ever recorded), ``--launch-pairs`` ABBA pairs; and in isolation, the cost
of one step boundary under the launcher (the optimizer step hook, the step count, ``Profile.step()``
with the on-demand listener's check, the throttled status file), the same boundary counted per batch of
a DataLoader (``--step-on-loader``: the iterator's wrapper, over a plain iterator), and of
``Profile.step()`` with ``on_demand=True``, plus the one-off start-up cost of the bootstrap in every
Python process.
``--launch-only`` skips the ``ddprof.profile`` runs.

The always-on step measures (``--measures-only`` for them alone): ``--measures-pairs`` ABBA pairs of the
same job under ``ddprof launch`` with and without ``--no-step-measures``, both recording the same window,
compared by ``ddprof check`` (the run with the measures against the one without as its baseline: the median
step time's Hodges-Lehmann shift and its interval) and by the job's own step times, and what
``StepMeasures.boundary()`` adds to a step, in isolation.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the test jobs are not installed
from tests.support.jobs import free_port, spawn_local  # noqa: E402


def phases(steps: int, wait: int, warmup: int, active: int) -> dict[str, list[int]]:
    start, record, end = wait, wait + warmup, wait + warmup + active
    return {
        "inactive (wait)": list(range(1, start - 1)),
        "warmup": list(range(start, record - 1)),
        "active": list(range(record, end - 1)),
        "inactive (after)": list(range(end, steps)),
        "transitions": [start - 1, record - 1, end - 1],
    }


def run_job(out: Path, name: str, args: list[str], profiled: bool) -> list[dict]:
    run_dir = out / name
    argv = ["ddp", "-o", str(run_dir), "--facts", str(out / f"{name}-facts" / "{rank}.json"), *args]
    if not profiled:
        argv.append("--no-profile")
    codes = spawn_local(argv, 2, out / f"{name}-logs")
    if any(codes.values()):
        raise SystemExit(f"{name}: ranks exited with {codes}; see {out / f'{name}-logs'}")
    return [json.loads((out / f"{name}-facts" / f"{r}.json").read_text()) for r in (0, 1)]


def inactive_step_cost(calls: int = 20000) -> float:
    """Seconds per ``Profile.step()`` while the schedule is waiting (single process, no training)."""
    import ddprof

    with tempfile.TemporaryDirectory() as tmp, ddprof.profile(Path(tmp) / "run", wait=calls + 10, ingest=False,
                                                              flight_recorder=False) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            prof.step()
        return (time.perf_counter() - t0) / calls


def collective_cost(fr_buffer: int, calls: int = 2000) -> float:
    """Seconds per 4 KB gloo all-reduce on a 1-rank group, Flight Recorder buffer ``fr_buffer`` (0: off)."""
    import torch
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    if fr_buffer:
        os.environ["TORCH_FR_BUFFER_SIZE"] = str(fr_buffer)
    dist.init_process_group("gloo", rank=0, world_size=1)
    t = torch.ones(1000)
    for _ in range(200):
        dist.all_reduce(t)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(calls):
            dist.all_reduce(t)
        times.append((time.perf_counter() - t0) / calls)
    dist.destroy_process_group()
    return statistics.median(times)


def flight_recorder_cost(pairs: int = 4) -> float:
    """Median over ``pairs`` of (recorder on - recorder off), seconds per collective."""
    diffs = []
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR_", "TORCH_NCCL_"))}
    for _ in range(pairs):
        on_off = []
        for buf in (20000, 0):
            out = subprocess.run([sys.executable, __file__, "--collective-cost", str(buf)], env=env, check=True,
                                 capture_output=True, text=True).stdout
            on_off.append(float(out.strip().splitlines()[-1]))
        diffs.append(on_off[0] - on_off[1])
    return statistics.median(diffs)


PLAIN = Path(__file__).resolve().parents[1] / "tests" / "support" / "plain_train.py"


def run_plain(out: Path, name: str, args: list[str], launched: bool) -> list[list[float]]:
    """Step times per rank of ``tests/support/plain_train.py`` on 2 ranks, under ``ddprof launch --active 0`` or not."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR_", "TORCH_NCCL_", "DDPROF_"))}
    env["OMP_NUM_THREADS"] = "1"
    times = out / f"{name}-{{rank}}.json"
    job = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2", str(PLAIN), *args,
           "--step-times", str(times)]
    if launched:
        job = [sys.executable, "-m", "ddprof", "launch", "-o", str(out / name), "--active", "0", "--", *job]
    proc = subprocess.run(job, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
    return [json.loads(Path(str(times).format(rank=r)).read_text()) for r in (0, 1)]


def launcher_boundary_cost(calls: int = 20000) -> float:
    """Seconds per step boundary under ``ddprof launch`` while nothing records (single process)."""
    import torch
    from ddprof.collectors.autocapture import Agent

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    with tempfile.TemporaryDirectory() as tmp:
        agent = Agent({"run_dir": str(Path(tmp) / "run"), "step_on": None,
                       "profile": {"active": 0, "ingest": False, "flight_recorder": False}})
        agent._optimizer_stepped(opt, (), {})  # the first step: starts ddprof.profile and the listener
        t0 = time.perf_counter()
        for _ in range(calls):
            agent._optimizer_stepped(opt, (), {})  # what torch's global post hook calls after each opt.step()
        cost = (time.perf_counter() - t0) / calls
        agent._at_exit()
    return cost


def loader_boundary_cost(calls: int = 20000) -> float:
    """Seconds per batch under ``ddprof launch --step-on-loader`` while nothing records (single process): a
    ``next()`` through the counting wrapper, less a plain ``next()`` of the same iterator."""
    import itertools

    import torch  # noqa: F401  (the profiler the first boundary starts needs it)
    from ddprof.collectors.autocapture import Agent, _CountedIterator

    with tempfile.TemporaryDirectory() as tmp:
        agent = Agent({"run_dir": str(Path(tmp) / "run"), "step_on": None, "step_on_loader": "m:L",
                       "profile": {"active": 0, "ingest": False, "flight_recorder": False}})
        counted = _CountedIterator(itertools.repeat(None), agent)
        next(counted), next(counted)  # the second next() ends step 0: starts ddprof.profile and the listener
        plain = itertools.repeat(None)
        t0 = time.perf_counter()
        for _ in range(calls):
            next(plain)
        t1 = time.perf_counter()
        for _ in range(calls):
            next(counted)
        cost = (time.perf_counter() - t1 - (t1 - t0)) / calls
        agent._at_exit()
    return cost


def on_demand_step_cost(calls: int = 20000) -> float:
    """Seconds per ``Profile.step()`` of ``ddprof.profile(on_demand=True, active=0)`` (single process)."""
    import ddprof

    with tempfile.TemporaryDirectory() as tmp, ddprof.profile(Path(tmp) / "run", active=0, on_demand=True,
                                                              ingest=False, flight_recorder=False) as prof:
        t0 = time.perf_counter()
        for _ in range(calls):
            prof.step()
        return (time.perf_counter() - t0) / calls


def bootstrap_startup_cost(runs: int = 7) -> float:
    """Median extra seconds of ``python -c pass`` with the bootstrap of ``ddprof launch`` on its path."""
    from ddprof.collectors.bootstrap import bootstrap_env, write_bootstrap

    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        config = write_bootstrap(run_dir, profile={}, step_on=None)
        base = {k: v for k, v in os.environ.items() if not k.startswith("DDPROF_")}
        envs = {False: base, True: base | bootstrap_env(run_dir, config, base)}
        got: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(runs):
            for boot, env in envs.items():
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-c", "pass"], env=env, check=True)
                got[boot].append(time.perf_counter() - t0)
    return statistics.median(got[True]) - statistics.median(got[False])


def measures_boundary_cost(calls: int = 20000) -> float:
    """Seconds the step measures add to a step boundary (single process): ``StepMeasures.boundary()``, what
    ``Profile.step()`` calls once per step (two clocks, the collective counters, one tuple queued)."""
    from ddprof.collectors.measures import StepMeasures

    with tempfile.TemporaryDirectory() as tmp:
        m = StepMeasures(Path(tmp) / "run", 0, 1)
        t0 = time.perf_counter()
        for _ in range(calls):
            m.boundary()
        cost = (time.perf_counter() - t0) / calls
        m.close()
    return cost


def ddp_timers_cost(steps: int = 300) -> float:
    """Seconds DDP's own per-iteration timers, switched on and read as the step measures do, add to a step of
    a 1-rank gloo DDP model (hidden 1024, batch 64): two identical models, one with the timers, stepped
    alternately in one process (so the machine's drift hits both), the median of the paired differences."""
    import torch
    import torch.distributed as dist
    from torch import nn

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=0, world_size=1)

    def model() -> nn.Module:
        torch.manual_seed(0)
        return nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(128, 1024), nn.ReLU(), nn.Linear(1024, 1024),
                                                                 nn.ReLU(), nn.Linear(1024, 10)))

    plain, timed = model(), model()
    timed._set_ddp_runtime_logging_sample_rate(1)
    x = torch.randn(64, 128)

    def step(m: nn.Module, read: bool) -> float:
        t0 = time.perf_counter()
        m(x).square().mean().backward()
        if read:
            m._get_ddp_logging_data()
        return time.perf_counter() - t0

    for _ in range(10):
        step(plain, False), step(timed, True)
    diffs = []
    for i in range(steps):
        if i % 2:
            a, b = step(plain, False), step(timed, True)
        else:
            b, a = step(timed, True), step(plain, False)
        diffs.append(b - a)
    dist.destroy_process_group()
    return statistics.median(diffs)


def _find_outcome(obj: object, rule_id: str) -> dict | None:
    if isinstance(obj, dict):
        if obj.get("id") == rule_id:
            return obj
        obj = list(obj.values())
    if isinstance(obj, list):
        for item in obj:
            found = _find_outcome(item, rule_id)
            if found is not None:
                return found
    return None


def measures_section(a: argparse.Namespace) -> None:
    """The always-on step measures: the same job under ``ddprof launch`` with and without them (ABBA pairs),
    both recording the same window (steps W+2 .. W+1+A), compared by ``ddprof check`` (the run with measures
    against the one without as its baseline: the median step time's shift and its interval) and by the job's
    own step times; and, in isolation, what they add to a step boundary."""
    job = ["--steps", str(a.steps), "--hidden", str(a.hidden), "--batch", str(a.batch)]
    window = ["--wait", str(a.wait), "--warmup", "2", "--active", str(a.active)]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR_", "TORCH_NCCL_", "DDPROF_"))}
    env["OMP_NUM_THREADS"] = "1"
    rows = []
    with tempfile.TemporaryDirectory(prefix="ddprof-overhead-measures-") as tmp:
        out = Path(tmp)
        for i in range(a.measures_pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            got: dict[bool, tuple[Path, float]] = {}
            for on in order:
                name = f"{'on' if on else 'off'}-{i}"
                times = out / f"{name}-{{rank}}.json"
                cmd = [sys.executable, "-m", "ddprof", "launch", "-o", str(out / name), *window,
                       *([] if on else ["--no-step-measures"]), "--", sys.executable, "-m", "torch.distributed.run",
                       "--standalone", "--nproc-per-node=2", str(PLAIN), *job, "--step-times", str(times)]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if proc.returncode != 0:
                    raise SystemExit(f"{name}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
                steps = [json.loads(Path(str(times).format(rank=r)).read_text())[2:] for r in (0, 1)]
                got[on] = (out / name, statistics.median(t for r in steps for t in r))
            for on in (False, True):
                deadline = time.monotonic() + 120
                while not (got[on][0] / "manifest.json").exists() and time.monotonic() < deadline:
                    time.sleep(0.5)
            check = subprocess.run([sys.executable, "-m", "ddprof", "check", str(got[True][0]), "--baseline",
                                    str(got[False][0]), "--format", "json"], env=env, capture_output=True, text=True)
            outcome = _find_outcome(json.loads(check.stdout), "step_time[all ranks]") if check.stdout.strip() else None
            rows.append((got[False][1], got[True][1], check.returncode, outcome))
    print(f"\nstep measures (ddprof launch with and without --no-step-measures, both recording steps "
          f"{a.wait + 2}-{a.wait + 1 + a.active}), tests/support/plain_train.py, 2 ranks, hidden {a.hidden}, batch "
          f"{a.batch}, {a.steps} steps, {a.measures_pairs} pairs; load average {os.getloadavg()[0]:.2f}")
    for i, (off, on, rc, outcome) in enumerate(rows):
        shift = (f"check exit {rc}: median step {outcome['baseline']:.0f} us -> {outcome['run']:.0f} us, shift "
                 f"{outcome['change']:+.0f} us ({100 * outcome['change'] / outcome['baseline']:+.2f} %), interval "
                 f"{outcome['interval']}" if outcome and outcome.get("baseline") else f"check exit {rc}")
        print(f"  pair {i}: job's own median step {off * 1e3:.2f} ms without, {on * 1e3:.2f} ms with "
              f"({(on / off - 1) * 100:+.2f} %); {shift}")
    ratios = sorted(on / off - 1 for off, on, _, _ in rows)
    print(f"  median over pairs (job's step times): {statistics.median(ratios) * 100:+.2f} % "
          f"(pairs {ratios[0] * 100:+.2f} % .. {ratios[-1] * 100:+.2f} %)")
    cost, ddp = isolated("measures"), isolated("ddp-timers")
    base = statistics.median(off for off, _, _, _ in rows)
    print(f"  in isolation: StepMeasures.boundary() {cost * 1e6:.2f} us per step = {cost / base * 100:.4f} % of the "
          "step (the writer thread, formatting and appending ~150 bytes a step every 0.2 s, runs beside it)")
    print(f"  in isolation: DDP's timers on and read once a step: {ddp * 1e6:+.1f} us per step = "
          f"{ddp / base * 100:+.3f} % of the step; together {(cost + ddp) / base * 100:+.3f} % (the bound on the "
          "overhead when the pairs above are too noisy to show it)")


COSTS = {"launcher": launcher_boundary_cost, "loader": loader_boundary_cost, "on-demand": on_demand_step_cost,
         "measures": measures_boundary_cost, "ddp-timers": ddp_timers_cost}


def isolated(name: str) -> float:
    """``COSTS[name]()`` measured in a fresh Python process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_FR_", "TORCH_NCCL_", "DDPROF_"))}
    out = subprocess.run([sys.executable, __file__, "--cost", name], env=env, check=True, capture_output=True,
                         text=True).stdout
    return float(out.strip().splitlines()[-1])


def launch_section(a: argparse.Namespace) -> None:
    job = ["--steps", str(a.steps), "--hidden", str(a.hidden), "--batch", str(a.batch)]
    pairs = []
    with tempfile.TemporaryDirectory(prefix="ddprof-overhead-launch-") as tmp:
        for i in range(a.launch_pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {launched: run_plain(Path(tmp), f"{'launch' if launched else 'plain'}-{i}", job, launched)
                   for launched in order}
            pairs.append((got[False], got[True]))
    steps = list(range(2, a.steps))  # step 0: DDP set-up; step 1: the launcher's capture starts at its end

    def med(runs: list[list[float]]) -> float:
        return statistics.median(r[s] for r in runs for s in steps)

    ratios = sorted(med(w) / med(b) - 1 for b, w in pairs)
    base = med([r for b, _ in pairs for r in b])
    print(f"\nddprof launch --active 0 (bootstrap + on-demand listener, never recording), tests/support/plain_train.py, "
          f"2 ranks, hidden {a.hidden}, batch {a.batch}, {a.steps} steps, {a.launch_pairs} pairs of runs")
    print(f"  step without ddprof {base * 1e3:.2f} ms, with {med([r for _, w in pairs for r in w]) * 1e3:.2f} ms: "
          f"overhead {statistics.median(ratios) * 100:+.2f}% (pairs {ratios[0] * 100:+.1f}% .. {ratios[-1] * 100:+.1f}%)")
    # each in a fresh process: a process captures once, and the launcher's agent stands aside (its boundary then
    # costs nothing) in a process where ddprof.profile ran before, as the measurements above did
    boundary, loader, on_demand = (isolated(name) for name in ("launcher", "loader", "on-demand"))
    startup = bootstrap_startup_cost()
    print(f"  step boundary under the launcher: {boundary * 1e6:.1f} us per step = {boundary / base * 100:.3f}% "
          f"of the step without ddprof (bound on the inactive overhead)")
    print(f"  step boundary per DataLoader batch (--step-on-loader): {loader * 1e6:.1f} us per batch = "
          f"{loader / base * 100:.3f}%")
    print(f"  Profile.step() with on_demand=True, nothing recording: {on_demand * 1e6:.1f} us per step = "
          f"{on_demand / base * 100:.3f}%")
    print(f"  bootstrap start-up, once per Python process of the job: {startup * 1e3:+.1f} ms (python -c pass: an "
          "upper bound; a rank importing torch loads most of the same standard modules anyway)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--wait", type=int, default=30)
    p.add_argument("--active", type=int, default=10)
    p.add_argument("--repeats", type=int, default=4, help="pairs of runs (without, with)")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--launch-pairs", type=int, default=2, help="pairs of runs (without, under ddprof launch)")
    p.add_argument("--launch-only", action="store_true", help="measure only ddprof launch")
    p.add_argument("--measures-pairs", type=int, default=2, help="pairs of runs (without, with the step measures)")
    p.add_argument("--measures-only", action="store_true", help="measure only the always-on step measures")
    p.add_argument("--collective-cost", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--cost", choices=sorted(COSTS), default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.cost is not None:
        print(COSTS[a.cost]())
        return 0
    if a.collective_cost is not None:
        print(collective_cost(a.collective_cost))
        return 0
    if a.measures_only:
        measures_section(a)
        return 0
    if a.launch_only:
        launch_section(a)
        return 0
    warmup = 2
    job = ["--steps", str(a.steps), "--hidden", str(a.hidden), "--batch", str(a.batch), "--bucket-cap-mb", "25",
           "--wait", str(a.wait), "--warmup", str(warmup), "--active", str(a.active)]
    groups = phases(a.steps, a.wait, warmup, a.active)
    pairs: list[tuple[list[list[float]], list[list[float]]]] = []
    with tempfile.TemporaryDirectory(prefix="ddprof-overhead-") as tmp:
        out = Path(tmp)
        for i in range(a.repeats):
            order = (False, True) if i % 2 == 0 else (True, False)  # ABBA
            got = {}
            for profiled in order:
                facts = run_job(out, f"{'prof' if profiled else 'base'}-{i}", job, profiled=profiled)
                got[profiled] = [f["step_s"] for f in facts]
                buckets = len(facts[0]["bucket_sizes"].split(","))
            pairs.append((got[False], got[True]))

    def med(runs: list[list[float]], idx: list[int]) -> float:
        return statistics.median(r[s] for r in runs for s in idx)

    print(f"2-rank gloo DDP, MLP hidden {a.hidden}, batch {a.batch}, {a.steps} steps, {a.repeats} pairs of runs; "
          f"schedule wait={a.wait} warmup={warmup} active={a.active} repeat=1")
    print(f"{'phase':<18}{'steps':>6}{'without ms':>12}{'with ms':>10}{'overhead':>10}   {'pairs range':<16}")
    base = [r for b, _ in pairs for r in b]
    for name, idx in groups.items():
        ratios = sorted(med(w, idx) / med(b, idx) - 1 for b, w in pairs)
        print(f"{name:<18}{len(idx):>6}{med(base, idx) * 1e3:>12.2f}{med([r for _, w in pairs for r in w], idx) * 1e3:>10.2f}"
              f"{statistics.median(ratios) * 100:>9.2f}%   {ratios[0] * 100:+.1f}% .. {ratios[-1] * 100:+.1f}%")
    inactive = statistics.median(r[s] for r in base for s in groups["inactive (wait)"])
    step_cost = inactive_step_cost()
    fr_cost = flight_recorder_cost()
    per_step = step_cost + fr_cost * buckets  # one all-reduce per DDP bucket per step
    print(f"load average {os.getloadavg()[0]:.2f}; step without ddprof (inactive steps): {inactive * 1e3:.2f} ms")
    print(f"Profile.step() while inactive: {step_cost * 1e6:.1f} us per step")
    print(f"Flight Recorder: {fr_cost * 1e6:+.2f} us per collective, {buckets} collective(s) per step")
    print(f"inactive-phase overhead bound: {per_step * 1e6:.1f} us per step = {per_step / inactive * 100:.3f}%")
    launch_section(a)
    measures_section(a)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
