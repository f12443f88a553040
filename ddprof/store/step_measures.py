"""The always-on step measures of a capture: ``RUN/measures/rank-NNNNN.steps.jsonl``, one small append-only
file per rank, one JSON object a line.

Written by :mod:`ddprof.collectors.measures` in every capturing rank (``ddprof launch`` and
``ddprof.profile``), from a background thread, a few lines at a time; read here while the job still writes
them (``ddprof top``) and after (``ddprof.open_run(RUN).step_measures()``). The first line of a file is
its header, every other line one step of the rank::

    {"kind": "header", "version": 1, "rank": 1, "world_size": 2, "host": "vm", "pid": 4121, "start": 1.7e9,
     "collectives": "ddp comm hook + torch.distributed calls"}
    {"step": 12, "end": 1796427906.718, "wall_ms": 41.2, "coll_ms": 30.5, "coll_n": 3, "arrive": 1796427906.70,
     "data_ms": 0.4, "cpu_ms": 39.0, "rss_mb": 512.3, "host_cpu_pct": 47.0, "host_mem_pct": 61.2,
     "thread_cpu_ms": 36.1, "wait_ms": 0.3, "host_steal_pct": 0.0}

``step`` is the step the line closes (numbered as the job does, from 0); ``end`` the wall clock (epoch
seconds) at its end; ``wall_ms`` its duration; ``coll_ms`` the time the rank spent in collectives it could
time (issue to completion, overlapping ones counted once; null where none was visible), ``coll_n`` how
many; ``arrive`` the wall clock at which the rank issued the step's last collective (its arrival: the last
rank to arrive made the others wait); ``data_ms`` the time spent drawing batches from a DataLoader; ``cpu_ms``
the process's CPU time in the step; ``rss_mb`` its resident memory and ``host_cpu_pct``/``host_mem_pct`` the
host's CPU and memory use, the latest samples (about one a second); ``thread_cpu_ms`` the training thread's
own CPU time in the step and ``wait_ms`` the time it was ready to run but waited for a CPU (the kernel's
run-queue delay); ``host_steal_pct`` the share of the host's CPU time its hypervisor gave to others (a
virtual machine's stolen time, the latest sample). Any of them may be null (files of older collectors have
no such fields).

A reader tolerates a torn last line (the writer appends whole lines, but a reader may see a line being
written, and a killed job may leave half of one): an incomplete or unreadable line is skipped, never fatal.
Only the standard library is imported at module level: every capturing process loads this module.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

MEASURES_DIR = "measures"
SUFFIX = ".steps.jsonl"
VERSION = 1
#: The fields of a step line, in the order of the table :func:`read_step_measures` returns.
FIELDS = ("step", "end", "wall_ms", "coll_ms", "coll_n", "arrive", "data_ms", "cpu_ms", "rss_mb", "host_cpu_pct",
          "host_mem_pct", "thread_cpu_ms", "wait_ms", "host_steal_pct")


def measures_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / MEASURES_DIR


def measures_path(run_dir: str | Path, rank: int) -> Path:
    return measures_dir(run_dir) / f"rank-{rank:05d}{SUFFIX}"


def measure_files(run_dir: str | Path) -> dict[int, Path]:
    """The measure file of every rank found, by rank."""
    found: dict[int, Path] = {}
    try:
        entries = sorted(measures_dir(run_dir).glob(f"rank-*{SUFFIX}"))
    except OSError:
        return found
    for path in entries:
        digits = path.name[len("rank-"):-len(SUFFIX)]
        if digits.isdigit():
            found[int(digits)] = path
    return found


def parse_lines(data: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The headers and step records in ``data``, and how many bytes of it were whole lines (the rest, a line
    still being written, is left for the next read). A whole line that is not a JSON object is skipped."""
    headers: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if not isinstance(obj, dict):
            continue
        if obj.get("kind") == "header":
            headers.append(obj)
        elif isinstance(obj.get("step"), int):
            steps.append(obj)
    return headers, steps, end


class MeasureTail:
    """Reads the measure files of a run dir as they grow: each :meth:`poll` reads only the new whole lines.

    ``records[rank]`` holds every step record read so far (the last of a step wins: a step is written once),
    ``headers[rank]`` the rank's header.
    """

    def __init__(self, run_dir: str | Path, *, max_steps: int = 100_000):
        self.run_dir = Path(run_dir)
        self.max_steps = max_steps
        self.records: dict[int, dict[int, dict[str, Any]]] = {}
        self.headers: dict[int, dict[str, Any]] = {}
        self.mtime: dict[int, float] = {}
        self._offsets: dict[int, int] = {}

    def poll(self) -> int:
        """Read what was appended since the last call; the number of new step records."""
        new = 0
        for rank, path in measure_files(self.run_dir).items():
            offset = self._offsets.get(rank, 0)
            try:
                with open(path, "rb") as f:
                    self.mtime[rank] = os.fstat(f.fileno()).st_mtime
                    f.seek(offset)
                    data = f.read()
            except OSError:
                continue
            headers, steps, used = parse_lines(data)
            self._offsets[rank] = offset + used
            if headers:
                self.headers[rank] = headers[-1]
            mine = self.records.setdefault(rank, {})
            for rec in steps:
                mine[rec["step"]] = rec
            new += len(steps)
            if len(mine) > self.max_steps:  # keep the newest steps only: memory stays bounded in a long job
                for step in sorted(mine)[: len(mine) - self.max_steps]:
                    del mine[step]
        return new

    def poll_records(self) -> list[dict[str, Any]]:
        """:meth:`poll`, then every step record read so far, by rank and step."""
        self.poll()
        return [rec for rank in sorted(self.records) for _, rec in sorted(self.records[rank].items())]

    def frame(self, last_steps: int | None = None) -> Any:
        """The records read so far as a frame (:func:`read_step_measures`'s columns), only each rank's newest
        ``last_steps`` when given."""
        return _frame({rank: [recs[s] for s in sorted(recs)[-last_steps if last_steps else 0:]]
                       for rank, recs in self.records.items()})


def _frame(records: dict[int, list[dict[str, Any]]]) -> Any:
    import polars as pl

    schema: dict[str, Any] = {"rank": pl.Int64, "step": pl.Int64, "end": pl.Float64, "wall_ms": pl.Float64,
                              "coll_ms": pl.Float64, "coll_n": pl.Int64, "arrive": pl.Float64, "data_ms": pl.Float64,
                              "cpu_ms": pl.Float64, "rss_mb": pl.Float64, "host_cpu_pct": pl.Float64,
                              "host_mem_pct": pl.Float64, "thread_cpu_ms": pl.Float64, "wait_ms": pl.Float64,
                              "host_steal_pct": pl.Float64}
    rows = [{"rank": rank, **{k: rec.get(k) for k in FIELDS}} for rank in sorted(records) for rec in records[rank]]
    return pl.DataFrame(rows, schema=schema, strict=False) if rows else pl.DataFrame(schema=schema)


def read_step_measures(run_dir: str | Path) -> Any:
    """Every rank's step records as one Polars frame: ``rank`` then :data:`FIELDS`, sorted by rank and step
    (an empty frame of those columns when the run dir has none)."""
    tail = MeasureTail(run_dir, max_steps=1 << 62)
    tail.poll()
    return tail.frame()
