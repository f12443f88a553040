"""Link classes: every collective instance classified by what its ranks span, its bus bandwidth by class and
message size beside the class's reference peak (docs/DESIGN.md §3).

**Span**: ``intra-node`` when every rank of the instance ran on one host, ``inter-node`` when they ran on
several (the manifest's per-rank host, from the collectors' meta files), ``unknown`` when a rank's host is
not known. **Link**: for an intra-node instance, the device link the GPU model implies (the traces'
``deviceProperties`` name, :data:`DEVICE_LINKS`: NVLink, xGMI, PCIe); ``network`` between nodes (a CPU run's too: gloo over sockets); ``cpu``
within a node on a CPU run (gloo over loopback); ``unknown`` otherwise.

**Reference peak** (:data:`PEAK_BUSBW_GBPS`): roughly what nccl-tests / rccl-tests report as all-reduce bus
bandwidth at large messages on a full 8-GPU node of that part, rounded; a yardstick for "far below what
this link does", not a specification. Assumptions and sources:

* V100 SXM2, NVLink2 (DGX-1: 6 links × 25 GB/s a direction, hybrid cube mesh): ~150 GB/s;
* A100 SXM4, NVLink3 (12 links × 25 GB/s, NVSwitch): ~230 GB/s (nccl-tests on DGX A100);
* H100/H200 SXM5, NVLink4 (18 links × 25 GB/s, NVSwitch): ~360 GB/s without NVLS (DGX H100);
* B200, NVLink5 (18 links × 50 GB/s): ~720 GB/s (twice NVLink4, assumed);
* MI250X / MI250, xGMI (Infinity Fabric, 50 GB/s links between GCDs): ~150 GB/s (rccl-tests on 8 GCDs);
* MI300X, xGMI (Infinity Fabric, 7 links × 64 GB/s a GPU): ~300 GB/s (rccl-tests on 8 GPUs);
* PCIe gen4 x16 cards (A10, A40, L4, T4 on gen3, RTX): ~24 GB/s; gen5 x16 (L40S, H100 PCIe without a
  bridge): ~48 GB/s.

Between nodes the link is the network, whose rate no trace names: no peak, no finding.

**Finding**: a class (span, link, op) whose mean busbw at messages of at least :data:`LARGE_BYTES` is
below half its reference peak: "intra-node NVLink4 all_reduce of 25 MiB reaches 98 GB/s bus bandwidth,
27 % of the ~360 GB/s reference for NVLink4 (H100)". Busbw follows nccl-tests (§3): ``bytes / shortest
duration · factor``.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import polars as pl
from ddprof.analyses.sections import Section
from msgspec import Meta

from ddprof.report.display import Column, Table
from ddprof.report.schema import Row, RunSection
from ddprof.vocabulary.units import fmt_bytes, fmt_num, fmt_pct, fmt_plain

#: Messages from this size on are "large": nccl-tests' busbw is near its plateau there.
LARGE_BYTES = 16 << 20
#: GPU model (a substring of the device name, lower case, first match wins) -> (link, the part it names).
DEVICE_LINKS: tuple[tuple[str, str, str], ...] = (
    ("h100 pcie", "PCIe gen5", "H100 PCIe"), ("l40s", "PCIe gen5", "L40S"),
    ("v100", "NVLink2", "V100"), ("a100", "NVLink3", "A100"), ("h100", "NVLink4", "H100"),
    ("h200", "NVLink4", "H200"), ("gh200", "NVLink4", "GH200"), ("b200", "NVLink5", "B200"),
    ("mi250", "xGMI", "MI250"), ("mi300", "xGMI (MI300)", "MI300X"),
    ("a10", "PCIe gen4", "A10"), ("a40", "PCIe gen4", "A40"), ("l4", "PCIe gen4", "L4"),
    ("t4", "PCIe gen3", "T4"), ("rtx", "PCIe gen4", "RTX"),
)
#: Reference all-reduce bus bandwidth at large messages, GB/s, per link (module doc: sources, assumptions).
PEAK_BUSBW_GBPS: dict[str, float] = {
    "NVLink2": 150.0, "NVLink3": 230.0, "NVLink4": 360.0, "NVLink5": 720.0, "xGMI": 150.0,
    "xGMI (MI300)": 300.0, "PCIe gen3": 12.0, "PCIe gen4": 24.0, "PCIe gen5": 48.0,
}


class LinkClassRow(Row):
    """The collective instances of one link class, op and message size."""

    span: Annotated[str, Meta(description="intra-node, inter-node or unknown (the ranks' hosts)")]
    link: Annotated[str, Meta(description="NVLink2-5, xGMI, PCIe genN, network, cpu or unknown")]
    device: Annotated[str | None, Meta(description="the GPU part the link is read from")]
    op: Annotated[str, Meta(description="all_reduce, all_to_all, ...")]
    bytes: Annotated[int, Meta(description="message size")]
    n: Annotated[int, Meta(description="ranks taking part")]
    count: Annotated[int, Meta(description="instances")]
    busbw_gbps: Annotated[float | None, Meta(description="mean bus bandwidth, GB/s (nccl-tests)")]
    peak_busbw_gbps: Annotated[float | None, Meta(description="the link's reference peak, GB/s; null where none")]
    pct_of_peak: Annotated[float | None, Meta(description="busbw ÷ peak, %")]


def device_link(name: str | None) -> tuple[str, str] | None:
    """(link, part) of a GPU's device name. Example: "NVIDIA H100 80GB HBM3" -> ("NVLink4", "H100")."""
    low = (name or "").lower()
    for key, link, part in DEVICE_LINKS:
        if key in low:
            return link, part
    return None


def link_classes(instances: pl.DataFrame, run: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``links`` section: the ``collectives`` detail table's instances by (span, link, op, bytes, n),
    with their mean busbw and the link's reference peak (module doc). ``run``: the report's run section
    (its per-rank hosts and device names)."""
    if instances.height == 0 or "ranks_seen" not in instances.columns:
        return []
    summary = msgspec.convert(run, RunSection)
    host = {r.rank: r.host for r in summary.per_rank}
    devices = {r.rank: r.device_names for r in summary.per_rank}
    cpu = summary.device == "cpu"
    classes: dict[tuple[int, ...], tuple[str, str, str | None]] = {}

    def classify(ranks: list[int]) -> tuple[str, str, str | None]:
        key = tuple(ranks)
        if key not in classes:
            hosts = {host.get(r) for r in ranks}
            span = "unknown" if None in hosts or not hosts else "intra-node" if len(hosts) == 1 else "inter-node"
            found = {device_link(d) for r in ranks for d in devices.get(r, [])} - {None}
            part = next(iter(found)) if len(found) == 1 else None
            if span == "inter-node":
                link: str = "network"
            elif cpu:
                link = "cpu"
            elif span == "intra-node" and part is not None:
                link = part[0]
            else:
                link = "unknown"
            classes[key] = (span, link, part[1] if part is not None else None)
        return classes[key]

    ok = instances.filter(pl.col("bytes").is_not_null() & (pl.col("duration_us") > 0))
    labels = [classify(sorted(r)) for r in ok["ranks_seen"].to_list()]
    frame = ok.select("op", "bytes", "n", "busbw_gbps").with_columns(
        span=pl.Series([x[0] for x in labels], dtype=pl.String), link=pl.Series([x[1] for x in labels], dtype=pl.String),
        device=pl.Series([x[2] for x in labels], dtype=pl.String))
    grouped = (frame.group_by("span", "link", "device", "op", "bytes", "n")
               .agg(pl.len().alias("count"), pl.col("busbw_gbps").mean())
               .with_columns(peak_busbw_gbps=pl.col("link").replace_strict(
                   list(PEAK_BUSBW_GBPS), list(PEAK_BUSBW_GBPS.values()), default=None, return_dtype=pl.Float64))
               .with_columns(pct_of_peak=100 * pl.col("busbw_gbps") / pl.col("peak_busbw_gbps"))
               .sort("span", "link", "op", "bytes", "n"))
    return [{k: r[k] for k in LinkClassRow.__struct_fields__} for r in grouped.iter_rows(named=True)]


def link_verdicts(report: dict[str, Any]) -> list[str]:
    """A class below half its reference peak at large messages, per (span, link, op): its largest message.
    Example: "intra-node NVLink4 all_reduce of 25 MiB reaches 98 GB/s bus bandwidth, 27 % of the ~360 GB/s
    reference for NVLink4 (H100)"."""
    worst: dict[tuple[str, str, str], LinkClassRow] = {}
    for row in msgspec.convert(report.get("links") or [], list[LinkClassRow]):
        if row.bytes < LARGE_BYTES or row.pct_of_peak is None or row.busbw_gbps is None:
            continue
        key = (row.span, row.link, row.op)
        if key not in worst or row.bytes > worst[key].bytes:
            worst[key] = row
    return [f"{r.span} {r.link} {r.op} of {fmt_bytes(r.bytes)} reaches {r.busbw_gbps:.3g} GB/s bus bandwidth, "
            f"{r.pct_of_peak:.0f} % of the ~{r.peak_busbw_gbps:.0f} GB/s reference for {r.link}"
            + (f" ({r.device})" if r.device else "") for r in worst.values() if (r.pct_of_peak or 0) < 50]


LINKS_TABLE = Table(
    "Bus bandwidth by link class (reference peaks: analyses/links.py)",
    (Column("span", "span"), Column("link", "link"), Column("op", "op"), Column("size", "bytes", fmt_bytes),
     Column("ranks", "n", fmt_plain), Column("count", "count"), Column("busbw GB/s", "busbw_gbps", fmt_num),
     Column("peak GB/s", "peak_busbw_gbps", fmt_num), Column("of peak", "pct_of_peak", fmt_pct)),
    rows=lambda r: msgspec.convert(r.get("links") or [], list[LinkClassRow]), left=3, at=71)

SECTIONS = (
    Section("links", [], analysed=False, tables=(LINKS_TABLE,), verdict=link_verdicts, verdict_at=61,
            record=list[LinkClassRow], order=85),
)
