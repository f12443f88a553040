"""What-if projections against the truth: generated runs with slow ranks (one straggler, or a whole
pipeline stage), a host's slow link (its own link between its GPUs 3x slower) or poor overlap (the
backward's all-reduces issued after it) whose step without the fault is known (``ddprof synth``'s
truth.json, ``without_fault``: the same run simulated again with no rank or link slow and its all-reduces
overlapped), over data-parallel, tensor × data-parallel and pipeline × data-parallel (1F1B) shapes of 8 to
256 ranks; the projection of the straggler removed (the slow ranks named), of every transfer at its
typical (a slow link restored), or of the all-reduces overlapped with the backward, beside the truth, and
the mean and worst error.

    python benchmarks/whatif_counterfactual.py [--max-ranks 256]

The requirement: within 2 % on every shape.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from ddprof.analyses.whatif.projections import whatif

import ddprof
from ddprof.synth import Spec, generate


def shapes(max_ranks: int) -> list[tuple[str, Spec]]:
    out = []
    for n in (8, 32, 64, 128, 256):
        if n > max_ranks:
            break
        out += [(f"dp{n}, rank {n // 2 + 1} slow", Spec(ranks=n, steps=3, slow={n // 2 + 1: 1.3})),
                (f"tp2 x dp{n // 2}, rank 5 slow", Spec(ranks=n, steps=3, tp=2, slow={5: 1.3})),
                (f"pp2 x dp{n // 2} 1f1b, rank {n - 2} slow", Spec(ranks=n, steps=3, pp=2, slow={n - 2: 1.3})),
                (f"pp4 x dp{n // 4} 1f1b, stage 1 heavy",
                 Spec(ranks=n, steps=3, pp=4, slow={r: 1.3 for r in range(n // 4, n // 2)}))]
        if n >= 32:  # 4 hosts of 8 or more: host 1 is one host in four or fewer
            out.append((f"tp2 x dp{n // 2}, host 1 link 3x", Spec(ranks=n, steps=3, tp=2, slow_link={1: 3.0})))
        out += [(f"dp{n}, poor overlap", Spec(ranks=n, steps=3, poor_overlap=True)),
                # buckets of 64 MB take longer than a chunk of the backward: they queue, and the step
                # depends on where each one's gradients are ready
                (f"tp2 x dp{n // 2}, poor overlap, 64 MB", Spec(ranks=n, steps=3, tp=2, poor_overlap=True,
                                                                bucket_bytes=64 << 20))]
        if n == 32:  # a stage a host
            out.append(("pp4 x dp8 1f1b, host 1 link 3x", Spec(ranks=n, steps=3, pp=4, slow_link={1: 3.0})))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--max-ranks", type=int, default=256)
    a = ap.parse_args()
    errors = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (name, spec) in enumerate(shapes(a.max_ranks)):
            out = Path(tmp) / str(i)
            truth = generate(spec, out)["without_fault"]
            run = ddprof.ingest([out / "traces"], out / "run")
            t0 = time.process_time()
            w = whatif(run.events(), stragglers=sorted(spec.slow) or None, comm_k=[], host_gaps=False,
                       rebalance=False, attribute=False, critical=False, typical_links=bool(spec.slow_link),
                       grad_overlap=spec.poor_overlap)
            dt = time.process_time() - t0
            if not w.explained:
                print(f"{name:36} NOT EXPLAINED: {w.reason}")
                continue
            got, want = w.projections[0].step_s * 1e6, truth["without_fault_step_us"]
            err = 100 * (got - want) / want
            errors.append(abs(err))
            print(f"{name:36} step {truth['step_us']:9.1f} µs; without the fault {want:9.1f} µs, projected "
                  f"{got:9.1f} µs: error {err:+.2f} % ({dt:.1f} s CPU)", flush=True)
    if errors:
        print(f"{len(errors)} shapes: mean |error| {sum(errors) / len(errors):.2f} %, worst {max(errors):.2f} % "
              f"(at most 2 % required)")


if __name__ == "__main__":
    main()
