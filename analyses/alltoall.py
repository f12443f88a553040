"""All-to-all traffic by rank pair, and its imbalance: mixture-of-experts routing (docs/DESIGN.md §3).

Which rows: the collective rows of :func:`.collectives.comm_rows` whose op is ``all_to_all``, matched across
ranks as every collective is (process group + per-group order). A group's members are the ranks seen using
it, in rank order: the order of a process group's ranks (``new_group`` sorts them), the order the split
sizes follow. Groups of more than :data:`MAX_MATRIX_RANKS` ranks are left out (ranks² pairs an instance).

The matrix of one instance: ``M[s, d]`` = bytes rank s sends to rank d. From s's ``send_splits`` (the
store's bytes per member, from ``In split size`` or a gloo op's split arguments), else d's
``recv_splits`` entry for s, else an even split of s's message size (``bytes / n``: all-to-all without
splits, or splits the trace did not record). A rank's **received** bytes are its column's sum, its
**sent** bytes its row's sum, the diagonal (the tokens a rank keeps for its own experts) included: both
are its experts' load.

**Imbalance** (of one instance, of a step, of the run): ``max_r received_r / mean_r received_r`` over the
group's ranks (and the same of sent bytes), the instance's, the step's instances', or every traced
instance's bytes added up. 1 is balanced; with n ranks, n is the most (one rank takes everything).
Example: 4 ranks route 60 % of their 600 tokens (32 B each) to rank 1 and 80 tokens to each other rank ->
rank 1 receives 4 · 360 · 32 = 46,080 B, the others 4 · 80 · 32 = 10,240 B; mean 19,200 B; receive
imbalance 46,080 / 19,200 = 2.4; every rank sends 19,200 B: send imbalance 1.

**Load, not a slow rank**: an instance is *explained by bytes* when the rank that arrived last, or that
took longest, is one of its heavy ranks (moving at least :data:`HEAVY` × the mean of the other ranks'
bytes, received or sent), at this instance or at the group's previous all-to-all
(a MoE layer's dispatch is followed by the experts' compute, then the combine: an overloaded expert's rank
arrives last at the combine). :func:`explained_by_bytes` lists them; the straggler rule leaves them out,
and this section's verdict names the imbalance instead.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import polars as pl
from ddprof.analyses.collectives import arrivals, comm_rows
from ddprof.analyses.frames.memo import Events, Prepared, collect, derived
from ddprof.analyses.sections import Section
from msgspec import Meta

from ddprof.report.display import Column, Table
from ddprof.report.schema import Rank, Row
from ddprof.vocabulary.units import NS_PER_US, fmt_bytes, fmt_num, fmt_plain, fmt_us

#: A rank moving at least this many times the other ranks' mean bytes is heavy (against the others, not the
#: mean of all: 2 ranks routing 60 % of their tokens to rank 1 give it 1.5× rank 0's bytes, 1.2× the mean).
HEAVY = 1.25
#: The run's matrix is kept in the summary for at most this many ranks (ranks² numbers); the all-to-alls of a
#: larger group are left out (their pairs would be ranks² rows per instance).
MAX_MATRIX_RANKS = 256
#: The per-step matrices kept in the summary hold at most this many numbers (8 ranks: 1,562 steps; 64: 24).
MAX_STEP_CELLS = 100_000
_INST = ["group", "index"]


class AllToAllRow(Row):
    """One all-to-all instance: its bytes by rank and their imbalance."""

    pg: Annotated[str, Meta(description="process group")]
    index: Annotated[int, Meta(description="position among the group's instances")]
    step: Annotated[int | None, Meta(description="profiler step of its first rank")]
    ranks: Annotated[int, Meta(description="group members")]
    bytes: Annotated[int, Meta(description="bytes moved in all, rank to rank (the diagonal included)")]
    with_splits: Annotated[bool, Meta(description="the trace recorded the split sizes (else an even split)")]
    max_recv_rank: Annotated[int | None, Meta(description="the rank that received the most")]
    recv_imbalance: Annotated[float | None, Meta(description="max ÷ mean of the bytes a rank receives")]
    max_send_rank: Annotated[int | None, Meta(description="the rank that sent the most")]
    send_imbalance: Annotated[float | None, Meta(description="max ÷ mean of the bytes a rank sends")]
    duration_us: Annotated[float | None, Meta(description="the shortest rank's duration, µs")]
    last_rank: Annotated[int | None, Meta(description="the rank that arrived last")]
    longest_rank: Annotated[int | None, Meta(description="the rank whose all-to-all took longest")]
    explained: Annotated[bool, Meta(description="the last or longest rank is a heavy one: load, not a slow "
                                                "rank (module doc of analyses/alltoall.py)")]


class AllToAllRank(Row):
    """One rank's all-to-all bytes over every traced instance."""

    rank: Rank
    sent_bytes: Annotated[int, Meta(description="bytes it sent, itself included")]
    received_bytes: Annotated[int, Meta(description="bytes it received, from itself included")]
    recv_vs_mean: Annotated[float | None, Meta(description="received ÷ the ranks' mean")]
    send_vs_mean: Annotated[float | None, Meta(description="sent ÷ the ranks' mean")]


class AllToAllStep(Row):
    """One step's all-to-all imbalance (its instances' bytes added up)."""

    step: Annotated[int, Meta(description="profiler step")]
    instances: Annotated[int, Meta(description="all-to-all instances in the step")]
    max_recv_rank: Annotated[int | None, Meta(description="the rank that received the most")]
    recv_imbalance: Annotated[float | None, Meta(description="max ÷ mean of the bytes a rank receives")]
    send_imbalance: Annotated[float | None, Meta(description="max ÷ mean of the bytes a rank sends")]


class AllToAllStepMatrix(Row):
    """The bytes by rank pair of one traced step, summed over its all-to-all instances."""

    step: Annotated[int, Meta(description="the step")]
    instances: Annotated[int, Meta(description="all-to-all instances in the step")]
    matrix: Annotated[list[list[int]], Meta(description="bytes sent, row rank to column rank, in the step")]


class AllToAll(Row):
    """Every all-to-all instance is a row of the ``alltoall`` detail table; here, the bytes by rank pair summed
    over the traced instances, per rank, the worst steps and instances, and how many the bytes explain."""

    instances: Annotated[int, Meta(description="rows in the detail table")]
    with_splits: Annotated[int, Meta(description="instances whose split sizes the trace recorded")]
    explained: Annotated[int, Meta(description="instances whose last or longest rank is a heavy one")]
    ranks: Annotated[list[int], Meta(description="the matrix's ranks, in order")]
    matrix: Annotated[list[list[int]], Meta(description="bytes sent, row rank to column rank, over every traced "
                                                        f"instance; empty above {MAX_MATRIX_RANKS} ranks")]
    recv_imbalance: Annotated[float | None, Meta(description="max ÷ mean of the bytes a rank receives, summed "
                                                             "over the instances")]
    send_imbalance: Annotated[float | None, Meta(description="max ÷ mean of the bytes a rank sends, summed")]
    hot_rank: Annotated[int | None, Meta(description="the rank that most often receives the most, at instances "
                                                     f"where it receives at least {HEAVY}× the other ranks' mean")]
    hot_instances: Annotated[int, Meta(description="instances where it receives the most, so imbalanced")]
    hot_recv_imbalance: Annotated[float | None, Meta(description="its median receive imbalance there")]
    per_rank: list[AllToAllRank]
    by_step: Annotated[list[AllToAllStep], Meta(description="the 10 steps of largest receive imbalance")]
    worst: Annotated[list[AllToAllRow], Meta(description="the 5 instances of largest receive imbalance")]
    step_matrices: Annotated[list[AllToAllStepMatrix], Meta(description=(
        f"per traced step in order, its matrix (the heat map's per-step view); at most {MAX_STEP_CELLS:,} "
        "numbers in all, the later steps left out beyond (step_matrices_left_out)"))] = []
    step_matrices_left_out: Annotated[int, Meta(description="traced steps whose matrix is not kept")] = 0


EMPTY = {"instances": 0, "with_splits": 0, "explained": 0, "ranks": [], "matrix": [], "recv_imbalance": None,
         "send_imbalance": None, "hot_rank": None, "hot_instances": 0, "hot_recv_imbalance": None, "per_rank": [],
         "by_step": [], "worst": [], "step_matrices": [], "step_matrices_left_out": 0}


@derived
def pair_bytes(p: Prepared) -> pl.DataFrame:
    """One row per (instance, src, dst): ``group, index, step, src, dst, bytes, with_splits`` (module doc)."""
    rows = collect(comm_rows(p).lazy().filter(pl.col("op") == "all_to_all"))
    if rows.height == 0:
        return pl.DataFrame(schema={"group": pl.String, "index": pl.Int64, "step": pl.Int32, "src": pl.Int32,
                                    "dst": pl.Int32, "bytes": pl.Int64, "with_splits": pl.Boolean})
    members = (rows.group_by("group").agg(pl.col("rank").unique().sort().alias("members"))
               .filter(pl.col("members").list.len() <= MAX_MATRIX_RANKS))  # ranks² rows an instance: bounded
    rows = rows.join(members, on="group").with_columns(
        n=pl.col("members").list.len(), index=pl.col("index").cast(pl.Int64),
        step=pl.col("step").min().over(_INST))
    fits = pl.col("members").list.len()
    send = rows.select(
        *_INST, "step", "n", src="rank", dst="members", pos=pl.int_ranges(fits),
        splits=pl.when(pl.col("send_splits").list.len() == fits).then("send_splits"),
        even=pl.col("bytes") // pl.col("n")).explode("dst", "pos")
    recv = rows.filter(pl.col("recv_splits").list.len() == fits).select(
        *_INST, dst="rank", src="members", got="recv_splits").explode("src", "got")
    return (send.with_columns(sent=pl.col("splits").list.get(pl.col("pos"), null_on_oob=True))
            .join(recv, on=[*_INST, "src", "dst"], how="left")
            .select(*_INST, "step", pl.col("src").cast(pl.Int32), pl.col("dst").cast(pl.Int32),
                    bytes=pl.coalesce("sent", "got", "even").cast(pl.Int64),
                    with_splits=pl.col("sent").is_not_null() | pl.col("got").is_not_null())
            .sort(*_INST, "src", "dst"))


def _ratio(col: str) -> pl.Expr:
    return pl.when(pl.col(col).mean() > 0).then(pl.col(col).max() / pl.col(col).mean())


def _per_rank(pairs: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    """Bytes each rank sent and received per ``by`` (every rank that sent or received)."""
    sent = pairs.group_by(*by, pl.col("src").alias("rank")).agg(pl.col("bytes").sum().alias("sent"))
    got = pairs.group_by(*by, pl.col("dst").alias("rank")).agg(pl.col("bytes").sum().alias("received"))
    return sent.join(got, on=[*by, "rank"], how="full", coalesce=True).with_columns(
        pl.col("sent").fill_null(0), pl.col("received").fill_null(0))


def _imbalance(per_rank: pl.LazyFrame, by: list[str]) -> pl.LazyFrame:
    return per_rank.group_by(by).agg(
        pl.col("rank").sort_by("received", "rank", descending=[True, False]).first().alias("max_recv_rank"),
        _ratio("received").alias("recv_imbalance"),
        pl.col("rank").sort_by("sent", "rank", descending=[True, False]).first().alias("max_send_rank"),
        _ratio("sent").alias("send_imbalance"),
        pl.col("rank").filter((pl.len() > 1) & ((pl.col("received") >= HEAVY * _others_mean("received"))
                                                | (pl.col("sent") >= HEAVY * _others_mean("sent")))).alias("heavy"),
        ((pl.len() > 1) & (pl.col("received") >= HEAVY * _others_mean("received")).any()).alias("recv_heavy"))


def _others_mean(col: str) -> pl.Expr:
    """Per rank of a group: the mean of ``col`` over the group's other ranks."""
    return (pl.col(col).sum() - pl.col(col)) / (pl.len() - 1)


@derived
def alltoall_instances(events: Prepared) -> pl.DataFrame:
    """The detail table: one row per all-to-all instance (:class:`AllToAllRow`, plus ``heavy``, the ranks
    moving at least :data:`HEAVY` × the other ranks' mean), in group and index order. Example in the module doc."""
    pairs = pair_bytes(events).lazy()
    inst = _imbalance(_per_rank(pairs, _INST), _INST)
    totals = pairs.group_by(_INST).agg(pl.col("step").first(), pl.col("bytes").sum(), pl.col("with_splits").any(),
                                       pl.col("src").n_unique().alias("ranks"))
    arr = arrivals(events).lazy().filter(pl.col("op") == "all_to_all").select(
        "group", "rank", "wait_ns", "dur_ns", pl.col("index").cast(pl.Int64))
    timing = arr.group_by(_INST).agg(
        pl.col("rank").filter(pl.col("wait_ns") == 0).alias("__last"),
        pl.col("rank").sort_by("dur_ns", "rank", descending=[True, False]).first().alias("longest_rank"),
        (pl.col("dur_ns").min() / NS_PER_US).alias("duration_us"))
    heavy_ok = pl.col("heavy").list.len() > 0
    out = (totals.join(inst, on=_INST).join(timing, on=_INST, how="left")
           .sort(*_INST)
           .with_columns(
               last_rank=pl.when(pl.col("__last").list.len() == 1).then(pl.col("__last").list.first()),
               __prev_heavy=pl.col("heavy").shift(1).over("group"),
               __prev_ok=heavy_ok.shift(1).over("group").fill_null(False))
           .with_columns(explained=(
               (heavy_ok & (pl.col("heavy").list.contains(pl.col("last_rank"))
                            | pl.col("heavy").list.contains(pl.col("longest_rank"))))
               | (pl.col("__prev_ok") & pl.col("__prev_heavy").list.contains(pl.col("last_rank")))).fill_null(False))
           .rename({"group": "pg"})
           .select([*AllToAllRow.__struct_fields__, "heavy", "recv_heavy"]))
    return collect(out)


def explained_by_bytes(events: Events) -> pl.DataFrame:
    """The all-to-all instances whose last or longest rank moved the most bytes (``group, index``): load
    imbalance, not a slow rank (module doc). The straggler rule leaves them out. Only instances whose
    splits were recorded: without them, ranks of one all-to-all move the same bytes, and unequal sizes
    mean the instance was matched from kernels that are not one collective (point-to-point kernels of a
    partial capture paired by their order on a stream), which explains nothing."""
    inst = alltoall_instances(events)
    return inst.filter(pl.col("explained") & pl.col("with_splits")).select(pl.col("pg").alias("group"), "index")


def alltoall_summary(events: Events, instances: pl.DataFrame) -> dict[str, Any]:
    """The section (:class:`AllToAll`) from the pairs and the detail table."""
    if instances.height == 0:
        return dict(EMPTY)
    pairs = pair_bytes(events).lazy()
    per = collect(_per_rank(pairs.with_columns(__all=pl.lit(0)), ["__all"]).sort("rank"))
    mean_r, mean_s = per["received"].mean(), per["sent"].mean()
    per_rank = [{"rank": r["rank"], "sent_bytes": r["sent"], "received_bytes": r["received"],
                 "recv_vs_mean": r["received"] / mean_r if mean_r else None,
                 "send_vs_mean": r["sent"] / mean_s if mean_s else None} for r in per.iter_rows(named=True)]
    order = per["rank"].to_list()
    matrix: list[list[int]] = []
    if len(order) <= MAX_MATRIX_RANKS:
        summed = collect(pairs.group_by("src", "dst").agg(pl.col("bytes").sum()))
        at = {r: i for i, r in enumerate(order)}
        matrix = [[0] * len(order) for _ in order]
        for s, d, b in summed.iter_rows():
            matrix[at[s]][at[d]] = int(b)
    step_matrices, left_out = _step_matrices(pairs, order) if matrix else ([], 0)
    steps = collect(_imbalance(_per_rank(pairs.drop_nulls("step"), ["step"]), ["step"])
                    .join(pairs.drop_nulls("step").group_by("step").agg(
                        pl.struct(*_INST).n_unique().alias("instances")), on="step")
                    .sort(pl.col("recv_imbalance").fill_null(0), "step", descending=[True, False]).head(10))
    hot = (instances.filter(pl.col("recv_heavy")).group_by("max_recv_rank")
           .agg(pl.len().alias("n"), pl.col("recv_imbalance").median().alias("imb"))
           .sort("n", "max_recv_rank", descending=[True, False]).head(1).to_dicts())
    worst = instances.sort(pl.col("recv_imbalance").fill_null(0), "pg", "index",
                           descending=[True, False, False]).head(5).drop("heavy", "recv_heavy")
    return {
        "instances": instances.height,
        "with_splits": int(instances["with_splits"].sum()),
        "explained": int(instances["explained"].sum()),
        "ranks": order,
        "matrix": matrix,
        "recv_imbalance": max(per["received"]) / mean_r if mean_r else None,
        "send_imbalance": max(per["sent"]) / mean_s if mean_s else None,
        "hot_rank": hot[0]["max_recv_rank"] if hot else None,
        "hot_instances": hot[0]["n"] if hot else 0,
        "hot_recv_imbalance": hot[0]["imb"] if hot else None,
        "per_rank": per_rank,
        "by_step": [{k: r[k] for k in AllToAllStep.__struct_fields__} for r in steps.iter_rows(named=True)],
        "worst": worst.to_dicts(),
        "step_matrices": step_matrices,
        "step_matrices_left_out": left_out,
    }


def _step_matrices(pairs: pl.LazyFrame, order: list[int]) -> tuple[list[dict[str, Any]], int]:
    """Per traced step in order, its instances and bytes by rank pair (``order``'s ranks), as many steps as
    :data:`MAX_STEP_CELLS` holds; and how many steps were left out."""
    stepped = pairs.drop_nulls("step")
    counts = collect(stepped.group_by("step").agg(pl.struct(*_INST).n_unique().alias("instances")).sort("step"))
    n = len(order)
    keep = counts.head(max(1, MAX_STEP_CELLS // (n * n)))
    at = {r: i for i, r in enumerate(order)}
    by = {st: [[0] * n for _ in order] for st in keep["step"].to_list()}
    summed = collect(stepped.filter(pl.col("step").is_in(list(by))).group_by("step", "src", "dst")
                     .agg(pl.col("bytes").sum()))
    for st, src, dst, b in summed.select("step", "src", "dst", "bytes").iter_rows():
        by[st][at[src]][at[dst]] = int(b)
    return ([{"step": st, "instances": k, "matrix": by[st]} for st, k in keep.iter_rows()],
            counts.height - keep.height)


def alltoall_verdicts(report: dict[str, Any]) -> list[str]:
    """Where the bytes, not a slow rank, explain the all-to-all waits: the rank that most often receives the
    most, its median share at those instances, and how many instances its load explains. Example: "rank 1
    receives 2.4× the mean at 3 of 6 all-to-all instances: expert load imbalance, not a straggler (the
    last or longest rank is a loaded one at 5)"."""
    s = _summary(report)
    if not s.instances or s.hot_rank is None or s.hot_recv_imbalance is None:
        return []
    line = (f"rank {s.hot_rank} receives {s.hot_recv_imbalance:.2g}× the mean at {s.hot_instances} of "
            f"{s.instances} all-to-all instances: expert load imbalance")
    if s.explained:
        line += f", not a straggler (the last or longest rank is a loaded one at {s.explained})"
    return [line]


# --- the report's section this module computes (ddprof.analyses.sections) --------------------------------------------

def _summary(report: dict[str, Any]) -> AllToAll:
    return msgspec.convert(report.get("alltoall") or EMPTY, AllToAll)


ALLTOALL_TABLE = Table(
    "All-to-all bytes per rank (over every traced instance)",
    (Column("rank", "rank"), Column("sent", "sent_bytes", fmt_bytes), Column("received", "received_bytes", fmt_bytes),
     Column("recv ÷ mean", "recv_vs_mean", fmt_num), Column("sent ÷ mean", "send_vs_mean", fmt_num)),
    rows=lambda r: _summary(r).per_rank, left=1, when=lambda r: bool(_summary(r).instances), at=75)
ALLTOALL_WORST_TABLE = Table(
    "All-to-all instances, largest receive imbalance first",
    (Column("pg", "pg"), Column("#", "index"), Column("step", "step", fmt_plain), Column("bytes", "bytes", fmt_bytes),
     Column("max recv", "max_recv_rank", fmt_plain), Column("recv imb.", "recv_imbalance", fmt_num),
     Column("send imb.", "send_imbalance", fmt_num), Column("duration", "duration_us", fmt_us),
     Column("last", "last_rank", fmt_plain), Column("longest", "longest_rank", fmt_plain),
     Column("load", "explained", lambda v: "yes" if v else "")),
    rows=lambda r: _summary(r).worst, left=3, when=lambda r: bool(_summary(r).instances),
    more=lambda r: (_summary(r).instances, "the detail table alltoall.parquet"), at=76)

SECTIONS = (
    Section("alltoall", EMPTY, tables=(ALLTOALL_TABLE, ALLTOALL_WORST_TABLE), verdict=alltoall_verdicts,
            verdict_at=19, record=AllToAll, detail=AllToAllRow, order=75,
            cross_table=lambda cross: alltoall_instances(cross.p).drop("heavy", "recv_heavy"),
            cross=lambda cross: alltoall_summary(cross.p, alltoall_instances(cross.p))),
)
