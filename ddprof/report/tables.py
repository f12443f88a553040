"""The report's detail tables: its per-step and per-instance rows, as Parquet beside the JSON.

The JSON report is a summary whose size is bounded by the ranks and by the things it names; the rows
that grow with steps and collective instances are tables written beside it (which sections have one is
declared by each section, ``detail``: :data:`ddprof.analyses.sections.DETAIL`):

* ``ddprof analyze SRC --format json -o FILE`` writes ``FILE.tables/NAME.parquet`` (:func:`tables_dir`);
* ``ddprof analyze`` of a writable run dir also writes ``RUN/report/tables/NAME.parquet``
  (:func:`run_tables_dir`), so that ``open_run(RUN)`` finds them;
* in Python, ``ddprof.analyze(path).table("bubbles")`` is the table as a Polars DataFrame.

Each table's columns are the fields of its section's ``detail`` record (``bubbles``:
:class:`~ddprof.report.schema.BubbleRow`), one row per rank and step (per collective instance for
``collectives``), in the order the analyses give them; a float that is not finite is null, as in JSON.
Each file is written atomically (:func:`ddprof.store.atomic.write_atomic`).

A report of version 1 (``report_version`` absent) held these rows in the JSON itself: :func:`detail_rows`
reads them there, so a consumer reads either version the same way.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
import polars as pl

from ddprof.errors import BadInputError
from ddprof.store.atomic import write_atomic
from ddprof.store.rundir import REPORT_TABLES, missing_table

SUFFIX = ".tables"


def tables_dir(report_path: str | Path) -> Path:
    """Where the tables of the JSON report at ``report_path`` are: ``FILE.tables`` beside it."""
    p = Path(report_path)
    return p.with_name(p.name + SUFFIX)


def run_tables_dir(run_path: str | Path) -> Path:
    """Where ``ddprof analyze`` leaves the tables of a run dir's report: ``RUN/report/tables``."""
    return Path(run_path) / REPORT_TABLES


def null_nonfinite(df: pl.DataFrame) -> pl.DataFrame:
    """``df`` with NaN and infinities (in float columns) as null: what JSON can say."""
    floats = [pl.when(pl.col(n).is_finite()).then(n).alias(n) for n, t in df.schema.items() if t.is_float()]
    return df.with_columns(floats) if floats else df


def write_tables(directory: str | Path, tables: Mapping[str, pl.DataFrame]) -> Path:
    """Each table as ``directory/NAME.parquet``, atomically (a reader never sees a file cut short)."""
    d = Path(directory)
    for name, df in tables.items():
        write_atomic(d / f"{name}.parquet", df.write_parquet)
    return d


class AnalysisReport(dict[str, Any]):
    """The JSON report (a dict: ``json.dumps`` writes it, ``report["run"]`` reads it) with its detail
    tables: ``report.table(name)``. The tables are frames in memory (a report just built) or the files of
    a directory (a saved report), read when asked for. ``names``: the detail tables a report has (the
    sections' declared ones, :data:`ddprof.analyses.sections.DETAIL`); by default those in memory."""

    def __init__(self, data: Mapping[str, Any], tables: Mapping[str, pl.DataFrame] | None = None,
                 directory: str | Path | None = None, names: tuple[str, ...] | None = None) -> None:
        super().__init__(data)
        self.tables: dict[str, pl.DataFrame] = dict(tables or {})
        self.directory = Path(directory) if directory is not None else None
        self.names: tuple[str, ...] = tuple(self.tables) if names is None else tuple(names)

    def table(self, name: str) -> pl.DataFrame:
        """The detail table ``name`` (one of :attr:`names`); a BadInputError names the missing file."""
        if name not in self.names:
            raise KeyError(f"{name!r} is not a detail table (those are: {', '.join(self.names)})")
        if name not in self.tables:
            if self.directory is None:
                raise BadInputError(f"this report has no detail table {name!r}")
            if not (self.directory / f"{name}.parquet").is_file():
                raise missing_table(self.directory, name)
            self.tables[name] = pl.read_parquet(self.directory / f"{name}.parquet")
        return self.tables[name]

    def __eq__(self, other: object) -> bool:
        """Equal dicts, and, against another AnalysisReport, equal tables in memory (nulls equal): two
        reports with the same summaries but other rows are not equal."""
        if not dict.__eq__(self, other):
            return False
        if not isinstance(other, AnalysisReport):
            return True
        return self.tables.keys() == other.tables.keys() and all(
            df.equals(other.tables[name], null_equal=True) for name, df in self.tables.items())

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # a dict: unhashable

    def write_tables(self, directory: str | Path) -> Path:
        """Every detail table into ``directory`` (:func:`write_tables`)."""
        return write_tables(directory, {name: self.table(name) for name in self.names})

    def __reduce__(self) -> Any:  # pickled (Ray, multiprocessing) with its tables
        return (AnalysisReport, (dict(self), self.tables, self.directory, self.names))


def report_json(report: Mapping[str, Any]) -> str:
    """The report as JSON text, as ``json_text`` (:mod:`ddprof.store.atomic`) indents it, except that an array of
    numbers, strings, booleans or nulls (a collective's ranks and arrivals, a rank's step ranges) is on one
    line: the same JSON value and, indented again, the same text, without a line per rank of every such array
    (a generated run of 1,024 ranks x 100 steps: 5.8 MB with a line per element, 4.9 MB so). A float is
    written with ``FLOAT_DIGITS`` significant digits."""
    out: list[str] = []
    _format(report, "", out)
    return "".join(out)


_SCALARS = (str, int, float, bool, type(None))


def _format(value: Any, indent: str, out: list[str]) -> None:
    if isinstance(value, Mapping) and value:
        inner = indent + "  "
        out.append("{")
        for i, (k, v) in enumerate(value.items()):
            out.append(("," if i else "") + "\n" + inner + msgspec.json.encode(str(k)).decode() + ": ")
            _format(v, inner, out)
        out.append("\n" + indent + "}")
    elif isinstance(value, (list, tuple)) and value and not all(isinstance(v, _SCALARS) for v in value):
        inner = indent + "  "
        out.append("[")
        for i, v in enumerate(value):
            out.append(("," if i else "") + "\n" + inner)
            _format(v, inner, out)
        out.append("\n" + indent + "]")
    else:  # a scalar, an empty container, or an array of scalars: one line
        items = value if isinstance(value, (list, tuple)) else None
        out.append("[" + ", ".join(_scalar(v) for v in items) + "]" if items is not None else _scalar(value))


#: Significant digits of a float in the JSON report: ns in a µs figure up to a second, 1e-9 of a ratio.
#: The last bits of a float are the order its sums ran in (threads, groups), not the trace: a report
#: is the same text however it was computed, and 1,024 ranks' report 0.3 MB smaller. The detail tables
#: keep every bit.
FLOAT_DIGITS = 9


def rounded(value: Any) -> Any:
    """``value`` (a report, a section, a number) with each finite float at ``FLOAT_DIGITS`` significant
    digits: what the JSON report holds of it. The report builder rounds a report once, so a report in
    memory (``ddprof.analyze(path)``) is its JSON; the writer rounds again what it is given, which changes
    nothing of a built report."""
    if isinstance(value, float):
        return float(f"{value:.{FLOAT_DIGITS}g}") if math.isfinite(value) else value
    if isinstance(value, Mapping):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v) for v in value]
    return value


def _scalar(value: Any) -> str:
    return msgspec.json.encode(rounded(value) if isinstance(value, float) else value, enc_hook=str).decode()


def detail_rows(report: Mapping[str, Any], name: str) -> list[dict[str, Any]]:
    """The per-step or per-instance rows of section ``name``: from the report's detail table, or, in a
    report of version 1, from the JSON itself (module doc)."""
    if isinstance(report, AnalysisReport):
        return report.table(name).to_dicts()
    if "report_version" not in report:
        return list(report.get(name) or [])
    raise BadInputError(f"this report keeps its {name} rows in a detail table: open it with "
                        "ddprof.inputs.reports.load_report (it reads FILE.tables/ beside FILE)")
