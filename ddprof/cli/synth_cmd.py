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
@click.option("--slow-link", multiple=True, metavar="HOST=FACTOR",
              help="A host whose own link between its GPUs transfers FACTOR times slower (its groups' collectives).")
@click.option("--poor-overlap", is_flag=True,
              help="The backward's all-reduces issued after the whole backward instead of each after its chunk "
                   "(data-parallel runs without a pipeline); truth.json gives the step with them overlapped.")
@click.option("--clock-offset", multiple=True, metavar="HOST=US", help="A host whose clock reads US µs ahead.")
@click.option("--noise", type=float, default=0.1, show_default=True, help="Kernel duration jitter (fraction).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["kineto", "nsys"]), default="kineto", show_default=True,
              help="kineto: a Kineto JSON trace per rank; nsys: every rank in one Nsight Systems SQLite export.")
@click.option("--moe", is_flag=True, help="A mixture-of-experts run instead: an expert per rank, tokens routed "
              "unevenly by all-to-all (--tokens, --hot-rank, --hot-share; --ranks, --steps, --gpus-per-host).")
@click.option("--tokens", type=click.IntRange(min=1), default=1024, show_default=True, help="--moe: tokens a rank.")
@click.option("--hot-rank", type=click.IntRange(min=0), default=0, show_default=True,
              help="--moe: the rank whose expert the router favours.")
@click.option("--hot-share", type=click.FloatRange(0, 1), default=0.4, show_default=True,
              help="--moe: the share of every rank's tokens routed to --hot-rank.")
def synth(out_dir: str, ranks: int, steps: int, kernels: int, tp: int, pp: int, micro_batches: int, schedule: str,
          gpus_per_host: int, slow: tuple[str, ...], slow_link: tuple[str, ...], poor_overlap: bool, clock_offset: tuple[str, ...],
          noise: float, seed: int,
          fmt: str, moe: bool, tokens: int, hot_rank: int, hot_share: float) -> int:
    """Write a generated run: OUT_DIR/traces (Kineto JSON per rank, or one Nsight Systems SQLite export with
    --format nsys) and OUT_DIR/truth.json (its true metrics)."""
    from ddprof.synth import Spec, generate

    if moe:
        return _moe(Path(out_dir), ranks, steps, gpus_per_host, tokens, hot_rank, hot_share)

    spec = Spec(ranks=ranks, steps=steps, kernels=kernels, tp=tp, pp=pp, micro_batches=micro_batches,
                schedule=schedule, gpus_per_host=gpus_per_host, slow=_pairs(slow, "RANK=FACTOR"),
                slow_link=_pairs(slow_link, "HOST=FACTOR"), poor_overlap=poor_overlap,
                clock_offset_us=_pairs(clock_offset, "HOST=MICROSECONDS"), noise=noise, seed=seed)
    truth = generate(spec, out_dir, fmt=fmt)
    out = Path(out_dir)  # "out/" names out/traces, not out//traces
    click.echo(f"{ranks} ranks, {truth['total_events']:,} events: {out / 'traces'}; truth: {out / 'truth.json'}")
    return 0


def _moe(out: Path, ranks: int, steps: int, gpus_per_host: int, tokens: int, hot_rank: int, hot_share: float) -> int:
    """``--moe``: the :class:`ddprof.synth.MoE` scenario's traces and its truth (bytes by rank pair per
    instance and summed, the imbalance, the hot rank, the hosts)."""
    from ddprof.errors import UsageError
    from ddprof.store.atomic import write_json_atomic
    from ddprof.synth import MoE, write_kineto

    if hot_rank >= ranks or ranks < 2:
        raise UsageError(f"synth --moe: --hot-rank {hot_rank} must be one of {ranks} ranks (at least 2)")
    sc = MoE(ranks=ranks, steps=steps, tokens=tokens, hot_rank=hot_rank, hot_share=hot_share,
             gpus_per_host=gpus_per_host)
    write_kineto(sc, out / "traces")
    write_json_atomic(out / "truth.json", sc.truth())
    click.echo(f"{ranks} ranks, mixture of experts: {out / 'traces'}; truth: {out / 'truth.json'}")
    return 0
