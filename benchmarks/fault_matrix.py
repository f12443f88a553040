"""The fault matrix: real gloo jobs with one known fault each, and whether ``ddprof analyze`` names it.

    python benchmarks/fault_matrix.py [--reps 10] [--ranks 2] [--faults compute,input,...] [--quick]

Each repetition of each fault runs ``tests/support/jobs.py`` as ``--ranks`` gloo ranks on loopback (torch
on CPU, one thread a rank), profiled by ``ddprof.profile`` (``--steps`` steps, the last ``--active`` of
them recorded), with ``--fault KIND --fault-rank R`` (R = the last rank; :data:`tests.support.jobs.FAULTS`):

* ``compute``: rank R's batch is 4x larger (the same ops on more rows);
* ``input``: rank R's DataLoader takes 20 ms to fetch each batch;
* ``stalls``: rank R pauses 40 ms every 4th step, between forward and backward;
* ``contention``: a thread of rank R's process hashes memory throughout, on rank R's core (every rank is
  pinned to CPU ``rank mod cpus`` in this run; the other faults are not pinned): with more ranks than
  CPUs, the ranks pinned to R's CPU are slowed as much, and naming any of them, or a group of them slower
  together (:mod:`ddprof.analyses.slow_groups`), is right;
* ``machine``: another process, not the job's, busy throughout on rank R's CPU (every rank pinned as
  for ``contention``): the machine's load. Rank R is late (with more ranks than CPUs, the ranks pinned with
  it too: naming them or their group is right, as for ``contention``), its cause CPU contention, the
  verdict saying that its own threads took no more CPU than the others' (where the step measures tell);
  its ``check`` against a clean baseline must say the environment;
* ``comm``: rank R's DDP communication hook waits 20 ms before each bucket's all-reduce;
* ``pipeline``: a GPipe pipeline of ``--ranks`` stages, stage R with 4x the layers;
* ``moe``: a mixture-of-experts layer (an expert per rank, ``all_to_all_single`` with uneven splits) whose
  router sends 60 % of every rank's tokens to rank R's expert: load imbalance, not a straggler, and the
  first verdict must say so (``rank R receives …× the mean …: expert load imbalance``);
* ``clean``: the DDP job and the pipeline job with no fault (alternately);
* ``pinned``: the DDP job with no fault, every rank pinned as for ``contention`` (ranks bound alike form
  the groups :mod:`ddprof.analyses.slow_groups` tests: none may be named).

A run is analysed with ``ddprof analyze --format json``; its first verdict is *right* when it names the
fault's rank and cause class (``compute``, ``input``, ``stalls``, ``contention``, ``communication``,
``pipeline imbalance``: the class in parentheses after the rank, :mod:`ddprof.analyses.straggler_cause`),
and, on a clean run, a *false alarm* when any verdict names a straggler or a stage holding the pipeline
back and does not put it on the machine (a pinned rank whose core did the others' work 1.5× slower, or
whose CPU other processes took, from the step measures: said apart, beside the false alarms). Per
fault: first-verdict right %, and over all runs, per cause class, precision (of the runs whose first
verdict named that class, the share that had a fault of that class, with the right rank) and recall (of
the runs with that fault, the share whose first verdict named it, with the right rank). ``ddprof check`` is run on the first
repetition: a clean run against another clean run of the same job (must pass), and each faulty run
against a clean baseline of its job (should fail naming the rank; its ``cause`` field where check's
JSON has one, else its exit code and first line). ``--clean-pairs``: also every clean run against every
other clean run of its job (:func:`clean_pairs`).

Runs are written to a temporary directory (``--keep DIR`` to keep them there), never into the repository;
``--rescore DIR`` analyses and scores again the runs a ``--keep DIR`` holds (after a change to the analyses;
its seconds a run are then the analysis alone, of the traces ingested again).
``--quick``: 2 repetitions of compute, input and stalls, and clean: what CI runs
(``tests/integration/test_fault_matrix.py``). 24 steps are traced: the straggler rule names a rank only when
it is late beyond the run's own noise, and a rank that pauses every 4th step is told from chance over
about 24 steps, not 12 (2 ranks, 3 pauses in 12 steps: p ≈ 0.1).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # the test jobs are not installed
from tests.support.jobs import FAULTS, spawn_local  # noqa: E402

#: What the first verdict must name for each fault (the cause class).
EXPECTED = {"compute": "compute", "input": "input", "stalls": "stalls", "contention": "contention",
            "machine": "contention",
            "comm": "communication", "pipeline": "pipeline imbalance", "moe": "expert load imbalance", "clean": None,
            "pinned": None}
#: The runs with no fault: a false alarm is any verdict naming a rank or a group.
HEALTHY = ("clean", "pinned")
#: The fault's own arguments beside ``--fault KIND``.
FAULT_ARGS = {"compute": ["--fault-factor", "4"], "input": ["--fault-ms", "20"],
              "stalls": ["--fault-ms", "40", "--fault-every", "4"], "contention": ["--pin"], "machine": ["--pin"],
              "comm": ["--fault-ms", "20"], "pipeline": ["--fault-factor", "4"]}
DDP_ARGS = ["--hidden", "512", "--batch", "64", "--loader"]
PIPE_ARGS = ["--pipe-width", "512", "--batch", "64", "--microbatches", "4"]
MOE_ARGS = ["--tokens", "600", "--hot-share", "0.6", "--moe-width", "256"]
_NAMED = re.compile(r"^rank (\d+) (?:is the straggler|pauses now and then|\(pipeline stage \d+ of \d+\) holds the "
                    r"pipeline back)"
                    r"(?: \(([a-zA-Z ]+?)(?::|\)))?")
_GROUP = re.compile(r"^ranks ([\d, ]+) \([^)]*\) are slower together"
                    r"(?: \(rank \d+ of them: ([a-zA-Z ]+?)(?::|\)))?")
_CLASS = {"CPU contention": "contention"}
#: A verdict that puts the rank's lateness on the machine (:func:`ddprof.analyses.straggler_cause.cpu_clause`):
#: on a healthy run, a rank the machine slowed, said so, and no false alarm.
_MACHINE = re.compile(r"the machine's (?:load|doing)")
_LOAD = re.compile(r"^rank (\d+) receives [\d.]+× the mean .*: (expert load imbalance)")


@dataclass
class Outcome:
    fault: str
    rep: int
    ranks: int
    rank: int | None
    first: str
    named_ranks: list[int] | None  # one rank, or a group slower together
    named_class: str | None
    seconds: float
    right: bool = False
    alarm: bool = False
    machine: bool = False  # a healthy run whose verdict named a rank and put it on the machine
    causes: list[dict[str, Any]] = field(default_factory=list)


def named(verdict: str) -> tuple[list[int] | None, str | None]:
    """(ranks, cause class) a straggler, group, pipeline-stage or load verdict names; (None, None) for any
    other."""
    m = _NAMED.match(verdict) or _GROUP.match(verdict)
    if not m:
        load = _LOAD.match(verdict)
        return ([int(load.group(1))], load.group(2)) if load else (None, None)
    cls = m.group(2)
    return [int(r) for r in m.group(1).split(", ")], _CLASS.get(cls, cls) if cls else None


def job_args(fault: str, rep: int, ranks: int, steps: int, active: int) -> tuple[str, list[str]]:
    """The job and its arguments for one run of ``fault`` (clean alternates DDP and pipeline)."""
    kind = fault if fault not in HEALTHY else "none"
    sched = ["--steps", str(steps), "--wait", "1", "--warmup", "1", "--active", str(active), "--wait-ingest"]
    if fault == "moe":  # a router sending 60 % of every rank's tokens to the last rank's expert
        return "moe", ["moe", *sched, *MOE_ARGS, "--hot-rank", str(ranks - 1)]
    job = FAULTS[kind] if fault != "clean" else ("ddp" if rep % 2 == 0 else "pipeline")
    if fault == "pinned":  # the DDP job with every rank bound to CPU rank mod cpus, no busy thread
        return "ddp", ["ddp", *sched, *DDP_ARGS, "--fault", "none", "--pin"]
    extra = DDP_ARGS if job == "ddp" else PIPE_ARGS
    fault_args = ["--fault", kind, "--fault-rank", str(ranks - 1), *FAULT_ARGS.get(fault, [])] if fault != "clean" \
        else (["--fault", "none"] if job == "ddp" else [])
    return job, [job, *sched, *extra, *fault_args]


def run_job(argv: list[str], ranks: int, run_dir: Path, timeout: float) -> None:
    codes = spawn_local([argv[0], "-o", str(run_dir), *argv[1:]], ranks, run_dir.parent / f"{run_dir.name}-logs",
                        timeout=timeout)
    if any(codes.values()):
        log = (run_dir.parent / f"{run_dir.name}-logs" / "rank-0.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{argv}: exit codes {codes}\n{log}")


def ddprof_cli(*args: str) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).with_name("ddprof")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "ddprof"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=600)


def analyse(run_dir: Path) -> dict[str, Any]:
    out = ddprof_cli("analyze", str(run_dir), "--format", "json")
    if out.returncode not in (0, 1):
        raise RuntimeError(f"ddprof analyze {run_dir}: exit {out.returncode}\n{out.stderr[-2000:]}")
    return json.loads(out.stdout)


def check(run_dir: Path, baseline: Path) -> dict[str, Any]:
    """``ddprof check RUN --baseline BASE``: its exit code, its status and cause where its JSON has them, and
    the first line of its summary."""
    out = ddprof_cli("check", str(run_dir), "--baseline", str(baseline), "--format", "json")
    try:
        doc = json.loads(out.stdout)
    except json.JSONDecodeError:
        return {"exit": out.returncode, "status": None, "cause": None,
                "first": (out.stdout or out.stderr).strip().splitlines()[:1]}
    summary = doc.get("summary") or []
    cause = doc.get("cause")  # {"class": ..., "summary": ...} where check names a likely cause
    said = f"{cause.get('class')}: {cause.get('summary')}" if isinstance(cause, dict) else cause
    return {"exit": out.returncode, "status": doc.get("status"), "cause": said, "first": summary[0] if summary else ""}


def one(fault: str, rep: int, ranks: int, root: Path, steps: int, active: int, timeout: float,
        run: bool = True) -> Outcome:
    """One run of ``fault`` (``run=False``: the run already in ``root``, analysed again), scored."""
    job, argv = job_args(fault, rep, ranks, steps, active)
    run_dir = root / f"{fault}-{rep:02d}"
    t0 = time.monotonic()
    if run:
        run_job(argv, ranks, run_dir, timeout)
    report = analyse(run_dir if run else src(run_dir))  # kept runs: their traces, ingested again
    seconds = time.monotonic() - t0
    verdicts = report.get("verdicts") or [""]
    who, cls = named(verdicts[0])
    o = Outcome(fault, rep, ranks, None if fault in HEALTHY else ranks - 1, verdicts[0], who, cls, seconds,
                causes=report["stragglers"].get("causes", []))
    if fault in HEALTHY:
        ranked = [v for v in verdicts if named(v)[0] is not None]
        o.machine = any(_MACHINE.search(v) for v in ranked)
        o.alarm = any(not _MACHINE.search(v) for v in ranked)
        o.right = not o.alarm
    else:
        o.right = bool(who) and set(who) <= faulty_ranks(fault, ranks) and cls == EXPECTED[fault]
    return o


def faulty_ranks(fault: str, ranks: int) -> set[int]:
    """The ranks the fault slows: the last rank; for contention and the machine's load (every rank pinned to
    CPU ``rank mod cpus``), every rank pinned to the busy thread's or process's CPU, as the last rank's: with
    more ranks than CPUs, they share it and each is as slowed (4 ranks on 2 CPUs: ranks 1 and 3)."""
    if fault in ("contention", "machine") and hasattr(os, "sched_getaffinity"):
        cpus = len(os.sched_getaffinity(0)) or 1
        return {r for r in range(ranks) if r % cpus == (ranks - 1) % cpus}
    return {ranks - 1}


def table(outcomes: list[Outcome]) -> str:
    faults = list(dict.fromkeys(o.fault for o in outcomes))
    lines = ["| fault | ranks | reps | first verdict right | precision | recall | mean s a run |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for f in faults:
        mine = [o for o in outcomes if o.fault == f]
        right = sum(o.right for o in mine)
        if f in HEALTHY:
            alarms, machine = sum(o.alarm for o in mine), sum(o.machine and not o.alarm for o in mine)
            lines.append(f"| {f} | {mine[0].ranks} | {len(mine)} | {100 * right / len(mine):.0f} % "
                         f"(false alarms {alarms}/{len(mine)} = {100 * alarms / len(mine):.0f} %"
                         + (f"; a rank the machine slowed, said so: {machine}" if machine else "") + ") | | | "
                         f"{sum(o.seconds for o in mine) / len(mine):.1f} |")
            continue
        cls = EXPECTED[f]
        claimed = [o for o in outcomes if o.named_class == cls]
        # a claim is right when its run's fault has that class (contention and machine share one)
        hits = sum(EXPECTED.get(o.fault) == cls and set(o.named_ranks or ()) <= faulty_ranks(o.fault, o.ranks)
                   for o in claimed)
        precision = hits / len(claimed) if claimed else None
        recall = right / len(mine)
        lines.append(f"| {f} ({cls}) | {mine[0].ranks} | {len(mine)} | {100 * right / len(mine):.0f} % | "
                     f"{'-' if precision is None else f'{100 * precision:.0f} %'} | {100 * recall:.0f} % | "
                     f"{sum(o.seconds for o in mine) / len(mine):.1f} |")
    total = [o for o in outcomes if o.fault not in HEALTHY]
    if total:
        lines.append(f"| all faults | | {len(total)} | {100 * sum(o.right for o in total) / len(total):.0f} % | | | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--ranks", type=int, default=min(4, os.cpu_count() or 2))
    ap.add_argument("--faults", default=",".join(EXPECTED), help="comma-separated, of: " + ", ".join(EXPECTED))
    ap.add_argument("--steps", type=int, default=28)
    ap.add_argument("--active", type=int, default=24)
    ap.add_argument("--quick", action="store_true", help="2 reps of compute, input, stalls and clean")
    ap.add_argument("--no-check", action="store_true", help="skip ddprof check")
    ap.add_argument("--clean-pairs", action="store_true",
                    help="also check every clean run against every other clean run of its job")
    ap.add_argument("--keep", type=Path, default=None, help="write the runs here (default: a temporary dir)")
    ap.add_argument("--json", type=Path, default=None, help="also write every outcome here")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a job may take")
    ap.add_argument("--rescore", type=Path, default=None,
                    help="analyse and score again the runs a --keep DIR holds (after a change to the analyses)")
    args = ap.parse_args(argv)
    if args.rescore:
        return rescore(args)
    faults = [f for f in args.faults.split(",") if f]
    if args.quick:
        faults, args.reps = ["compute", "input", "stalls", "clean"], 2
    unknown = set(faults) - set(EXPECTED)
    if unknown:
        ap.error(f"unknown faults {sorted(unknown)}")
    root = args.keep or Path(tempfile.mkdtemp(prefix="ddprof-fault-matrix-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"runs under {root}; {args.ranks} ranks, {args.reps} reps, {args.steps} steps ({args.active} traced); "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    outcomes: list[Outcome] = []
    try:
        for rep in range(args.reps):  # faults interleaved: a slow drift of the machine touches them all
            for f in faults:
                o = one(f, rep, args.ranks, root, args.steps, args.active, args.timeout)
                outcomes.append(o)
                mark = "ok " if o.right else "BAD"
                print(f"{mark} {f:<10} rep {rep}: {o.first[:150]}", flush=True)
        print(f"\nload average at the end {os.getloadavg()[0]:.1f}\n")
        print(table(outcomes))
        wrong = Counter((o.fault, o.named_class) for o in outcomes if not o.right)
        if wrong:
            print("\nwrong first verdicts (fault, class named):", dict(wrong))
        checks = [] if args.no_check else run_checks(faults, root, args)
        if args.clean_pairs:
            checks += clean_pairs(root)
        if args.json:
            args.json.write_text(json.dumps({"outcomes": [o.__dict__ for o in outcomes], "checks": checks}, indent=1))
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)
    return 0


def rescore(args: argparse.Namespace) -> int:
    """The runs ``--keep`` left in ``args.rescore``, analysed and scored again, and their checks."""
    root = args.rescore
    found = sorted(d for d in root.iterdir() if re.fullmatch(r"[a-z]+-\d\d", d.name) and (d / "manifest.json").exists())
    outcomes = []
    for d in found:
        fault, rep = d.name.rsplit("-", 1)
        ranks = json.loads((d / "manifest.json").read_text())["world_size"]
        outcomes.append(one(fault, int(rep), ranks, root, args.steps, args.active, args.timeout, run=False))
    outcomes.sort(key=lambda o: (list(EXPECTED).index(o.fault), o.rep))
    print(f"{len(outcomes)} runs under {root} analysed again\n")
    print(table(outcomes))
    wrong = Counter((o.fault, o.named_class) for o in outcomes if not o.right)
    if wrong:
        print("\nwrong first verdicts (fault, class named):", dict(wrong))
    if not args.no_check and outcomes:
        args.ranks = outcomes[0].ranks
        run_checks(list(dict.fromkeys(o.fault for o in outcomes)), root, args)
    if args.clean_pairs:
        clean_pairs(root)
    return 0


def src(run_dir: Path) -> Path:
    """The run dir as this ddprof reads it: its traces (``raw/``) ingested into it again (unchanged traces
    are reused; a run kept by an earlier ddprof is read by this one), its step measures (``measures/``)
    beside them."""
    if (run_dir / "raw").is_dir():
        out = ddprof_cli("ingest", str(run_dir / "raw"), "-o", str(run_dir), "-q")
        if out.returncode not in (0, 3):
            raise RuntimeError(f"ddprof ingest {run_dir / 'raw'}: exit {out.returncode}\n{out.stderr[-2000:]}")
    return run_dir


def run_checks(faults: list[str], root: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """``ddprof check``: clean against clean (each job), each faulty run of rep 0 against a clean baseline
    (the clean runs are made once: a directory that holds one already is used as it is)."""
    base: dict[str, list[Path]] = {}
    for job in ("ddp", "pipeline"):
        for i in range(2):
            d = root / f"check-clean-{job}-{i}"
            argv = job_args("clean", 0 if job == "ddp" else 1, args.ranks, args.steps, args.active)[1]
            if not (d / "manifest.json").exists():
                run_job(argv, args.ranks, d, args.timeout)
            base.setdefault(job, []).append(d)
    rows = []
    for job, (a, b) in base.items():
        rows.append({"run": f"clean {job}", "baseline": f"clean {job}", **check(src(a), src(b))})
    for f in faults:
        if f not in FAULTS or not (root / f"{f}-00").exists():
            continue  # clean, and moe: no clean run of its job to be the baseline
        job = FAULTS[f]
        rows.append({"run": f, "baseline": f"clean {job}", **check(src(root / f"{f}-00"), src(base[job][0]))})
    print("\n| run | baseline | check exit | cause | first line |\n|---|---|---:|---|---|")
    for r in rows:
        first = r["first"] if isinstance(r["first"], str) else " ".join(r["first"])
        print(f"| {r['run']} | {r['baseline']} | {r['exit']} | {(r['cause'] or '-')[:120]} | {first[:160]} |")
    return rows


def clean_pairs(root: Path) -> list[dict[str, Any]]:
    """``ddprof check`` of every clean run against every other clean run of its job (``clean-NN`` and the
    check baselines ``check-clean-JOB-I`` that ``root`` holds), each ordered pair once: the false-regression
    rate of the gate on a machine with no fault, and the cause it gave where it failed (the environment
    fails by default, as ``environment_changed``, not a regression; a regression on a clean pair is a false
    alarm)."""
    by_job: dict[str, list[Path]] = {"ddp": [], "pipeline": []}
    for d in sorted(root.iterdir()):
        m = re.fullmatch(r"clean-(\d\d)|check-clean-(ddp|pipeline)-\d", d.name)
        if m and (d / "manifest.json").exists():
            by_job[m.group(2) or ("ddp" if int(m.group(1)) % 2 == 0 else "pipeline")].append(d)
    rows = []
    for job, runs in by_job.items():
        for a in runs:
            for b in runs:
                if a != b:
                    rows.append({"job": job, "run": a.name, "baseline": b.name, **check(src(a), src(b))})
    print("\n| job | clean pairs | ok | environment changed | regression (false alarm): its cause |"
          "\n|---|---:|---:|---:|---|")
    for job in by_job:
        mine = [r for r in rows if r["job"] == job]
        if not mine:
            continue
        env = sum(r["status"] == "environment_changed" for r in mine)
        other = Counter((r["cause"] or "-").split(":")[0] for r in mine
                        if r["exit"] != 0 and r["status"] != "environment_changed")
        print(f"| {job} | {len(mine)} | {sum(r['exit'] == 0 for r in mine)} | {env} | "
              f"{', '.join(f'{k} {v}' for k, v in sorted(other.items())) or '-'} |")
    return rows


if __name__ == "__main__":
    raise SystemExit(main())
