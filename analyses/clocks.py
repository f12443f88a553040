"""Clocks aligned across hosts, estimated from when collectives complete.

Each host stamps its ranks' events with its own clock; ranks on one host share it. Host h's clock reads
``t + offset_h(t)`` when the reference host's reads t; the reference is the host of the lowest rank.

Evidence: the ranks of one collective instance (matched as :func:`collectives.arrivals` matches them,
point-to-point left out) finish within the transfer time of each other: a collective ends on every rank
when its last bytes have moved, whoever arrived last. Per instance i seen on host h and the reference:

* ``d_i = end_h(i) − end_ref(i)``, each host's end the median end of its ranks in i;
* ``T_i`` = the instance's shortest duration across ranks (its transfer time, the wait left out);
* ``t_i = end_ref(i)``, when it happened on the reference clock.

If an instance's ends lie within ``T_i`` of each other, the true offset o lies in ``[d_i − T_i, d_i + T_i]``.

Estimate, per host h with n instances shared with the reference:

* interval: o lies in every instance's interval but the k = n // 10 worst (a tenth of the instances may
  be matched wrongly or disturbed): ``L`` = the (k+1)-th largest ``d_i − T_i``, ``U`` = the (k+1)-th
  smallest ``d_i + T_i``. ``offset = median(d_i)`` clipped into [L, U]; ``bound = max(offset − L,
  U − offset)``: o is within the bound of the offset whenever the model holds. The narrowest transfers
  pin the offset down: one 20 µs all-reduce among 800 µs ones bounds it by about 20 µs;
* drift: a line ``offset(t) = a + b · (t − t0)``, b by Theil–Sen (the median of the pairwise slopes
  ``(d_j − d_i) / (t_j − t_i)``), then a and its bound by the interval rule on ``d_i − b · (t_i − t0)``;
  t0 = the first instance's ``t_i``. Used when the line is consistent (its intervals meet) and the drift
  moves the offset by more than the bound over the run (``|b| · (t_last − t0) > bound``), else the
  constant (``drift_ppm`` 0). A drifting clock is thus estimated, not refused; a clock that steps (no
  line fits) is refused.

**Hosts that share no collective with the reference** (pipeline stages on other hosts, tensor-parallel groups
within a host) are reached through other hosts. Evidence between any two hosts g, h about ``x = o_h − o_g``:

* every collective instance of any process group spanning both (each instance's hosts paired with its
  lowest host): ``x ∈ [d_i − T_i, d_i + T_i]`` as above;
* every matched send/recv pair between them: a receive cannot end before its send began, so a transfer
  g → h gives ``x ≤ recv_end_h − send_start_g`` and one h → g gives ``x ≥ send_start_h − recv_end_g``
  (tight where the receiver waited: a pipeline's neighbours exchange both ways every micro-batch).

Per pair, ``[L, U]`` by the interval rule on the lower and the upper ends separately (each side's
k = n // 10 worst dropped); the estimate is the collectives' median d clipped into it, else its midpoint;
the bound its distance to the farther end. A pair needs :data:`MIN_INSTANCES` pieces of evidence and
L ≤ U. A host is then reached from the reference along the pairs whose bounds add up least (offsets and
bounds add along the path; no drift). This estimate is used when the direct one above is not applied
for want of shared collectives or being within its bound (a contradiction found directly stays refused).

Example (the README's generated pipeline): host node003 (stage 1) shares data-parallel all-reduces with
node002 and exchanges activations and gradients with node001 (stage 0), which shares all-reduces with the
reference node000: node003 = node001 + (node003 − node001), each pair bounded by its narrowest transfers.

Applied or refused, per host (``reason`` says which and why):

* one host only, or the run names no host (or not one for every rank): nothing to align;
* fewer than :data:`MIN_INSTANCES` instances shared with the reference and no path through other hosts:
  too little evidence;
* L > U for the constant and for the line: the end times contradict any one offset or steady drift
  (a clock step, instances matched wrongly): left as traced;
* ``|offset(t)| ≤ bound`` over the whole run: the offset is not told apart from zero; left as traced;
* else applied: every timestamp of the host's ranks becomes ``ts − offset_ns − round(b · (ts − t0))``
  (durations kept: a drift of b stretches them by a factor 1 + b, parts per million).

Example: 2 hosts, 12 all-reduces of 800 µs transfer each, host B's ranks ending 5,000 µs after host
A's every time -> host B: offset_ns 5,000,000, bound_ns 800,000, instances 12, applied; B's events move
5 ms earlier, and arrivals and waits compare the same instants.

The report section (:func:`ClockEstimate.section`)::

    clocks: {applied: bool, reason: str, reference: host | null,
             hosts: [{host, ranks, offset_ns, drift_ppm, t0_ns, bound_ns, instances, applied, reason}]}

``applied`` is true when any host was aligned; ``hosts`` lists every host but the reference (empty when
there is nothing to align). Offsets are signed: positive when the host's clock runs ahead of the
reference's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl
from ddprof.analyses.collectives import arrivals, comm_rows
from ddprof.analyses.frames.memo import Events, Prepared, collect, prepare
from ddprof.analyses.frames.sets import rank_spans
from ddprof.analyses.frames.windows import trace_windows
from ddprof.analyses.sections import Section

from ddprof.report.schema import Clocks
from ddprof.vocabulary.units import NS_PER_US

#: Fewest collective instances a host must share with the reference to be aligned.
MIN_INSTANCES = 8
#: Points the Theil–Sen slope is fitted on at most (evenly spread over the run): O(n²) pairs.
_FIT_POINTS = 300
_INST = ["group", "src", "dst", "index"]
#: How the reason of a host whose evidence contradicts any one offset begins (such a host stays refused).
_CONTRADICTION = "the collectives' end times disagree"


@dataclass(frozen=True)
class HostClock:
    """One host's clock against the reference (module doc): ``offset(t) = offset_ns + drift · (t − t0_ns)``
    with ``drift = drift_ppm / 1e6``."""

    host: str
    ranks: list[int]
    offset_ns: int
    drift_ppm: float
    t0_ns: int
    bound_ns: int
    instances: int
    applied: bool
    reason: str
    via: list[str] = field(default_factory=list)

    def max_offset_ns(self, first_ns: int, last_ns: int) -> float:
        slope = self.drift_ppm / 1e6
        return max(abs(self.offset_ns + slope * (t - self.t0_ns)) for t in (first_ns, last_ns))


@dataclass(frozen=True)
class ClockEstimate:
    """Per-host clocks of a run and whether they were applied (module doc)."""

    reference: str | None
    reason: str
    hosts: list[HostClock] = field(default_factory=list)

    @property
    def applied(self) -> bool:
        return any(h.applied for h in self.hosts)

    def corrections(self) -> dict[int, HostClock]:
        """Rank -> the clock to correct its timestamps by, for the ranks of the aligned hosts only."""
        return {r: h for h in self.hosts if h.applied for r in h.ranks}

    def section(self) -> dict[str, Any]:
        """The report's ``clocks`` section."""
        return {"applied": self.applied, "reason": self.reason, "reference": self.reference,
                "hosts": [dict(vars(h)) for h in self.hosts]}

    def warnings(self) -> list[str]:
        """One sentence per aligned host, for the run's warnings."""
        out = []
        for h in self.hosts:
            if h.applied:
                ahead = "ahead of" if h.offset_ns > 0 else "behind"
                drift = f", drifting {h.drift_ppm:+.2f} ppm" if h.drift_ppm else ""
                source = (f"{h.instances} collectives and send/recv transfers, through host(s) {', '.join(h.via)}"
                          if h.via else f"{h.instances} collectives")
                out.append(f"clocks: host {h.host}'s clock runs {abs(h.offset_ns) / NS_PER_US:,.1f} µs {ahead} "
                           f"host {self.reference}'s (± {h.bound_ns / NS_PER_US:,.1f} µs, from {source}"
                           f"{drift}); the timestamps of ranks {_ranks(h.ranks)} are aligned to it")
        return out


NOT_ESTIMATED = ClockEstimate(reference=None, reason="no traced events: clocks not estimated")


def _ranks(ranks: list[int]) -> str:
    return ", ".join(map(str, ranks[:16])) + (f" ... ({len(ranks)} in all)" if len(ranks) > 16 else "")


def run_hosts(manifest: Mapping[str, Any]) -> dict[int, str]:
    """Rank -> host, from a run manifest's ``hosts`` (written from the collector's files)."""
    return {int(r): str(h) for r, h in (manifest.get("hosts") or {}).items() if h is not None}


def _theil_sen(t: np.ndarray, d: np.ndarray) -> float:
    """Median of the pairwise slopes (points with equal t skipped); on at most :data:`_FIT_POINTS` points."""
    if len(t) > _FIT_POINTS:
        pick = np.linspace(0, len(t) - 1, _FIT_POINTS).round().astype(int)
        t, d = t[pick], d[pick]
    i, j = np.triu_indices(len(t), k=1)
    dt = t[j] - t[i]
    ok = dt != 0
    return float(np.median((d[j] - d[i])[ok] / dt[ok])) if ok.any() else 0.0


def _interval(r: np.ndarray, transfer: np.ndarray) -> tuple[float, float, float]:
    """(offset, bound, excess) from residual offsets r_i and transfer times T_i (module doc): the offset
    lies in every ``[r_i − T_i, r_i + T_i]`` but the k = n // 10 worst; ``[L, U]`` = the k-th largest
    lower end and the k-th smallest upper end. offset = median(r) clipped into [L, U]; bound = its distance
    to the farther end. ``excess = L − U`` > 0 when no offset fits (the intervals do not meet)."""
    k = len(r) // 10
    lower = float(np.sort(r - transfer)[::-1][k])
    upper = float(np.sort(r + transfer)[k])
    offset = min(max(float(np.median(r)), lower), upper) if lower <= upper else float(np.median(r))
    return offset, max(offset - lower, upper - offset, 0.0), lower - upper


def _fit(host: str, ranks: list[int], t: np.ndarray, d: np.ndarray, transfer: np.ndarray,
         span: tuple[int, int], base: int) -> HostClock:
    """One host's clock from its instances' (t_i, d_i, T_i), sorted by t, times relative to ``base``
    (floats: exact below 2**53 ns, about 104 days), and the run's span on that scale (module doc)."""
    n = len(t)
    t0 = base + (int(t[0]) if n else 0)
    if n < MIN_INSTANCES:
        return HostClock(host, ranks, 0, 0.0, t0, 0, n, False,
                         f"only {n} collective(s) shared with the reference host; at least {MIN_INSTANCES} "
                         "are needed to estimate an offset: clocks left as traced")
    x = t - t[0]
    offset, bound, excess = _interval(d, transfer)
    slope = _theil_sen(x, d)
    a, drift_bound, drift_excess = _interval(d - slope * x, transfer)
    drift = drift_excess <= 0 and abs(slope) * float(x[-1]) > drift_bound
    if drift:
        offset, bound, excess = a, drift_bound, drift_excess
    clock = HostClock(host, ranks, round(offset), slope * 1e6 if drift else 0.0, t0, round(bound), n, False, "")
    if excess > 0:
        why = (f"{_CONTRADICTION} by {excess / NS_PER_US:,.1f} µs more than their transfer "
               "times allow, for any one offset or steady drift (a clock step, or instances matched wrongly): "
               "clocks left as traced")
        return HostClock(**{**vars(clock), "reason": why})
    worst = clock.max_offset_ns(base + span[0], base + span[1])
    if worst <= clock.bound_ns:
        why = (f"offset {worst / NS_PER_US:,.1f} µs is within its bound ± {clock.bound_ns / NS_PER_US:,.1f} µs: "
               "not told apart from zero; clocks left as traced")
        return HostClock(**{**vars(clock), "reason": why})
    what = f"offset and drift ({clock.drift_ppm:+.2f} ppm)" if drift else "offset"
    why = (f"{what} estimated from {n} collectives, beyond their transfer times; "
           "aligned to the reference host's clock")
    return HostClock(**{**vars(clock), "applied": True, "reason": why})


def estimate(events: Events, hosts: Mapping[int, str]) -> ClockEstimate:
    """Per-host clock offsets of a run from its collectives (module doc). ``hosts``: rank -> host."""
    p = prepare(events)
    spans = rank_spans(p)
    traced = sorted(spans["rank"].to_list())
    if not traced:
        return NOT_ESTIMATED
    named = {r: hosts[r] for r in traced if r in hosts}
    if not named:
        return ClockEstimate(None, "the run names no host for its ranks: its clocks are taken as one")
    unnamed = [r for r in traced if r not in named]
    if unnamed:
        return ClockEstimate(None, f"no host known for rank(s) {_ranks(unnamed)}: clocks left as traced")
    host_ranks: dict[str, list[int]] = {}
    for r in traced:
        host_ranks.setdefault(named[r], []).append(r)
    reference = named[traced[0]]
    if len(host_ranks) == 1:
        return ClockEstimate(reference, f"one host ({reference}): its ranks share one clock")
    clocks = _host_clocks(p, named, host_ranks, reference, spans)
    aligned = [h.host for h in clocks if h.applied]
    why = (f"host(s) {', '.join(aligned)} aligned to host {reference}'s clock" if aligned
           else "no host's clock told apart from the reference's: clocks left as traced (each host's reason)")
    return ClockEstimate(reference, why, clocks)


def _host_clocks(p: Prepared, named: dict[int, str], host_ranks: dict[str, list[int]], reference: str,
                 spans: pl.DataFrame) -> list[HostClock]:
    """One :class:`HostClock` per host but the reference: the direct estimate, or where it is not applied
    for want of evidence or of distance from zero, the one through other hosts (module doc)."""
    host_of = pl.DataFrame({"rank": list(named), "host": list(named.values())},
                           schema={"rank": pl.Int32(), "host": pl.String()})
    base = int(spans["first_ns"].min())  # type: ignore[arg-type]  # times as floats from here: relative
    per_host = collect(
        arrivals(p).lazy().filter(pl.col("match_op") != "sendrecv")
        .join(host_of.lazy(), on="rank")
        .with_columns(pl.col("dur_ns").min().over(_INST).alias("transfer"))
        .group_by(*_INST, "host")
        .agg((pl.col("end_ns") - base).median().alias("end"), pl.col("transfer").first())
    )
    ref = per_host.filter(pl.col("host") == reference).select(*_INST, pl.col("end").alias("t"))
    shared = collect(
        per_host.lazy().filter(pl.col("host") != reference)
        .join(ref.lazy(), on=_INST, nulls_equal=True)
        .select("host", "t", (pl.col("end") - pl.col("t")).alias("d"), "transfer")
        .sort("host", "t")
    )
    span = (0, int(spans["last_ns"].max()) - base)  # type: ignore[arg-type]
    out = []
    for host in sorted(h for h in host_ranks if h != reference):
        rows = shared.filter(pl.col("host") == host)
        out.append(_fit(host, host_ranks[host], rows["t"].to_numpy().astype(np.float64),
                        rows["d"].to_numpy().astype(np.float64), rows["transfer"].to_numpy().astype(np.float64),
                        span, base))
    if all(h.applied or h.reason.startswith(_CONTRADICTION) for h in out):
        return out
    paths = _paths(_pair_evidence(p, per_host, host_of, base), reference)
    return [_through(h, paths.get(h.host), span, base) for h in out]


@dataclass(frozen=True)
class _Edge:
    """The offset between two hosts, ``o_b − o_a``, from the evidence between them (module doc)."""

    a: str
    b: str
    offset: float
    bound: float
    evidence: int


def _pair_evidence(p: Prepared, per_host: pl.DataFrame, host_of: pl.DataFrame, base: int) -> list[_Edge]:
    """Every pair of hosts with enough consistent evidence between them: collectives of any group (each
    instance's hosts paired with its lowest host) and send/recv causality (module doc)."""
    lows: dict[tuple[str, str], list[np.ndarray]] = {}
    ups: dict[tuple[str, str], list[np.ndarray]] = {}
    ds: dict[tuple[str, str], list[np.ndarray]] = {}
    star = collect(
        per_host.lazy().with_columns(pl.col("host").min().over(_INST).alias("__a"))
        .join(per_host.lazy().select(*_INST, pl.col("host").alias("__a"), pl.col("end").alias("__a_end")),
              on=[*_INST, "__a"], nulls_equal=True)
        .filter(pl.col("host") != pl.col("__a"))
        .select(pl.col("__a").alias("a"), pl.col("host").alias("b"), (pl.col("end") - pl.col("__a_end")).alias("d"),
                "transfer")
    )
    for (a, b), g in star.group_by("a", "b"):
        d, t = g["d"].to_numpy().astype(np.float64), g["transfer"].to_numpy().astype(np.float64)
        key = (str(a), str(b))
        lows.setdefault(key, []).append(d - t)
        ups.setdefault(key, []).append(d + t)
        ds.setdefault(key, []).append(d)
    rows = comm_rows(p).lazy().filter((pl.col("match_op") == "sendrecv") & pl.col("src").is_not_null())
    hosts = host_of.lazy()
    sends = rows.filter(pl.col("rank") == pl.col("src")).select(*_INST, (pl.col("ts_ns") - base).alias("send_start"))
    recvs = rows.filter(pl.col("rank") == pl.col("dst")).select(*_INST, (pl.col("ts_ns") + pl.col("dur_ns") - base)
                                                                .alias("recv_end"))
    pairs = collect(
        sends.join(recvs, on=_INST, nulls_equal=True)
        .join(hosts.select(pl.col("rank").alias("src"), pl.col("host").alias("g")), on="src")
        .join(hosts.select(pl.col("rank").alias("dst"), pl.col("host").alias("h")), on="dst")
        .filter(pl.col("g") != pl.col("h"))
        .select("g", "h", (pl.col("recv_end") - pl.col("send_start")).alias("gap"))
    )
    for (g_key, h_key), grp in pairs.group_by("g", "h"):
        gap = grp["gap"].to_numpy().astype(np.float64)
        sender, receiver = str(g_key), str(h_key)
        if sender < receiver:  # x = o_h − o_g ≤ recv_end_h − send_start_g
            ups.setdefault((sender, receiver), []).append(gap)
        else:  # pair (h, g): x = o_g − o_h ≥ send_start_g − recv_end_h = −gap
            lows.setdefault((receiver, sender), []).append(-gap)
    edges = []
    for key in sorted(set(lows) | set(ups)):
        lo = np.concatenate(lows.get(key, [np.empty(0)]))
        up = np.concatenate(ups.get(key, [np.empty(0)]))
        collectives = sum(len(d) for d in ds.get(key, []))
        n = len(lo) + len(up) - collectives  # a collective bounds both sides; a send/recv pair one
        if not len(lo) or not len(up) or n < MIN_INSTANCES:
            continue
        lower = float(np.sort(lo)[::-1][len(lo) // 10])
        upper = float(np.sort(up)[len(up) // 10])
        if lower > upper:
            continue
        mid = float(np.median(np.concatenate(ds[key]))) if ds.get(key) else (lower + upper) / 2
        offset = min(max(mid, lower), upper)
        edges.append(_Edge(key[0], key[1], offset, max(offset - lower, upper - offset, 0.0), n))
    return edges


def _paths(edges: list[_Edge], reference: str) -> dict[str, tuple[float, float, int, list[str]]]:
    """Host -> (offset from the reference, bound, evidence, hosts passed through), along the path whose
    bounds add up least (Dijkstra over :func:`_pair_evidence`'s pairs)."""
    adj: dict[str, list[tuple[str, float, float, int]]] = {}
    for e in edges:
        adj.setdefault(e.a, []).append((e.b, e.offset, e.bound, e.evidence))
        adj.setdefault(e.b, []).append((e.a, -e.offset, e.bound, e.evidence))
    best: dict[str, tuple[float, float, int, list[str]]] = {reference: (0.0, 0.0, 0, [])}
    todo = [(0.0, reference)]
    done: set[str] = set()
    while todo:
        todo.sort()
        bound, host = todo.pop(0)
        if host in done:
            continue
        done.add(host)
        offset, _, evidence, via = best[host]
        for nxt, off, b, n in adj.get(host, []):
            cand = (offset + off, bound + b, evidence + n, via + ([host] if host != reference else []))
            if nxt not in best or cand[1] < best[nxt][1]:
                best[nxt] = cand
                todo.append((cand[1], nxt))
    best.pop(reference)
    return best


def _through(direct: HostClock, path: tuple[float, float, int, list[str]] | None, span: tuple[int, int],
             base: int) -> HostClock:
    """The direct estimate where it is applied or refused for a contradiction; else the one through other
    hosts when it tells the offset apart from zero (module doc)."""
    if path is None and direct.instances < MIN_INSTANCES:
        return HostClock(**{**vars(direct), "reason": direct.reason.replace(
            ": clocks left as traced", ", and no other host links it to the reference (collectives of any "
            "group, send/recv transfers: at least 8 bounding a pair of hosts on both sides): clocks left as traced")})
    if direct.applied or path is None or direct.reason.startswith(_CONTRADICTION):
        return direct
    offset, bound, evidence, via = path
    route = "directly" if not via else f"through host(s) {', '.join(via)}"
    if abs(offset) <= bound:
        if direct.instances >= MIN_INSTANCES:
            return direct
        why = (f"offset {abs(offset) / NS_PER_US:,.1f} µs, estimated {route} from {evidence} collectives and "
               f"send/recv transfers, is within its bound ± {bound / NS_PER_US:,.1f} µs: not told apart from zero; "
               "clocks left as traced")
        return HostClock(direct.host, direct.ranks, round(offset), 0.0, base + span[0], round(bound), evidence,
                         False, why, via)
    return HostClock(direct.host, direct.ranks, round(offset), 0.0, base + span[0], round(bound), evidence, True,
                     f"offset estimated {route} from {evidence} collectives and send/recv transfers, beyond "
                     "their bound; aligned to the reference host's clock", via)


def aligned_ts(corrections: Mapping[int, HostClock]) -> pl.Expr:
    """``ts_ns`` on the reference clock: each corrected rank's timestamps less its host's offset at that
    time, ``ts − offset_ns − round(drift · (ts − t0_ns))``; other ranks' as they are."""
    ts = pl.col("ts_ns")
    if not corrections:
        return ts
    rank = pl.col("rank")

    def per_rank(value: Mapping[int, float | int], dtype: pl.DataType) -> pl.Expr:
        return rank.replace_strict(dict(value), default=0, return_dtype=dtype)

    offset = per_rank({r: h.offset_ns for r, h in corrections.items()}, pl.Int64())
    expr = ts - offset
    drifting = {r: h for r, h in corrections.items() if h.drift_ppm}
    if drifting:
        slope = per_rank({r: h.drift_ppm / 1e6 for r, h in drifting.items()}, pl.Float64())
        t0 = per_rank({r: h.t0_ns for r, h in drifting.items()}, pl.Int64())
        expr = expr - (slope * (ts - t0).cast(pl.Float64)).round().cast(pl.Int64)
    return expr.alias("ts_ns")


def _moved(frame: pl.DataFrame, expr: pl.Expr, *columns: str) -> pl.DataFrame:
    """``frame`` (with a ``rank`` column) with each time column in ``columns`` put through ``expr``."""
    return frame.with_columns(
        frame.select("rank", pl.col(c).alias("ts_ns")).with_columns(expr)["ts_ns"].alias(c) for c in columns)


def align(events: Events, clock: ClockEstimate) -> Prepared:
    """The events with the applied offsets taken off (a new :class:`Prepared`), or ``events`` prepared as
    they are when nothing was applied. The rank spans move with their ranks, and so do the profiling
    windows where they were provided (a run's manifest holds them on the traces' clocks)."""
    p = prepare(events)
    fix = clock.corrections()
    if not fix:
        return p
    expr = aligned_ts(fix)
    out = Prepared(p.events.with_columns(expr))
    out.provide(rank_spans, _moved(rank_spans(p), expr, "first_ns", "last_ns"))
    windows = p.known(trace_windows)
    if windows is not None:
        out.provide(trace_windows, _moved(windows, expr, "t_start", "t_end"))
    return out


# --- the report's sections this module computes (ddprof.analyses.sections) ------------------------------------------

SECTIONS = (
    Section("clocks", NOT_ESTIMATED.section(), analysed=False, record=Clocks, order=140),
)
