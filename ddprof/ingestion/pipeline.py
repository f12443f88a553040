"""Ingest traces (any format :mod:`ddprof.readers` reads) into a run dir: discover, reuse the cache, parse
ranks in parallel, reconcile, write the manifest last (atomically), then drop Parquet parts no manifest
refers to.

The run dir is checked writable before any parsing, and the temporary files of killed runs are removed
(:func:`ddprof.store.atomic.remove_stale_tmp`). A full disk or an unwritable run dir stops the ingest with one
:class:`~ddprof.errors.OutputError`, the parts this run wrote removed. A bug met on one trace lets the
others finish and their manifest be written, then raises :class:`~ddprof.errors.InternalError`.

The cache (the previous manifest) serves a trace only once its content is vouched for
(:func:`_unchanged`): same size, same digest of its two ends (:func:`~ddprof.readers.source.quick_digest`),
and either the same file untouched since (device, inode, change time and mtime as recorded) or, when any
of these moved, the same full SHA-1 as recorded. A same-size edit whose mtime was put back still moved
the change time; two same-size files swapped by name swapped inodes: both are read again.

>>> run = ingest(["traces/"], "runs/job-42")        # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from ddprof.errors import BadInputError, InternalError, OutputError, UsageError
from ddprof.ingestion.discover import discover
from ddprof.ingestion.job import FileResult, ingest_files
from ddprof.ingestion.manifest import build_manifest, previous_results
from ddprof.ingestion.store_version import store_fingerprint
from ddprof.readers.source import file_sha1, quick_digest
from ddprof.runtime.affinity import core_queue, hold_to_core
from ddprof.runtime.executors import Executor
from ddprof.runtime.lifetime import bind_to_parent
from ddprof.runtime.memory import for_child_processes
from ddprof.store.atomic import output_error, remove_stale_tmp, write_json_atomic
from ddprof.store.rundir import MANIFEST, RUN_FORMAT, Run, open_run
from ddprof.store.sidecar import read_sidecars
from ddprof.store.timeline_summary import summary_path
from ddprof.vocabulary.collective_ops import RuleError, kernel_rules

#: Below this much input, worker start-up costs more than it saves.
PARALLEL_MIN_BYTES = 8 << 20
#: Traces smaller than this are ingested several at once (:func:`ddprof.ingestion.job.ingest_files`):
#: building a trace of a few hundred events costs ~9 ms alone, ~0.3 ms in a batch of 64.
SMALL_TRACE_BYTES = 1 << 20
#: At most this many traces, and this much input, in one batch (memory: a batch is held at once).
BATCH_FILES, BATCH_BYTES = 64, 8 << 20
#: A compressed trace is counted at this many times its size on disk.
GZIP_RATIO = 8
POLARS_THREADS = "POLARS_MAX_THREADS"


class IngestProgress(Protocol):
    """What :func:`ingest` tells a progress display (the CLI's bar: ``ddprof.cli.progress``).

    ``start`` once with the traces to parse and their size on disk, ``advance`` as each of them
    finishes (in the order they finish, failed ones included), ``close`` at the end, also when the
    ingest raises. Traces reused from the store are not counted; with nothing to parse, no call is made.
    """

    def start(self, total_files: int, total_bytes: int) -> None: ...

    def advance(self, path: Path, nbytes: int) -> None: ...

    def close(self) -> None: ...


class _NoProgress:
    def start(self, total_files: int, total_bytes: int) -> None:
        pass

    def advance(self, path: Path, nbytes: int) -> None:
        pass

    def close(self) -> None:
        pass


def ingest(sources: str | Path | Iterable[str | Path], out_dir: str | Path, *,
           rank_map: dict[str, int] | None = None, jobs: int | None = None,
           progress: IngestProgress | bool | None = None, force: bool = False,
           extra_manifest: dict[str, Any] | None = None, comm_kernels: Sequence[str] = (),
           executor: Executor | None = None) -> Run:
    """Ingest traces into ``out_dir`` and return the opened :class:`Run`.

    Bad files do not stop the others: each failure is recorded in the manifest (file, rank, cause) and
    the run keeps every rank that ingested. If *nothing* ingested, raises :class:`BadInputError`
    listing every failure.

    ``comm_kernels``: the user's rules naming communication kernels, ``REGEX[=op]`` each, tried before
    the built-in families (:func:`ddprof.vocabulary.collective_ops.kernel_rules`); an invalid one is a
    :class:`UsageError` naming it. They shape the store: the manifest records them, and a store made
    with other rules is rebuilt, not reused.

    ``progress``: an :class:`IngestProgress` to report to. The core writes nothing to the terminal, so
    ``None``, ``False`` and ``True`` (accepted from callers written before the reporter existed) all
    mean no report.

    ``executor``: where each trace is parsed (:mod:`ddprof.runtime.executors`); default (None or ``local``): a
    process pool here. On Ray each trace is a task that writes its Parquet part into ``out_dir`` itself,
    so ``out_dir`` and the traces must be on storage every node mounts at the same path.
    """
    srcs = [Path(s) for s in ([sources] if isinstance(sources, (str, Path)) else sources)]
    out = Path(out_dir)
    rules = _checked_rules(comm_kernels)
    files = discover(srcs)
    _check_writable(out)
    remove_stale_tmp(out)
    previous_manifest = _read_manifest(out)
    cached = {} if force else _previous_sources(previous_manifest, rules)
    lone = len(files) == 1  # a single-process job's trace: with no rank anywhere, rank 0 (readers.ranks.trace_rank)
    results, todo = _split_cached(files, out, cached, rank_map, lone)
    reporter = _NoProgress() if progress is None or isinstance(progress, bool) else progress
    kept = {str(part) for info in previous_manifest.get("per_rank", {}).values() if isinstance(info, dict)
            for part in info.get("parts", [])}
    fresh = _run_jobs(todo, out, rank_map, jobs, reporter, kept, rules, executor, lone)
    for res in fresh:
        results[res.key()] = res
    manifest = _assemble(results, srcs, rank_map)
    manifest["comm_kernel_rules"] = list(rules)
    if extra_manifest:
        manifest.update(extra_manifest)
    elif "collector" in previous_manifest:  # re-ingesting a captured run keeps what the collector said
        manifest["collector"] = previous_manifest["collector"]
    try:
        write_json_atomic(out / MANIFEST, manifest)
    except OutputError:
        _remove_parts(out, fresh, kept)
        raise
    _remove_stale_parts(out, manifest)
    bugs = [r.error for r in results.values() if r.internal and r.error]
    if bugs:
        raise InternalError("\n".join(bugs))
    if not manifest["ranks"]:
        lines = "\n".join(f"  - {r.error}" for r in results.values() if r.error)
        raise BadInputError(f"no trace could be ingested:\n{lines}")
    return open_run(out)


def _check_writable(out: Path) -> None:
    """Raise OutputError (one sentence naming ``out``) unless the run dir can be created and written."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / f".write-probe.tmp-{os.getpid()}"
        probe.touch()
        probe.unlink()
    except OSError as exc:
        raise output_error(out, exc) from None


def _split_cached(files: list[Path], out: Path, cached: dict[str, dict[str, Any]],
                  rank_map: dict[str, int] | None, lone: bool = False) -> tuple[dict[str, FileResult], list[Path]]:
    """Results reused from the previous manifest (same content as :func:`_unchanged` checks it, same
    rank map, given alone or not alike, parts present; every rank of a file that holds several), and the
    files that must be parsed."""
    by_file: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for key, hit in cached.items():
        index = hit.get("member_index")
        base = key[:-len(f"#{index}")] if isinstance(index, int) and key.endswith(f"#{index}") else key
        by_file.setdefault(base, []).append((key, hit))
    results: dict[str, FileResult] = {}
    todo: list[Path] = []
    for f in files:
        hits = by_file.get(str(f.resolve()), [])
        if hits and all(hit.get("status") == "ok" and hit.get("part") and (out / hit["part"]).is_file()
                        and hit.get("rank_map") == (rank_map or None) and bool(hit.get("lone")) == lone
                        and _unchanged(f, hit) for _, hit in hits):
            for key, hit in hits:
                results[key] = FileResult(**{k: v for k, v in hit.items() if k in FileResult.__dataclass_fields__})
        else:
            todo.append(f)
    return results, todo


def _unchanged(f: Path, hit: dict[str, Any]) -> bool:
    """Whether ``f`` holds what the cache entry ``hit`` was made from (module doc); refreshes the entry's
    identity fields when the full hash vouched for a moved file."""
    try:
        st = f.stat()
        if hit.get("size") != st.st_size or hit.get("quick") != quick_digest(f, st.st_size):
            return False
        ident = {"dev": st.st_dev, "ino": st.st_ino, "ctime_ns": st.st_ctime_ns, "mtime_ns": st.st_mtime_ns}
        if all(hit.get(k) == v for k, v in ident.items()):
            return True
        if hit.get("sha1") != file_sha1(f):
            return False
    except OSError:
        return False
    hit.update(ident)
    return True


def _assemble(results: dict[str, FileResult], srcs: list[Path], rank_map: dict[str, int] | None) -> dict[str, Any]:
    """The manifest: reconciled per-file results plus what the collector's sidecar files say."""
    manifest = build_manifest(results, rank_map)
    manifest["ingest_fingerprint"] = store_fingerprint()
    side, side_warnings = read_sidecars(srcs)
    manifest["hosts"] = {r: h for r, h in side["hosts"].items() if int(r) in manifest["ranks"]}
    manifest["cpus"] = {r: c for r, c in side["cpus"].items() if int(r) in manifest["ranks"]}
    manifest["clocks"] = side["clocks"]
    manifest["versions"] = {**side["versions"], **{k: v for k, v in manifest["versions"].items() if v}}
    manifest["warnings"].extend(side_warnings)
    return manifest


def _read_manifest(out: Path) -> dict[str, Any]:
    try:
        m = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return {}
    return m if isinstance(m, dict) and m.get("format") == RUN_FORMAT else {}


def _checked_rules(texts: Sequence[str]) -> tuple[str, ...]:
    """The user's communication kernel rules, each checked (an invalid one is a UsageError)."""
    rules = tuple(texts)
    try:
        kernel_rules(rules)
    except RuleError as exc:
        raise UsageError(str(exc)) from None
    return rules


def _previous_sources(m: dict[str, Any], rules: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    """The previous manifest's sources, when the same code and communication kernel rules wrote it."""
    if m.get("ingest_fingerprint") != store_fingerprint() or m.get("comm_kernel_rules", []) != list(rules):
        return {}
    return previous_results(m)


def _batches(todo: list[Path], sizes: dict[Path, int], workers: int) -> list[list[Path]]:
    """The traces in units of work: a large trace alone; small ones (under :data:`SMALL_TRACE_BYTES`)
    together, in their order, up to :data:`BATCH_FILES` files and :data:`BATCH_BYTES` of input each
    (compressed ones counted at :data:`GZIP_RATIO` times their size), and in at least ``workers`` units
    when there are that many traces, so that every worker has one."""
    weight = {f: sizes[f] * (GZIP_RATIO if f.name.lower().endswith(".gz") else 1) for f in todo}
    small = [f for f in todo if weight[f] < SMALL_TRACE_BYTES]
    units = [[f] for f in todo if weight[f] >= SMALL_TRACE_BYTES]
    if not small:
        return units
    total = sum(weight[f] for f in small)
    n = max(-(-len(small) // BATCH_FILES), -(-total // BATCH_BYTES), min(workers, len(small)))
    per_files, per_bytes = -(-len(small) // n), -(-total // n)  # even shares (per_files <= BATCH_FILES)
    batch: list[Path] = []
    held = 0
    for f in small:
        if batch and held + weight[f] > BATCH_BYTES:
            units.append(batch)
            batch, held = [], 0
        batch.append(f)
        held += weight[f]
        if len(batch) >= per_files or held >= per_bytes:
            units.append(batch)
            batch, held = [], 0
    if batch:
        units.append(batch)
    return units


def _run_jobs(todo: list[Path], out: Path, rank_map: dict[str, int] | None, jobs: int | None,
              progress: IngestProgress, kept: set[str], rules: tuple[str, ...] = (),
              executor: Executor | None = None, lone: bool = False) -> list[FileResult]:
    """Parse the traces (``lone``: the one trace given). On an :class:`OutputError` (a full disk) the parts
    this run wrote that the previous manifest does not hold (``kept``) are removed before it is raised."""
    if not todo:
        return []
    sizes = {f: f.stat().st_size for f in todo}
    total_bytes = sum(sizes.values())
    workers = min(jobs or os.cpu_count() or 1, len(todo))
    local = executor is None or executor.name == "local"
    if local and (workers <= 1 or total_bytes < PARALLEL_MIN_BYTES):
        workers = 1
    units = _batches(todo, sizes, workers)
    parsed: dict[Path, list[FileResult]] = {}  # a file's results: one, or one per rank it holds
    progress.start(len(todo), total_bytes)

    def done(unit: list[Path], batch: list[FileResult]) -> None:
        mine = {str(f): f for f in unit} | {str(f.resolve()): f for f in unit}
        for res in batch:
            parsed.setdefault(mine[res.path], []).append(res)
        for f in unit:
            progress.advance(f, sizes[f])

    try:
        if not local:
            calls = [([str(f.resolve()) for f in unit], str(out.resolve()), rank_map, rules, lone) for unit in units]
            for i, batch in executor.each(ingest_files, calls):  # type: ignore[union-attr]
                done(units[i], batch)
        elif workers == 1:
            for unit in units:
                done(unit, ingest_files([str(f) for f in unit], str(out), rank_map, rules, lone))
        else:
            # loaded here: one trace needs no pool, and its ingest does not wait ~9 ms for the pool's modules
            from concurrent.futures import ProcessPoolExecutor, as_completed
            from multiprocessing import get_context

            context = get_context("spawn")
            with for_child_processes(), _polars_threads(max(1, (os.cpu_count() or 1) // workers)), \
                    ProcessPoolExecutor(max_workers=workers, mp_context=context,
                                        initializer=_start_worker,
                                        initargs=(os.getpid(), core_queue(context, workers))) as pool:
                futs = {pool.submit(ingest_files, [str(f) for f in unit], str(out), rank_map, rules, lone): unit
                        for unit in units}
                failure: OutputError | None = None
                for fut in as_completed(futs):
                    if fut.cancelled():
                        continue
                    try:
                        done(futs[fut], fut.result())
                    except OutputError as exc:
                        failure = failure or exc
                        for other in futs:
                            other.cancel()
                if failure is not None:
                    raise failure
    except OutputError:
        _remove_parts(out, [r for rs in parsed.values() for r in rs], kept)
        raise
    finally:
        progress.close()
    return [r for f in todo for r in parsed.get(f, [])]  # in the traces' order, whatever order they finished in


def _start_worker(parent: int, cores: Any) -> None:
    """First thing in each worker: end with ``parent`` (:mod:`ddprof.runtime.lifetime`), hold to a core of its
    own where ``cores`` (a queue of core numbers) gives one (:mod:`ddprof.runtime.affinity`)."""
    bind_to_parent(parent)
    hold_to_core(cores)


@contextmanager
def _polars_threads(n: int) -> Iterator[None]:
    """Worker processes started inside this block run Polars on ``n`` threads (unless the user set
    ``POLARS_MAX_THREADS``): the pool already spreads the traces over the cores, and a trace's frames are
    small, so a thread pool per worker as large as the machine only adds wake-ups. On 2 cores, ingesting
    1,024 traces of 39 kB (in batches) with one thread per worker took 0.95x the time and 0.94x the CPU of
    two threads per worker (whole process, median of 4 pairs)."""
    if POLARS_THREADS in os.environ:
        yield
        return
    os.environ[POLARS_THREADS] = str(n)
    try:
        yield
    finally:
        os.environ.pop(POLARS_THREADS, None)


def _remove_parts(out: Path, results: list[FileResult], kept: set[str]) -> None:
    """Delete the parts of ``results`` that the previous manifest does not refer to (``kept``)."""
    for r in results:
        if r.part and r.part not in kept:
            (out / r.part).unlink(missing_ok=True)
            summary_path(out / r.part).unlink(missing_ok=True)


def _remove_stale_parts(out: Path, manifest: dict[str, Any]) -> None:
    keep = {p for info in manifest["per_rank"].values() for p in info["parts"]}
    events = out / "events"
    if not events.is_dir():
        return
    for part in events.glob("rank=*/*.parquet"):
        if str(part.relative_to(out)) not in keep:
            part.unlink(missing_ok=True)
            summary_path(part).unlink(missing_ok=True)
    for d in events.glob("rank=*"):
        if d.is_dir() and not any(d.iterdir()):
            d.rmdir()

