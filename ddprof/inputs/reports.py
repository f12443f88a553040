"""A report to compare, from what the user names: a saved ``ddprof analyze --format json`` report (one small
file a repository can keep), a run dir, or raw traces (ingested like ``ddprof analyze`` does).

:func:`load_with_kernels` also reads every kernel from the store (:mod:`.all_kernels`) when there is one:
a saved report keeps only its top kernels.

A saved report without ``report_version`` (version 1, written before the contract was declared) holds its
per-step and per-instance rows in the JSON and is read as it is; a version 2 report's rows are its detail
tables, ``FILE.tables/`` beside it; one of a newer version is refused, saying how to remake it."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec

from ddprof.analyses import sections
from ddprof.analyses.compare.all_kernels import every_kernel
from ddprof.analyses.report import build_report
from ddprof.errors import BadInputError
from ddprof.inputs.analyze import analyze
from ddprof.inputs.sources import open_source
from ddprof.report.schema import REPORT_VERSION, RunSection, version_of
from ddprof.report.tables import AnalysisReport, rounded, tables_dir

#: Sections a comparison reads that reports written before them lack.
NEEDED = ("step_times", "kernels", "kernels_by_step")
_REPORT_START = re.compile(rb'\A\s*\{\s*"run"\s*:')


def is_saved_report(path: Path) -> bool:
    """A JSON file whose first key is ``run`` (how ``ddprof analyze --format json`` writes it); a Kineto
    trace starts otherwise (``schemaVersion``, ``deviceProperties``, ``traceEvents``...)."""
    if not path.is_file() or path.name.endswith(".gz"):
        return False
    with path.open("rb") as f:
        return bool(_REPORT_START.match(f.read(4096)))


def check_report(report: Any, path: str | Path) -> dict[str, Any]:
    """``report`` if it is a report a comparison can read (its ``run`` section reads as the typed
    :class:`~ddprof.report.schema.RunSection` the comparison reads it as), else a BadInputError naming the
    file."""
    if not isinstance(report, dict) or not isinstance(report.get("run"), dict):
        raise BadInputError("not a ddprof report (no 'run' section)", path=path)
    try:
        msgspec.convert(report["run"], RunSection)
    except msgspec.ValidationError as exc:
        raise BadInputError(f"not a ddprof report: its 'run' section does not read as one ({exc})", path=path) from None
    version = version_of(report)
    if version > REPORT_VERSION:
        raise BadInputError(f"this report follows report_version {version}, newer than this ddprof reads "
                            f"({REPORT_VERSION}); save it again with this ddprof: "
                            "`ddprof analyze RUN --format json -o FILE`", path=path)
    missing = [k for k in NEEDED if k not in report]
    if missing:
        raise BadInputError(f"this report lacks {', '.join(missing)} (written by an older ddprof); save it again "
                            "with `ddprof analyze RUN --format json -o FILE`", path=path)
    steps, coll = report["step_times"], report["collectives"]  # version 1: the rows; later: their summaries
    if not (steps.get("per_rank") if isinstance(steps, dict) else steps) and not (
            coll.get("instances") if isinstance(coll, dict) else coll):
        raise BadInputError("nothing to compare: the report has no profiler steps and no collectives", path=path)
    return report


def load_report(path: str | Path, *, cache: str | Path | None = None,
                rank_map: dict[str, int] | None = None) -> dict[str, Any]:
    """The report of ``path`` (module doc); ``rank_map`` gives the rank of traces that do not say
    (``{"trace.json": 3}``, as :func:`ddprof.inputs.analyze.analyze`)."""
    p = Path(path)
    if not p.exists():
        raise BadInputError("no such file or directory", path=p)
    report = _saved(p) if is_saved_report(p) else analyze(p, cache=cache, rank_map=rank_map)
    return check_report(report, p)


def _saved(path: Path) -> dict[str, Any]:
    """A saved report: version 1 as it is (its rows are in the JSON), a later one with the detail tables
    written beside it (``FILE.tables/``, read when a comparison asks for them)."""
    try:
        report = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise BadInputError(f"cannot read this saved report ({exc})", path=path) from exc
    if isinstance(report, dict) and "report_version" in report:
        return AnalysisReport(report, directory=tables_dir(path), names=sections.DETAIL)
    return report


def load_with_kernels(path: str | Path, *, cache: str | Path | None = None, rank_map: dict[str, int] | None = None
                      ) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """(the report of ``path``, every kernel of its store) — None for the kernels when ``path`` is a saved
    report or a directory of Flight Recorder dumps (no store to read). ``rank_map`` as :func:`load_report`."""
    p = Path(path)
    if not p.exists():
        raise BadInputError("no such file or directory", path=p)
    if is_saved_report(p):
        return load_report(p), None
    with open_source([p], cache=cache, rank_map=rank_map) as src:
        report = check_report(build_report(src.run, dumps=src.dumps), p)
        return report, (rounded(every_kernel(src.run)) if src.run is not None else None)  # as the report's
