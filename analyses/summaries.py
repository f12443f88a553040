"""What the JSON report says of its per-step and per-instance rows: distributions, and the worst few.

The rows themselves are the detail tables (:mod:`ddprof.report.tables`); the report keeps ``per_rank``
(per rank and cause for idle time, every stream of a step together; ``per_kernel`` for the top kernels) the
number of steps and for each measure its distribution over the steps, ``{mean, p50, p95, max, total}``
(nulls left out; percentiles by linear interpolation), and, over the whole run, the :data:`WORST_STEPS`
steps with the largest headline value (``worst``: the rank, or kernel, the step and the value).
Collective instances become one row per (op, message size) with the count and the distributions of
arrival skew, duration and busbw over its instances, and the :data:`WORST_INSTANCES` instances with the
largest arrival skew, whole. The size of the JSON is then bounded by the ranks and the things it names,
never by the steps or the instances.

Example: one rank, 3, with steps of 10, 12 and 30 ms -> ``{per_rank: [{rank: 3, steps: 3, step_us: {mean:
17333.3, p50: 12000, p95: 28200, max: 30000, total: 52000}}], worst: [{rank: 3, step: 2, value: 30000},
{rank: 3, step: 1, value: 12000}, {rank: 3, step: 0, value: 10000}]}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import polars as pl
from ddprof.analyses import sections

from ddprof.report.tables import null_nonfinite


def json_rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    """Rows as JSON-ready dicts: NaN/inf (in float columns) become null. Converted column by column."""
    columns = null_nonfinite(df).to_dict(as_series=False)
    return [dict(zip(columns, values)) for values in zip(*columns.values())]

#: Steps listed by name per section, the worst first (whatever the ranks: the JSON stays bounded).
WORST_STEPS = 5
#: Collective instances kept whole in the JSON, the largest arrival skew first: the text report's table.
WORST_INSTANCES = 40


def distribution(column: str) -> pl.Expr:
    """``{mean, p50, p95, max, total}`` of ``column`` over a group (nulls left out)."""
    c = pl.col(column)
    return pl.struct(c.mean().alias("mean"),
                     c.quantile(0.5, "linear").alias("p50"), c.quantile(0.95, "linear").alias("p95"),
                     c.max().cast(pl.Float64).alias("max"), c.sum().cast(pl.Float64).alias("total")).alias(column)


def worst(df: pl.DataFrame, keys: Sequence[str], by: str) -> list[dict[str, Any]]:
    """The :data:`WORST_STEPS` rows with the largest ``by`` (ties: in the table's order), as
    ``{*keys, step, value}``."""
    top = df.sort(by, descending=True, nulls_last=True, maintain_order=True).head(WORST_STEPS)
    return top.select(*keys, "step", pl.col(by).cast(pl.Float64).alias("value")).to_dicts()


def list_name(keys: Sequence[str]) -> str:
    """``per_rank`` for summaries by rank, ``per_kernel`` for those by kernel."""
    return "per_rank" if "rank" in keys else "per_kernel"


def idle_by_cause(idle_by_step: pl.DataFrame) -> pl.DataFrame:
    """Per rank, step and cause, the idle time of every stream together: what ``idle_by_step`` summarises."""
    if not idle_by_step.height:
        return idle_by_step
    extra = [pl.col("basis").first()] if "basis" in idle_by_step.columns else []
    return idle_by_step.group_by("rank", "step", "category", maintain_order=True).agg(pl.col("idle_us").sum(), *extra)


def summary(name: str, table: pl.DataFrame) -> dict[str, Any]:
    """The summary rows of the detail table ``name``, as its section declares them
    (:data:`.sections.STEP_SECTIONS`: keys, measures, the measure of the worst steps)."""
    return per_step(idle_by_cause(table) if name == "idle_by_step" else table, *sections.STEP_SECTIONS[name])


def per_step(df: pl.DataFrame, keys: Sequence[str], measures: Sequence[str], by: str) -> dict[str, Any]:
    """``{per_rank (or per_kernel): [per keys, in their first appearance's order: steps (rows), each
    measure's distribution, and the ``basis`` of the steps where the table has one (``device`` or
    ``host``: :mod:`ddprof.analyses.frames.stepwindows`)], worst: the worst steps by ``by``}``. ``df``
    has no NaN (:func:`ddprof.report.tables.null_nonfinite`), so a mean of no value is null, not NaN."""
    if not df.height:
        return {list_name(keys): [], "worst": []}
    aggs = [pl.len().alias("steps"), *(distribution(m) for m in measures)]
    if "basis" in df.columns:
        aggs.append(pl.col("basis").first())
    return {list_name(keys): df.group_by(list(keys), maintain_order=True).agg(aggs).to_dicts(),
            "worst": worst(df, keys, by)}


def collectives_summary(coll: pl.DataFrame) -> dict[str, Any]:
    """``{instances, by_op: [{op, bytes, count, arrival_skew_us, duration_us, busbw_gbps}], worst: [..]}``
    (module doc): ``by_op`` in (op, bytes) order, ``worst`` the instances with the largest arrival skew
    (ties: the earlier instance) as rows of the detail table. ``coll`` has no NaN."""
    if not coll.height:
        return {"instances": 0, "by_op": [], "worst": []}
    by_op = (coll.group_by("op", "bytes").agg(pl.len().alias("count"), distribution("arrival_skew_us"),
                                              distribution("duration_us"), distribution("busbw_gbps"))
             .sort("op", "bytes", nulls_last=True))
    worst = coll.sort(pl.col("arrival_skew_us").fill_null(0.0), descending=True, maintain_order=True)
    return {"instances": coll.height, "by_op": by_op.to_dicts(), "worst": null_nonfinite(worst.head(WORST_INSTANCES)).to_dicts()}
