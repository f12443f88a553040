"""Reconcile per-file results into one run and describe it in ``manifest.json``.

Rules (each refusal is recorded against the files concerned, the other ranks stay):

* files of different jobs are refused: the world size most files agree on wins, the others fail;
* several files may hold one rank only if their time ranges do not overlap (several profiling
  windows of one job: kept as the rank's parts, without a warning); overlapping files claiming one rank
  all fail, naming each other.

A trace's world size is a claim to check (:func:`~ddprof.ingestion.world.checked_world_size`): a positive integer no larger
than :data:`~ddprof.ingestion.world.MAX_WORLD_SIZE`, else it is ignored with a warning naming the value. Missing ranks are kept
as ranges (``0-3, 9-1023``), never expanded one by one.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ddprof.ingestion.job import FileResult
from ddprof.ingestion.world import checked_world_size, format_ranges, missing_ranges
from ddprof.store.rundir import RUN_FORMAT
from ddprof.store.schema import SCHEMA_VERSION
from ddprof.version import __version__
from ddprof.vocabulary.units import NS_PER_US, fmt_us


def _fail(res: FileResult, why: str) -> None:
    res.status = "failed"
    res.error = f"{res.path}: rank {res.rank}: {why}"


def reconcile(results: dict[str, FileResult]) -> list[str]:
    """Apply the run-level rules in place; return run-level warnings."""
    warnings: list[str] = []
    ok = [r for r in results.values() if r.status == "ok"]
    sizes = Counter(r.world_size for r in ok if r.world_size is not None)
    if len(sizes) > 1:
        (world, _), *_ = sizes.most_common()
        for r in ok:
            if r.world_size is not None and r.world_size != world:
                _fail(r, f"world_size {r.world_size} differs from the {sizes[world]} other trace(s) "
                         f"(world_size {world}): traces of different jobs cannot be analysed as one run")
    by_rank: dict[int, list[FileResult]] = defaultdict(list)
    for r in results.values():
        if r.status == "ok" and r.rank is not None:
            by_rank[r.rank].append(r)
    for rank, group in by_rank.items():
        if len(group) < 2:
            continue
        group.sort(key=lambda r: r.first_ns or 0)
        clash = any((a.last_ns or 0) > (b.first_ns or 0) for a, b in zip(group, group[1:]))
        if clash:
            names = ", ".join(Path(r.path).name for r in group)
            for r in group:
                _fail(r, f"{len(group)} traces claim rank {rank} over the same time span ({names}); "
                         "map them with --rank FILE=N or ingest them into separate runs")
            continue
        # traces one after another are profiling windows of the rank (a triggered run's expected outcome, not
        # a warning): the report's rank table counts them and its health notes the untraced gaps between them;
        # unless they are not of one machine and job (another GPU model, NCCL or backend), or days apart
        differs = _mismatch(group)
        if differs:
            names = ", ".join(Path(r.path).name for r in group)
            for r in group:
                _fail(r, f"{len(group)} traces claim rank {rank} but are not of one machine and job ({names}: "
                         f"{differs}); map them with --rank FILE=N or ingest them into separate runs")
            continue
        apart = _days_apart(group)
        if apart:
            warnings.append(f"rank {rank}: its traces {apart}; read as profiling windows of one rank")
    return warnings


#: Traces of one rank further apart than this (wall-clock) are not taken for windows of one run unwarned.
WINDOWS_APART_NS = 24 * 3600 * 10**9


def _mismatch(group: list[FileResult]) -> str:
    """What differs between traces that claim one rank, in words (empty when nothing does): the GPU model,
    the NCCL version, the backend, each compared where both traces record it.

    >>> a = FileResult("a.json", 1, 0, device_names=["NVIDIA A100-SXM4-80GB"])
    >>> _mismatch([a, FileResult("b.json", 1, 0, device_names=["NVIDIA H100 80GB HBM3"])])
    'the GPU model differs: a.json NVIDIA A100-SXM4-80GB, b.json NVIDIA H100 80GB HBM3'
    """
    out = []
    for what, value in (("the GPU model", lambda r: ", ".join(sorted(set(r.device_names))) or None),
                        ("the NCCL version", lambda r: r.nccl_version), ("the backend", lambda r: r.backend)):
        seen = [(Path(r.path).name, value(r)) for r in group]
        if len({v for _, v in seen if v}) > 1:
            out.append(f"{what} differs: " + ", ".join(f"{n} {v or 'not recorded'}" for n, v in seen))
    return "; ".join(out)


#: Event times from this many ns up read as wall-clock time since the epoch (2001 on): older profilers
#: wrote them so, with no ``baseTimeNanoseconds``.
EPOCH_NS = 10**18


def _wall_ns(r: FileResult, ns: int | None) -> int | None:
    """``ns`` of ``r``'s events as wall-clock ns since the epoch: with its base, or as written when it
    reads as such (:data:`EPOCH_NS`); None when it cannot tell."""
    if ns is None:
        return None
    if r.base_time_ns is not None:
        return r.base_time_ns + ns
    return ns if ns >= EPOCH_NS else None


def _days_apart(group: list[FileResult]) -> str:
    """Traces of one rank (in time order) whose wall-clock times (``baseTimeNanoseconds`` + event time, or
    event times that are wall-clock already) lie more than :data:`WINDOWS_APART_NS` apart, in words; else
    empty."""
    for a, b in zip(group, group[1:]):
        end, start = _wall_ns(a, a.last_ns), _wall_ns(b, b.first_ns)
        if end is None or start is None:
            continue
        gap = start - end
        if gap > WINDOWS_APART_NS:
            when = lambda r: datetime.fromtimestamp(_wall_ns(r, r.first_ns) / 1e9, timezone.utc)  # type: ignore[operator]  # noqa: E731
            return (f"{Path(a.path).name} ({when(a):%Y-%m-%d %H:%M} UTC) and {Path(b.path).name} "
                    f"({when(b):%Y-%m-%d %H:%M} UTC) are {fmt_us(gap / NS_PER_US)} apart")
    return ""


def source_record(r: FileResult) -> dict[str, Any]:
    """A file's result as the manifest keeps it under ``sources``: its process groups by name only
    (``pg_names``), the groups themselves once, in the manifest's ``process_groups``. Each trace of a job
    lists every group with its member ranks, so one copy per file made the manifest grow with the square of
    the ranks (40 MB at 1,024 ranks, 0.2 GB of Python objects each time a run dir was opened)."""
    record = r.to_dict()
    record["pg_names"] = [str(pg.get("pg_name")) for pg in record.pop("pg_config") if isinstance(pg, dict)]
    return record


def previous_results(manifest: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The manifest's ``sources`` records as :class:`FileResult` fields: each with its process groups again
    (``pg_config``, from the manifest's ``process_groups`` by name: :func:`source_record`)."""
    groups = {str(g.get("pg_name")): g for g in manifest.get("process_groups") or [] if isinstance(g, dict)}
    out = {}
    for key, record in (manifest.get("sources") or {}).items():
        if isinstance(record, dict):
            names = record.get("pg_names") or []
            out[key] = {**record, "pg_config": [groups[n] for n in names if n in groups]}
    return out


def build_manifest(results: dict[str, FileResult], rank_map: dict[str, int] | None) -> dict[str, Any]:
    warnings = reconcile(results)
    ok = sorted((r for r in results.values() if r.status == "ok"), key=lambda r: (r.rank, r.first_ns or 0))
    per_rank: dict[str, dict[str, Any]] = {}
    for r in ok:
        info = per_rank.setdefault(str(r.rank), {
            "parts": [], "sources": [], "events": 0, "kernels": 0, "comm_kernels": 0, "comm_events": 0,
            "steps": [], "windows": [], "notices": [], "dropped": {}, "accelerator_events": {},
            "loader_names": [],
            "first_ns": r.first_ns, "last_ns": r.last_ns, "base_time_ns": r.base_time_ns,
            "device_names": r.device_names, "gpu": r.gpu, "warnings": [],
        })
        info["parts"].append(r.part)
        info["sources"].append(r.path)
        info["events"] += r.events
        info["kernels"] += r.kernels
        info["comm_kernels"] += r.comm_kernels
        info["comm_events"] += r.comm_events
        info["steps"] = sorted(set(info["steps"]) | set(r.steps))
        info["windows"].extend(r.windows)  # files in time order: their windows too
        info["notices"].extend(r.notices)
        for why, n in r.dropped.items():
            info["dropped"][why] = info["dropped"].get(why, 0) + n
        for cat, n in r.accelerator_events.items():
            info["accelerator_events"][cat] = info["accelerator_events"].get(cat, 0) + n
        info["loader_names"] = sorted(set(info["loader_names"]) | set(r.loader_names))
        info["last_ns"] = max(info["last_ns"] or 0, r.last_ns or 0)
        info["gpu"] = info["gpu"] or r.gpu
        info["warnings"].extend(w for w in r.warnings if w not in info["warnings"])  # once per rank, not per trace
    for r in results.values():
        if r.status == "failed":
            warnings.append(r.error or f"{r.path}: failed")
    worlds = Counter(w for w in (checked_world_size(r.world_size)[0] for r in ok) if w)
    backends = Counter(r.backend for r in ok if r.backend)
    pgs: dict[str, Any] = {}
    for r in ok:
        for pg in r.pg_config:
            if isinstance(pg, dict):
                pgs.setdefault(str(pg.get("pg_name")), pg)
    ranks = sorted({r.rank for r in ok if r.rank is not None})
    world = worlds.most_common(1)[0][0] if worlds else None
    if world is not None and len(ranks) < world:
        warnings.append(f"{len(ranks)} of {world} ranks present (missing: "
                        f"{format_ranges(missing_ranges(ranks, world))})")
    return {
        "format": RUN_FORMAT,
        "schema_version": SCHEMA_VERSION,
        "ddprof_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "world_size": world,
        "backend": backends.most_common(1)[0][0] if backends else None,
        "device": "gpu" if any(r.gpu for r in ok) else "cpu",
        "ranks": ranks,
        "hosts": {},
        "cpus": {},
        "process_groups": list(pgs.values()),
        "versions": {"nccl": next((r.nccl_version for r in ok if r.nccl_version), None)},
        "rank_map": rank_map or None,
        "per_rank": per_rank,
        "sources": {k: source_record(r) for k, r in sorted(results.items())},
        "warnings": warnings,
    }
