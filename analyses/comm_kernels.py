"""Which GPU kernels were classified as communication, and by what: the report's ``comm_kernels`` section.

A kernel is communication by its collective metadata, or by a rule on its name: a user's
(``--comm-kernel``, the project's ``ddprof.toml``) or a built-in family
(:data:`ddprof.vocabulary.collective_ops.KERNEL_FAMILIES`). Each communication kernel name is attributed to the
first rule that matches it (the order ingest tried them), else to ``collective metadata``. One row per
(rule, kernel name, op), most frequent first within a rule; a user rule that matched no kernel gets a
row with ``count`` 0 and no name, so a mistyped rule shows.

Example: a DeepEP job with no rule of its own gives ``{rule: "deep_ep", source: "built-in", op:
"all_to_all", name: "void deep_ep::intranode::dispatch<8>(...)", count: 240, ranks: 8}``.
"""

from __future__ import annotations

from typing import Any

import polars as pl
from ddprof.analyses.frames.memo import Prepared, collect, derived
from ddprof.analyses.sections import Section

from ddprof.errors import BadInputError
from ddprof.report.display import Column, Table
from ddprof.report.schema import CommKernelRow, rows
from ddprof.vocabulary.collective_ops import CommRule, RuleError, kernel_rules, match_kernel

METADATA = "collective metadata"


@derived
def comm_kernel_counts(p: Prepared) -> pl.DataFrame:
    """Per (name, coll_op) of the communication kernels (rows of kind comm on a GPU stream): ``count`` and
    ``ranks`` (the ranks that ran it). Both add up over disjoint sets of ranks, so a run analysed a group
    of ranks at a time sums its groups' counts."""
    return collect(p.events.filter((pl.col("kind") == "comm") & pl.col("stream").is_not_null())
                   .group_by("name", "coll_op")
                   .agg(pl.len().cast(pl.Int64).alias("count"), pl.col("rank").n_unique().cast(pl.Int64).alias("ranks")))


def comm_kernels(found: pl.DataFrame, rules: tuple[CommRule, ...]) -> list[dict[str, Any]]:
    """Rows ``{rule, source, pattern, op, name, count, ranks}`` (module doc), from the run's
    :func:`comm_kernel_counts`; ``rules`` are the rules ingest used, in order."""
    order = {r.name: i for i, r in enumerate(rules)}
    rows: list[dict[str, Any]] = []
    for name, op, count, ranks in found.select("name", "coll_op", "count", "ranks").iter_rows():
        m = match_kernel(name, rules)
        rule = m[0] if m is not None else None
        rows.append({"rule": rule.name if rule else METADATA, "source": rule.source if rule else "metadata",
                     "pattern": rule.pattern if rule else None, "op": op, "name": name, "count": count,
                     "ranks": ranks})
    seen = {r["rule"] for r in rows}
    rows += [{"rule": r.name, "source": r.source, "pattern": r.pattern, "op": r.op, "name": None, "count": 0,
              "ranks": 0} for r in rules if r.source == "user" and r.name not in seen]
    return sorted(rows, key=lambda r: (order.get(r["rule"], len(order)), -r["count"], r["name"] or "",
                                          r["op"] or ""))


def rules_of(manifest: dict[str, Any]) -> tuple[CommRule, ...]:
    """The rules a run was ingested with: the user's the manifest records, then the built-in families."""
    texts = manifest.get("comm_kernel_rules") or []
    try:
        return kernel_rules([str(t) for t in texts])
    except RuleError as exc:
        raise BadInputError(f"manifest.json: {exc}") from None


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

#: Which kernel names each rule (built-in family, user rule, or collective metadata) made communication,
#: so a user can check the classification and correct it with ``--comm-kernel``.
COMM_KERNELS_TABLE = Table(
    "Communication kernels, by the rule that classified them (--comm-kernel REGEX[=op] to correct)",
    (Column("rule", "rule"), Column("source", "source"), Column("op", "op", lambda v: v or "-"),
     Column("kernel", "name", lambda v: v or "(matched no kernel)"), Column("count", "count"),
     Column("ranks", "ranks")),
    rows=lambda r: rows(r.get("comm_kernels") or [], CommKernelRow), left=4, at=80)

SECTIONS = (
    Section("comm_kernels", [], analysed=False, tables=(COMM_KERNELS_TABLE,), record=list[CommKernelRow], order=100),
)
