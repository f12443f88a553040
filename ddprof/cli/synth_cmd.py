"""``ddprof synth OUT [--ranks N --steps S --kernels K --tp --pp ...]``: write a generated run with its truth."""

from __future__ import annotations

from pathlib import Path

import click


def _pairs(values: tuple[str, ...], what: str) -> dict[int, float]:
    out = {}
    for v in values:
        key, sep, val = v.partition("=")
        try:
            if not sep:
                raise ValueError
            out[int(key)] = float(val)
        except ValueError:
            raise click.BadParameter(f"{v!r}: expected {what}") from None
    return out


@click.command()
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--ranks", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--steps", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--kernels", type=click.IntRange(min=1), default=60, show_default=True,
              help="Compute kernels per rank per step (a rank has about 3 events per kernel).")
@click.option("--tp", type=click.IntRange(min=1), default=1, show_default=True, help="Tensor-parallel size.")
@click.option("--pp", type=click.IntRange(min=1), default=1, show_default=True, help="Pipeline stages.")
@click.option("--micro-batches", type=click.IntRange(min=1), default=4, show_default=True)
@click.option("--schedule", type=click.Choice(["1f1b", "gpipe"]), default="1f1b", show_default=True)
@click.option("--gpus-per-host", type=click.IntRange(min=1), default=8, show_default=True)
@click.option("--slow", multiple=True, metavar="RANK=FACTOR", help="A rank whose kernels take FACTOR times longer.")
@click.option("--clock-offset", multiple=True, metavar="HOST=US", help="A host whose clock reads US µs ahead.")
@click.option("--noise", type=float, default=0.1, show_default=True, help="Kernel duration jitter (fraction).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["kineto", "nsys"]), default="kineto", show_default=True,
              help="kineto: a Kineto JSON trace per rank; nsys: every rank in one Nsight Systems SQLite export.")
def synth(out_dir: str, ranks: int, steps: int, kernels: int, tp: int, pp: int, micro_batches: int, schedule: str,
          gpus_per_host: int, slow: tuple[str, ...], clock_offset: tuple[str, ...], noise: float, seed: int,
          fmt: str) -> int:
    """Write a generated run: OUT_DIR/traces (Kineto JSON per rank, or one Nsight Systems SQLite export with
    --format nsys) and OUT_DIR/truth.json (its true metrics)."""
    from ddprof.synth import Spec, generate

    spec = Spec(ranks=ranks, steps=steps, kernels=kernels, tp=tp, pp=pp, micro_batches=micro_batches,
                schedule=schedule, gpus_per_host=gpus_per_host, slow=_pairs(slow, "RANK=FACTOR"),
                clock_offset_us=_pairs(clock_offset, "HOST=MICROSECONDS"), noise=noise, seed=seed)
    truth = generate(spec, out_dir, fmt=fmt)
    out = Path(out_dir)  # "out/" names out/traces, not out//traces
    click.echo(f"{ranks} ranks, {truth['total_events']:,} events: {out / 'traces'}; truth: {out / 'truth.json'}")
    return 0
