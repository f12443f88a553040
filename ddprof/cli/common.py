"""Options and helpers shared by commands."""

from __future__ import annotations

import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import click

from ddprof.atomic import write_text_atomic
from ddprof.errors import BadInputError, PartialRunError, UsageError
from ddprof.ingestion import ingest as run_ingest
from ddprof.rundir import Run, is_run_dir, open_run

CACHE_NAME = ".ddprof-cache"
F = TypeVar("F", bound=Callable[..., Any])


def parse_rank_map(values: tuple[str, ...]) -> dict[str, int] | None:
    """``("a.json=0", "b.json=1")`` -> ``{"a.json": 0, "b.json": 1}``."""
    out: dict[str, int] = {}
    for v in values:
        name, sep, num = v.rpartition("=")
        if not sep or not name or not num.isdigit():
            raise UsageError(f"--rank expects FILE=N (e.g. --rank trace.json=3), got {v!r}")
        out[name] = int(num)
    return out or None


def rank_option(f: F) -> F:
    """The ``--rank FILE=N`` option, shared by the commands that ingest."""
    return click.option("--rank", "ranks", multiple=True, metavar="FILE=N",
                        help="Rank of a trace that does not say (repeatable).")(f)


def _writable(path: Path) -> bool:
    """Writable by its owner's mode bits too: root ignores permissions, but a read-only tree stays untouched."""
    try:
        return os.access(path, os.W_OK) and bool(path.stat().st_mode & stat.S_IWUSR)
    except OSError:
        return False


def default_cache(src: Path) -> Path | None:
    """Cache beside the traces (``SRC/.ddprof-cache``), or None when that place is read-only."""
    base = src if src.is_dir() else src.parent
    target = base / CACHE_NAME if src.is_dir() else base / CACHE_NAME / src.name
    existing = target if target.exists() else base / CACHE_NAME if (base / CACHE_NAME).exists() else base
    return target if _writable(existing) else None


@contextmanager
def open_source(sources: tuple[str, ...], cache: str | None, ranks: tuple[str, ...],
                progress: bool = True) -> Iterator[Run]:
    """A Run for what the user named: a run dir as is, or raw traces ingested into a cache."""
    paths = [Path(s) for s in sources]
    if len(paths) == 1 and is_run_dir(paths[0]):
        yield open_run(paths[0])
        return
    rank_map = parse_rank_map(ranks)
    target = Path(cache) if cache else (default_cache(paths[0]) if len(paths) == 1 else None)
    if target is not None:
        yield run_ingest(paths, target, rank_map=rank_map, progress=progress)
        return
    tmp = Path(tempfile.mkdtemp(prefix="ddprof-"))
    try:
        yield run_ingest(paths, tmp, rank_map=rank_map, progress=progress)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def partial_failure(run: Run, rest: str) -> PartialRunError:
    """The error (exit 3) for a run some of whose inputs failed, naming each failure."""
    err = PartialRunError([BadInputError(v.get("error") or "failed") for v in run.failed.values()])
    err.args = (f"{err}\n{rest}",)
    return err


def emit(text: str, output: str | None) -> None:
    """Print, or write atomically to ``output``."""
    if output and output != "-":
        write_text_atomic(output, text if text.endswith("\n") else text + "\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
