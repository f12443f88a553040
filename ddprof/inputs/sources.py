"""What the user named, opened for analysis: a run dir, raw traces, or a directory of Flight Recorder dumps.

* A run dir (``manifest.json``) is opened as it is.
* Raw traces (files, directories) are ingested into a cache: ``SRC/.ddprof-cache`` beside the traces, the
  ``cache`` asked for, or a temporary directory (removed afterwards) when the traces sit in a read-only
  place; ddprof never writes into or beside a read-only source.
* A directory of NCCL Flight Recorder dumps (no traces), or dump files named one by one, are read for hang
  diagnosis. Which file is a dump is the readers' say (:func:`ddprof.readers.registry.recognise`).

A run also brings the Flight Recorder dumps a capture left beside its traces
(``raw/rank-NNNNN/fr_trace_rank_N``), or that sit in the traces' directory.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ddprof.errors import BadInputError, UsageError
from ddprof.ingestion import ingest
from ddprof.ingestion.pipeline import IngestProgress
from ddprof.inputs.cache import default_cache
from ddprof.readers import registry
from ddprof.readers.flightrec.load import DumpSet
from ddprof.runtime.executors import Executor
from ddprof.store.rundir import Run, is_run_dir, open_run


@dataclass(frozen=True)
class Source:
    """The opened input: a run (None for a directory of dumps alone) and its Flight Recorder dumps
    (None when there are none)."""

    run: Run | None
    dumps: DumpSet | None


@contextmanager
def open_source(sources: Sequence[str | Path], *, cache: str | Path | None = None,
                rank_map: dict[str, int] | None = None, progress: IngestProgress | None = None,
                comm_kernels: Sequence[str] | None = None, executor: Executor | None = None) -> Iterator[Source]:
    """Open what the user named (module doc). ``progress`` is handed to :func:`ddprof.ingestion.ingest`.

    ``comm_kernels``: the rules naming communication kernels (``REGEX[=op]``), None for none given.
    Raw traces are ingested with them (a cache made with other rules is rebuilt); a run dir made with
    other rules than those given is a UsageError (re-ingest it with ``ddprof ingest --comm-kernel``).
    ``executor``: where raw traces are parsed (:mod:`ddprof.runtime.executors`; default: a local process pool).

    Raises BadInputError for a directory of dumps none of which is readable, and whatever ingest raises
    when no trace could be read.
    """
    paths = [Path(s) for s in sources]
    if not paths:
        raise BadInputError("nothing to analyse: name a run dir, traces, or a directory of Flight Recorder dumps")
    dumps = registry.dump_reader()
    if len(paths) == 1 and not is_run_dir(paths[0]) and dumps.is_dump_dir(paths[0]):
        yield Source(run=None, dumps=_readable(dumps.load_dir(paths[0]), paths[0], "in this directory"))
        return
    named = [p for p in paths if p.is_file() and _is_dump(p)]
    if named and len(named) == len(paths):
        yield Source(run=None, dumps=_readable(dumps.load_files(named, source=str(named[0].parent)), named[0],
                                               "among the files named"))
        return
    traces = [p for p in paths if p not in named]
    with _open_run(traces, cache, rank_map, progress, comm_kernels, executor) as run:
        captured = captured_dumps(run.path, traces)
        yield Source(run=run, dumps=dumps.load_files(named, source=str(named[0].parent)) if named else captured)


def _is_dump(path: Path) -> bool:
    """Whether a file named on its own is a dump (recognised by its reader from its first bytes: a JSON dump
    may be named like a trace); a file no reader takes is left to ingest, which names what it is."""
    try:
        return registry.recognise(path) is registry.dump_reader()
    except BadInputError:
        return False


def _readable(dump_set: DumpSet, where: Path, among: str) -> DumpSet:
    """``dump_set`` when it holds a dump; else BadInputError listing why each file was refused."""
    if not dump_set.dumps:
        detail = "; ".join(str(f) for f in dump_set.failures) or "no candidate files"
        raise BadInputError(f"no readable Flight Recorder dump {among} ({detail})", path=where)
    return dump_set


@contextmanager
def _open_run(paths: list[Path], cache: str | Path | None, rank_map: dict[str, int] | None,
              progress: IngestProgress | None, comm_kernels: Sequence[str] | None = None,
              executor: Executor | None = None) -> Iterator[Run]:
    if len(paths) == 1 and is_run_dir(paths[0]):
        run = open_run(paths[0])
        made_with = run.manifest.get("comm_kernel_rules", [])
        if comm_kernels is not None and list(comm_kernels) != made_with:
            raise UsageError(f"{paths[0]}: this run dir was ingested with the communication kernel rules "
                             f"{made_with or 'of no user'}, not {list(comm_kernels) or 'none'}; ingest the traces "
                             "again with the rules wanted (ddprof ingest --comm-kernel ...)")
        yield run
        return
    rules = tuple(comm_kernels or ())
    target = Path(cache) if cache else (default_cache(paths[0]) if len(paths) == 1 else None)
    if target is not None:
        yield ingest(paths, target, rank_map=rank_map, progress=progress, comm_kernels=rules, executor=executor)
        return
    tmp = Path(tempfile.mkdtemp(prefix="ddprof-"))
    try:
        yield ingest(paths, tmp, rank_map=rank_map, progress=progress, comm_kernels=rules, executor=executor)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def captured_dumps(run_dir: Path, sources: Sequence[Path]) -> DumpSet | None:
    """The Flight Recorder dumps of a run: the first of ``RUN/raw`` and the source directories that holds
    readable dumps (found by name: the dump reader's ``find``), with its unreadable
    ones as failures; when no place holds a readable dump, the unreadable ones of every place (a run
    whose every dump was refused still says so); None when there is no dump file at all. The report
    lists each failure among the run's failed inputs (exit 3, the file named)."""
    refused: list[BadInputError] = []
    for root in [run_dir / "raw", *(p for p in sources if p.is_dir())]:
        files = registry.dump_reader().find(root) if root.is_dir() else []
        if files:
            dump_set = registry.dump_reader().load_files(files, source=str(root))
            if dump_set.dumps:
                return dump_set
            refused.extend(dump_set.failures)
    if refused:
        return DumpSet(path=str(run_dir), dumps={}, failures=refused)
    return None
