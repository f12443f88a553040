"""``ddprof whatif SRC|RUN_DIR [edits] [--format text|json] [-o FILE]``: the run's cross-rank dependency
model replayed with edits (:mod:`ddprof.analyses.whatif`): the straggler removed, communication k times
faster or fully overlapped, host gaps removed, kernels matching a pattern k times faster; the projected
step time of each, the best first, the slowdown attributed by rank and op type, and each step's critical
path (its share by kind, the ops with most time on it).

Given one of the OSDI'25 straggler study's operation tables (``trace-NAME.parquet`` beside its
``meta-NAME.yaml``), it prints the study's metrics computed by the same model instead (blocking and
launch slowdowns, their attribution by dp rank, stage and op type, M_S and M_W), beside the published
answers where the folder has them."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import click

from ddprof.cli.common import (
    comm_kernel_option,
    emit,
    parse_rank_map,
    parse_selection,
    rank_option,
    rules_in_force,
)
from ddprof.cli.progress import ingest_progress
from ddprof.vocabulary.units import fmt_ranges


def _float(text: str) -> float:
    if text.strip().lower() in ("inf", "infinity", "overlap"):
        return math.inf
    v = float(text)
    if not v > 0:
        raise click.BadParameter(f"a speed-up factor must be positive, got {text!r}")
    return v


def _stragglers(text: str) -> str | list[int] | None:
    if text == "auto":
        return "auto"
    if text == "none":
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"--straggler takes auto, none or ranks like 3,7; got {text!r}") from None


def _osdi_job(sources: tuple[str, ...]) -> tuple[Path, str] | None:
    """(folder, NAME) when the one source is a study's ``trace-NAME.parquet`` with its ``meta-NAME.yaml``."""
    if len(sources) != 1:
        return None
    p = Path(sources[0])
    m = re.fullmatch(r"trace-(.+)\.parquet", p.name)
    if m and (p.parent / f"meta-{m.group(1)}.yaml").exists():
        return p.parent, m.group(1)
    return None


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--straggler", "straggler", default="auto", show_default=True, metavar="auto|none|RANKS",
              help="Remove a straggler: its ops take their kernel's typical duration and delay across the other "
                   "ranks. auto: each rank in turn, the best kept; or ranks, e.g. 3 or 3,7 (one group).")
@click.option("--comm-faster", "comm_k", multiple=True, default=("2",), show_default=True, metavar="K",
              help="Communication K times faster (inf: fully overlapped). Repeatable.")
@click.option("--comm-overlap", is_flag=True, help="Also project communication fully overlapped (costing nothing).")
@click.option("--typical-links", is_flag=True,
              help="Also project every transfer at most its collective's typical across the ranks (a slow link "
                   "restored).")
@click.option("--kernel", "kernels", multiple=True, metavar="REGEX=K",
              help="Kernels (and ops) whose name matches REGEX K times faster. Repeatable.")
@click.option("--host-gaps/--no-host-gaps", default=True, show_default=True,
              help="Project the host threads' idle gaps removed.")
@click.option("--grad-overlap/--no-grad-overlap", default=True, show_default=True,
              help="Project the gradient all-reduces that wait for the whole backward overlapped with it (where "
                   "a rank has several after its backward; not on pipelines).")
@click.option("--data-loading/--no-data-loading", default=True, show_default=True,
              help="Project the data loader's spans taking no time (batches ready when the step asks), where the "
                   "run has them.")
@click.option("--steps", "step_sel", metavar="LIST",
              help="Model only these steps, e.g. 5 or 3-5 (default: all): each step is replayed on its own, and a "
                   "typical op is the median over the steps modelled. For runs too large to model whole.")
@click.option("--attribution/--no-attribution", default=True, show_default=True,
              help="Attribute the slowdown by rank and op type (one replay per rank and per op type).")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the result here (atomically).")
@click.option("--cache", type=click.Path(file_okay=False),
              help="Where to keep the ingested store of raw traces (default: SRC/.ddprof-cache, or a "
                   "temporary directory when SRC is read-only).")
@rank_option
@comm_kernel_option
def whatif(sources: tuple[str, ...], straggler: str, comm_k: tuple[str, ...], comm_overlap: bool,
           typical_links: bool, kernels: tuple[str, ...], host_gaps: bool, grad_overlap: bool, data_loading: bool,
           step_sel: str | None,
           attribution: bool, fmt: str, output: str | None, cache: str | None,
           ranks: tuple[str, ...], comm_kernels: tuple[str, ...] = ()) -> int:
    """Project a run's step time under edits (straggler removed, faster communication...) by replaying its
    cross-rank dependency model."""
    from ddprof.errors import UsageError

    job = _osdi_job(sources)
    if job is not None:
        result = _osdi(*job)
        emit(json.dumps(result, indent=2) if fmt == "json" else _osdi_text(result), output)
        return 0
    from ddprof.analyses.whatif.projections import as_dict
    from ddprof.analyses.whatif.projections import whatif as project
    from ddprof.inputs.sources import open_source

    ks = [_float(k) for k in comm_k] + ([math.inf] if comm_overlap else [])
    pairs: list[tuple[str, float]] = []
    for spec in kernels:
        pattern, sep, k = spec.rpartition("=")
        if not sep or not pattern:
            raise UsageError(f"--kernel expects REGEX=K (e.g. --kernel 'gemm=2'), got {spec!r}")
        pairs.append((pattern, _float(k)))
    with open_source(sources, cache=cache, rank_map=parse_rank_map(ranks), comm_kernels=rules_in_force(comm_kernels),
                     progress=ingest_progress(fmt == "text" and output is None)) as src:
        if src.run is None:
            raise UsageError("nothing to replay: Flight Recorder dumps hold no timeline; name traces or a run dir")
        events = src.run.events()
        if step_sel is not None:
            import polars as pl

            chosen = parse_selection(step_sel, "steps")
            missing = sorted(set(chosen) - set(src.run.steps))
            if missing:
                raise UsageError(f"--steps: the run has no step {', '.join(map(str, missing))} (its steps: "
                                 f"{fmt_ranges(src.run.steps) or 'none'})")
            events = events.filter(pl.col("step").is_in(chosen))
        result = as_dict(project(events, stragglers=_stragglers(straggler), comm_k=ks,
                                 host_gaps=host_gaps, kernels=pairs, typical_links=typical_links,
                                 grad_overlap=grad_overlap, data_loading=data_loading, attribute=attribution))
        result["steps_modelled"] = chosen if step_sel is not None else list(src.run.steps)
    emit(json.dumps(result, indent=2) if fmt == "json" else _text(result), output)
    return 0


def _ms(s: float | None) -> str:
    if s is None:
        return "-"
    return f"{1e3 * s:,.1f} ms" if s < 10 else f"{s:,.2f} s"


def _top(d: dict[str, float], n: int = 5) -> str:
    items = sorted(d.items(), key=lambda kv: -kv[1])[:n]
    return ", ".join(f"{k} {v:.3f}" for k, v in items)


def _text(r: dict[str, Any]) -> str:
    modelled = r.get("steps_modelled") or []
    lines = [f"what-if: {r['ranks']} ranks, {r['steps']} step(s) ({fmt_ranges(modelled) or 'none'}), {r['ops']:,} ops in the "
             f"dependency model"]
    if not r["explained"]:
        lines.append(f"no projection: {r['reason']}")
        return "\n".join(lines)
    lines.append(f"replay of the recording: error {r['replay_error_pct']:.2f} % of the mean measured step "
                 f"({_ms(r['measured_step_s'])}); the run's step (first start to last end, all ranks) "
                 f"{_ms(r['step_s'])}")
    lines.append(f"verdict: {r['verdict']}")
    lines.append("")
    width = max([44, *(len(p["says"]) for p in r["projections"])])  # an edit's words are never cut
    lines.append(f"{'edit':{width}} {'step':>10} {'saving':>12}")
    for p in r["projections"]:
        pct = p["saving_pct"]
        share = f"(−{pct:.0f} %)" if pct >= 0 else f"(+{-pct:.0f} %)"
        lines.append(f"{p['says']:{width}} {_ms(p['step_s']):>10} {_ms(p['saving_s']):>9} {share}")
    if r["by_rank"]:
        lines.append("")
        lines.append("slowdown kept when only this group runs as recorded (1.000 = explains nothing):")
        lines.append(f"  by rank:    {_top(r['by_rank'])}")
        lines.append(f"  by op type: {_top(r['by_op_type'])}")
    cp = r.get("critical") or {}
    if cp.get("by_kind"):
        lines.append("")
        lines.append("critical path (the work and waits that set the step), per step: " + ", ".join(
            f"{k['kind']} {_ms(k['s'])} ({100 * k['share']:.0f} %)" for k in cp["by_kind"] if k["s"]))
        for o in cp.get("top_ops") or []:
            lines.append(f"  {_ms(o['s']):>10} {100 * o['share']:5.1f} %  rank {o['rank']} {o['lane']:10} "
                         f"{o['kind']:13} {str(o['name'])[:60]}")
    return "\n".join(lines)


def _osdi(folder: Path, name: str) -> dict[str, Any]:
    from ddprof.analyses.whatif import osdi

    job = osdi.load(folder, name)
    a = osdi.analyse(job.ops)
    rows = osdi.reproduce(job, a) if job.published else []
    return {
        "job": name, "meta": job.meta, "ops": job.ops.height, "steps": len(a.model.steps),
        "blocking_slowdown": a.blocking_slowdown, "launch_slowdown": a.launch_slowdown,
        "mean_step_s": {"recorded": float(a.t_base.mean()), "no_delays": float(a.t_nodelay.mean()),
                        "ideal": float(a.t_ideal.mean())},
        "blocking_decompose_by_dp_rank": a.decompose("dp_rank"),
        "blocking_decompose_by_stage": a.decompose("stage"),
        "blocking_decompose_by_optype": a.decompose("op_class"),
        "M_S": osdi.m_s(a).rem, "M_W": osdi.m_w(a).rem,
        "stages_rebalanced_step_s": osdi.stages_rebalanced(a),
        "published": rows,
    }


def _osdi_text(r: dict[str, Any]) -> str:
    st = r["mean_step_s"]
    lines = [f"OSDI'25 job {r['job']}: {r['ops']:,} ops, {r['steps']} steps; mean step recorded {_ms(st['recorded'])}, "
             f"without host delays {_ms(st['no_delays'])}, every op typical {_ms(st['ideal'])}",
             f"blocking slowdown {r['blocking_slowdown']:.3f}, launch slowdown {r['launch_slowdown']:.3f}, "
             f"M_S {r['M_S']:.3f}, M_W {r['M_W']:.3f}",
             f"the pipeline stages rebalanced (equal compute per step): mean step {_ms(r['stages_rebalanced_step_s'])} "
             f"instead of {_ms(st['no_delays'])} without host delays",
             f"  by stage:   {_top(r['blocking_decompose_by_stage'])}",
             f"  by dp rank: {_top(r['blocking_decompose_by_dp_rank'])}",
             f"  by op type: {_top(r['blocking_decompose_by_optype'])}"]
    bad = [p for p in r["published"] if abs(p["error"]) > p["tolerance"]]
    if r["published"]:
        lines.append(f"published answers: {len(r['published']) - len(bad)} of {len(r['published'])} within tolerance"
                     + "".join(f"\n  {p['metric']} {p['key']}: ours {p['ours']:.4f}, published {p['published']:.4f}"
                               for p in bad))
    return "\n".join(lines)
