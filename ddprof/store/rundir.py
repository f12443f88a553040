"""The run dir: ``manifest.json`` plus ``events/rank=NNNNN/part-<hash>.parquet``, and a reader for it.

>>> run = open_run("runs/job-42")                 # doctest: +SKIP
>>> run.ranks, run.world_size                     # doctest: +SKIP
([0, 1, 2, 3], 4)
>>> run.events(ranks=[0]).filter(pl.col("kind") == "comm").collect()   # doctest: +SKIP
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import polars as pl

from ddprof.errors import BadInputError, SchemaError
from ddprof.store.schema import EVENT_SCHEMA, check_version, empty_events
from ddprof.vocabulary.units import NS_PER_US, fmt_ranges, step_ranges

MANIFEST = "manifest.json"
#: Where ``ddprof analyze`` leaves the detail tables of a run dir's report (``NAME.parquet``).
REPORT_TABLES = Path("report") / "tables"
RUN_FORMAT = "ddprof-run"


def rank_dir(run_dir: str | Path, rank: int) -> Path:
    return Path(run_dir) / "events" / f"rank={rank:05d}"


def is_run_dir(path: str | Path) -> bool:
    p = Path(path) / MANIFEST
    if not p.is_file():
        return False
    try:
        return json.loads(p.read_text()).get("format") == RUN_FORMAT
    except (OSError, ValueError):
        return False


def read_manifest(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadInputError("not a ddprof run dir (no manifest.json); create one with `ddprof ingest`",
                            path=run_dir) from None
    except ValueError as exc:
        raise BadInputError(f"manifest.json is not valid JSON ({exc})", path=path) from None
    if manifest.get("format") != RUN_FORMAT:
        raise BadInputError("manifest.json is not a ddprof run manifest", path=path)
    check_version(manifest.get("schema_version", "?"), where=str(path))
    return manifest


@dataclass(frozen=True)
class Run:
    """A read-only view of a run dir. Events come as Polars LazyFrames."""

    path: Path
    manifest: dict[str, Any] = field(repr=False)

    def __repr__(self) -> str:
        """``Run('runs/job-42', ranks 0-7 of 8, gpu, 3 steps)``: the manifest itself is kilobytes a rank."""
        ranks = fmt_ranges(self.ranks) or "none"
        return (f"Run({str(self.path)!r}, ranks {ranks} of {self.world_size or '?'}, {self.device}, "
                f"{len(self.steps)} step{'s' if len(self.steps) != 1 else ''})")

    @property
    def ranks(self) -> list[int]:
        """Ranks whose events were ingested successfully, sorted."""
        return sorted(int(r) for r in self.manifest.get("ranks", []))

    @property
    def world_size(self) -> int | None:
        return self.manifest.get("world_size")

    @property
    def failed(self) -> dict[str, dict[str, Any]]:
        """Inputs that failed to ingest: key (rank or file) -> per-source record with ``error``."""
        return {k: v for k, v in self.manifest.get("sources", {}).items() if v.get("status") == "failed"}

    @property
    def device(self) -> str:
        return self.manifest.get("device", "cpu")

    def rank_info(self, rank: int) -> dict[str, Any]:
        return self.manifest.get("per_rank", {}).get(str(rank), {})

    def events(self, ranks: list[int] | None = None) -> pl.LazyFrame:
        """Events of the given ranks (default: all ingested ranks) as one LazyFrame."""
        wanted = self.ranks if ranks is None else sorted(set(ranks))
        unknown = [r for r in wanted if r not in self.ranks]
        if unknown:
            raise BadInputError(f"rank(s) {unknown} not in this run (ranks: {self.ranks})", path=self.path)
        per_rank = self.manifest.get("per_rank", {})
        files = [str(self.path / part) for r in wanted for part in per_rank.get(str(r), {}).get("parts", [])]
        if not files:
            return empty_events().lazy()
        # a part of an earlier minor version lacks the columns added since: read as null
        return pl.scan_parquet(files, schema=EVENT_SCHEMA, hive_partitioning=False, missing_columns="insert")

    def collect_events(self, columns: list[str] | None = None, ranks: list[int] | None = None,
                       where: pl.Expr | None = None) -> pl.DataFrame:
        """:meth:`events` collected (only ``columns``, only the rows ``where`` holds); an unreadable Parquet
        part becomes a :class:`SchemaError` naming the run dir and the fix, instead of a Polars traceback."""
        lf = self.events(ranks)
        if where is not None:
            lf = lf.filter(where)
        if columns is not None:
            lf = lf.select(columns)
        try:
            return lf.collect()
        except (pl.exceptions.PolarsError, OSError) as exc:
            raise SchemaError(f"{self.path}: the event store cannot be read ({str(exc).splitlines()[0]}); "
                              "rebuild it with `ddprof ingest --force`") from None

    @cached_property
    def steps(self) -> list[int]:
        return sorted({s for info in self.manifest.get("per_rank", {}).values() for s in info.get("steps", [])})

    def table(self, name: str) -> pl.DataFrame:
        """A detail table of the report ``ddprof analyze`` last wrote for this run dir
        (``report/tables/NAME.parquet``: :mod:`ddprof.report.tables`), e.g. ``open_run(p).table("bubbles")``.
        Read here, without the report's modules: the store is what ingest writes, and its fingerprint
        (:mod:`ddprof.ingestion.store_version`) covers only what ingest runs."""
        return read_table(self.path / REPORT_TABLES, name)

    def step_measures(self) -> pl.DataFrame:
        """The capture's always-on step measures (``measures/rank-NNNNN.steps.jsonl``, written by every
        capturing rank whether or not it traced): a row per rank and step, the columns of
        :data:`ddprof.store.step_measures.FIELDS` after ``rank``; empty when the capture wrote none."""
        from ddprof.store.step_measures import read_step_measures

        return read_step_measures(self.path)

    def summary(self) -> dict[str, Any]:
        """What was ingested, from the manifest (no event scan): the report's ``run`` section before the
        analyses add their warnings. World size, ranks, backend, device, steps; per rank its event,
        kernel and communication counts, steps (as ranges: ``[[first, last], ...]``), span (the traced time:
        its profiling windows added up), devices, host,
        the CPUs it was bound to and warnings; the inputs that failed
        (``{path, rank, error}``, the error naming the file) and the run's warnings."""
        per_rank = []
        for r in self.ranks:
            info = self.rank_info(r)
            first, last = info.get("first_ns"), info.get("last_ns")
            per_rank.append({
                "rank": r,
                "events": info.get("events", 0),
                "kernels": info.get("kernels", 0),
                "comm_kernels": info.get("comm_kernels", 0),
                "comm_events": info.get("comm_events", info.get("comm_kernels", 0)),
                "step_ranges": step_ranges(info.get("steps", [])),
                "span_us": _traced_us(info.get("windows"), first, last),
                "device_names": sorted(set(info.get("device_names", []))),
                "host": self.manifest.get("hosts", {}).get(str(r)),
                "cpus": self.manifest.get("cpus", {}).get(str(r)),
                "warnings": info.get("warnings", []),
            })
        return {
            "world_size": self.world_size,
            "ranks": self.ranks,
            "backend": self.manifest.get("backend"),
            "device": self.device,
            "steps": self.steps,
            "warnings": list(self.manifest.get("warnings", [])),
            "per_rank": per_rank,
            "failed": [{"path": v.get("path"), "rank": v.get("rank"), "error": v.get("error")}
                       for v in self.failed.values()],
        }


def _traced_us(windows: list[list[int]] | None, first: int | None, last: int | None) -> float | None:
    """A rank's traced time, µs: its profiling windows' lengths added up (:mod:`ddprof.store.windows`: the
    time between two windows was never traced), or first start to last end where the manifest has no
    windows. Example: windows [0, 2) s and [180, 181) s -> 3 s, not 181 s."""
    if windows:
        return round(sum(end - start for start, end in windows) / NS_PER_US, 3)
    return round((last - first) / NS_PER_US, 3) if first is not None and last is not None else None


def open_run(path: str | Path) -> Run:
    """Open a run dir written by ``ddprof ingest`` (or the collector). Raises if it is not one."""
    path = Path(path)
    manifest = read_manifest(path)
    for r, info in manifest.get("per_rank", {}).items():
        for part in info.get("parts", []):
            if not (path / part).is_file():
                raise SchemaError(f"{path}: rank {r}'s events file {part} is missing; re-run `ddprof ingest`")
    return Run(path=path, manifest=manifest)


def missing_table(directory: Path, name: str) -> BadInputError:
    """The error for a report's detail table ``name`` that is not in ``directory``."""
    return BadInputError(f"the report's detail table {name}.parquet is missing: `ddprof analyze` writes it "
                         "(FILE.tables/ beside `-o FILE`, report/tables/ in a writable run dir); run it again",
                         path=directory)


def read_table(directory: Path, name: str) -> pl.DataFrame:
    """The detail table ``name`` of the report whose tables are in ``directory``: a KeyError names the tables
    there when ``name`` is not one of them, a BadInputError says what writes them when there are none."""
    path = directory / f"{name}.parquet"
    if not path.is_file():
        present = sorted(p.stem for p in directory.glob("*.parquet")) if directory.is_dir() else []
        if present:
            raise KeyError(f"{name!r} is not a detail table (those are: {', '.join(present)})")
        raise missing_table(directory, name)
    return pl.read_parquet(path)
