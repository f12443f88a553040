"""The ingest progress bar of the commands that ingest: click's bar on stderr, measured in bytes.

``ddprof.ingest(..., progress=ingest_progress(enabled))`` shows, as each trace finishes::

    ingest  [###########-------------------]   37%  3/8 traces  20.1/54.3 MiB  00:00:04 left

It is an :class:`ddprof.ingestion.pipeline.IngestProgress`: the core calls it and never imports click.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

import click

from ddprof.vocabulary.units import fmt_bytes


class IngestBar:
    """:class:`ddprof.ingestion.pipeline.IngestProgress` drawn with ``click.progressbar``: its length is
    the bytes to parse, so the bar and the time left weigh a big trace more than a small one."""

    def __init__(self, file: TextIO, label: str = "ingest") -> None:
        self.file = file
        self.label = label
        self.total_files = self.total_bytes = self.files = self.bytes = 0
        self._bar: Any = None

    def start(self, total_files: int, total_bytes: int) -> None:
        self.total_files, self.total_bytes = total_files, total_bytes
        self._bar = click.progressbar(length=max(total_bytes, 1), label=self.label, file=self.file,
                                      show_eta=False, show_percent=True, item_show_func=self._info)
        self._bar.__enter__()

    def advance(self, path: Path, nbytes: int) -> None:
        self.files += 1
        self.bytes += nbytes
        if self._bar is not None:
            self._bar.update(nbytes)

    def close(self) -> None:
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.__exit__(None, None, None)

    def _info(self, _item: Any) -> str:
        """Traces and bytes done, and the time left once click's estimate is known (after a second)."""
        info = (f"{self.files}/{self.total_files} traces  "
                f"{fmt_bytes(self.bytes)}/{fmt_bytes(self.total_bytes)}")
        bar = self._bar
        if bar is not None and bar.eta_known and not bar.finished:
            info += f"  {bar.format_eta()} left"
        return info


def ingest_progress(enabled: bool, file: TextIO | None = None) -> IngestBar | None:
    """The bar to pass as ``progress=`` to ``ddprof.ingest``: when ``enabled`` and the stream (stderr by
    default) is a terminal; else None, and nothing is written."""
    stream = file if file is not None else sys.stderr
    return IngestBar(stream) if enabled and stream.isatty() else None
