"""The registry of the report's sections: each section is declared once, in its own module, and found here.

A module of the analyses package declares the sections it computes as its module-level ``SECTIONS``, a tuple
of :class:`Section`: what a report with no traced run holds for it (``empty``; :data:`ABSENT`: such a
report has no such key), the record its value is (``record``, a type of :mod:`ddprof.report.schema` or a
:class:`ddprof.report.schema.Row` of the module's own; ``when_absent``: what a report without the key reads
as), the record of the rows of its detail table (``detail``: its per-step or per-instance rows, written as
Parquet beside the report), the function that computes its rows from one group of ranks' events
(``per_rank``, on the thread of its ``family``: :func:`.rank_groups.per_rank_frames`), or across ranks from
the groups' small per-rank summaries (``cross``: its value; ``cross_table``: its detail table, for a section
whose per-step or per-instance rows are computed across ranks; both take a :class:`CrossRank`, and
``keeps`` names the derived frames every group keeps for them beyond the common ones,
:func:`.rank_groups.cross_rank_sections`), how its rows per step are summarised
when they are a detail table (``summary``: keys, measures, the measure the run's worst steps are chosen by:
:mod:`.summaries`), whether :func:`.report.analyse` computes it from the events (``analysed``; the others
come from the run's manifest, its clocks or its Flight Recorder dumps), how it is shown (``tables``:
:class:`ddprof.report.display.Table`; the text report and the HTML report draw every declared table,
:func:`tables`), what it says (``verdict``: its rule, a function of the report returning sentences, said
at its place ``verdict_at`` by :func:`.verdicts.verdicts`) and its place among the sections (``order``:
the report's key order, the JSON Schema's ``required``).

From the declarations, on first use: :data:`SECTIONS` (every section, by ``order``), :data:`EMPTY_SECTIONS`,
:data:`SECTION_ORDER`, :data:`PER_RANK`, :data:`STEP_SECTIONS`, :data:`TABLE_ROWS` and :data:`DETAIL` (the
detail tables and their rows' records), :data:`Report` (the report's typed record: the run, every declared
section, the version, the verdicts and the status) and the JSON Schema generated from it (:func:`schema`;
``python -m ddprof.analyses.sections`` writes ``docs/report.schema.json``).

Discovery, and why this rule: every module of the analyses package (subpackages included, walked with
:func:`pkgutil.walk_packages` over the package's ``__path__``) is imported once, on the first read of a
derived name, and its ``SECTIONS`` collected. A new section is then one module (its analysis, its
declaration, its record, its table and verdict rule) plus its test, with no list to edit, and a test can
add a module by putting a folder on the package's ``__path__`` (:func:`rediscover`). Not a package of
section modules: the sections live beside the analyses that compute them (``overlap.py`` declares
``overlap`` and ``overlap_by_step``), where their rules and tables read the same records. Not at import
time: the modules that use the registry (:mod:`.rank_groups`, :mod:`.summaries`, :mod:`.report`,
:mod:`.verdicts`) import this module and read its names when they run, so the walk may import them
without a cycle (a module that read a derived name while the walk imports it is refused with an
ImportError that says so). The names are derived once, under a lock (the families' frames run on threads,
which may be the first to ask), and the same declarations found again give the same objects.

Sections computed across ranks share work through derived frames of the summaries' :class:`Prepared`: the
collective instances (``collectives(p, world_size)``) feed ``collectives``, its detail table, ``bandwidth``
and the run's warnings, and the pipeline stages feed ``pipeline`` and the ``bubbles`` detail table; each is
computed once whichever builder asks first.

Why the tables are declared with their section and not in the core beside the records: a section is
declared once, with its verdict rule (an analysis, which the core may not import); the types they are
written in (:mod:`ddprof.report.display`) and the formatters (:mod:`ddprof.vocabulary.units`) are core, so a
renderer needs nothing but a report and these declarations.

The records of the sections ddprof has always had stay in :mod:`ddprof.report.schema`, the core contract
that the dashboards, the terminal report, the CLI and the comparison of reports import by name (the core
may not re-export what the analyses define); a new section may declare its record in its own module.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import polars as pl
from ddprof.analyses.frames.memo import Prepared
from msgspec import Meta

from ddprof.report.display import Table, ordered
from ddprof.report.schema import SCHEMA_PATH, Row, RunSection, schema_of
from ddprof.report.schema import parse as parse_as

#: ``empty`` of a section that a report with no traced run does not hold.
ABSENT: Any = object()


@dataclass(frozen=True)
class CrossRank:
    """What a section computed across ranks is computed from: ``p``, whose derived frames are the run's per-rank
    summaries (its events are empty: no event is read across ranks), the run's world size, the per-rank
    frames of every group in rank order (``frames``, by section or summary name), the detail tables
    (``tables``: filled before any ``cross`` builder runs, NaN as null), where each rank ran
    (``placement``: rank -> (host, CPUs it was bound to), either None where the run does not say), and where
    each rank's CPU went in the traced steps (``cpu``: rank -> the report's ``job.cpu`` row, from the
    collector's step measures; empty without them)."""

    p: Prepared
    world_size: int | None
    frames: dict[str, pl.DataFrame]
    tables: dict[str, pl.DataFrame]
    placement: dict[int, tuple[str | None, str | None]] = field(default_factory=dict)
    cpu: dict[int, dict[str, Any]] = field(default_factory=dict)


@dataclass(frozen=True)
class Section:
    """One section (module doc)."""

    name: str
    empty: Any = ABSENT
    per_rank: Callable[[Any], pl.DataFrame] | None = None  # a Prepared's events -> the section's frame
    family: str | None = None
    summary: tuple[tuple[str, ...], tuple[str, ...], str] | None = None
    analysed: bool = True
    tables: tuple[Table, ...] = ()
    verdict: Callable[[dict[str, Any]], list[str]] | None = None
    verdict_at: int = 1_000
    record: Any = None
    when_absent: Any = msgspec.NODEFAULT
    detail: type[Row] | None = None
    order: int = 1_000
    cross: Callable[[CrossRank], Any] | None = None
    cross_table: Callable[[CrossRank], pl.DataFrame] | None = None
    keeps: tuple[Callable[..., pl.DataFrame], ...] = ()  # derived frames of a group's events, by function


# --- the fixed fields of every report, around its sections ----------------------------------------------

_REPORT_DOC = """``ddprof analyze --format json``: what was analysed, what the trace cannot tell, every section, the
verdicts and the status the exit code follows (0 ok, 1 problem, 3 partial)."""
_HEAD: list[tuple[str, Any]] = [("run", RunSection)]
_TAIL: list[tuple[str, Any]] = [
    ("report_version", Annotated[int, Meta(description="the contract's version; absent: version 1")]),
    ("verdicts", Annotated[list[str], Meta(description="one sentence each, most important first")]),
    ("status", Annotated[Literal["ok", "problem", "partial"], Meta(description="what the exit code follows")]),
]
#: The report's keys that are not sections.
FIXED: tuple[str, ...] = tuple(name for name, _ in (*_HEAD, *_TAIL))

#: The names derived from the declarations (module doc), set on first use.
_DERIVED = ("SECTIONS", "EMPTY_SECTIONS", "SECTION_ORDER", "PER_RANK", "STEP_SECTIONS", "TABLE_ROWS", "DETAIL",
            "KEPT", "Report")
_discovering = False
_lock = threading.RLock()


def _declared() -> list[Section]:
    """Every module's ``SECTIONS``, by ``order`` (then module and declaration order)."""
    package = sys.modules[__name__.rpartition(".")[0]]
    found: list[tuple[int, str, int, Section]] = []
    names = sorted({m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")})
    for name in [package.__name__, *names]:
        if name == __name__:
            continue
        declared = getattr(importlib.import_module(name), "SECTIONS", ())
        found.extend((s.order, name, i, s) for i, s in enumerate(declared))
    out = [s for *_, s in sorted(found, key=lambda f: f[:3])]
    seen: set[str] = set()
    for s in out:
        if s.name in seen or s.name in FIXED:
            raise ValueError(f"the report section {s.name!r} is declared twice")
        seen.add(s.name)
    return out


def _report_record(sections: tuple[Section, ...]) -> type[Row]:
    """The report's typed record: the run, each section with a record, the version, verdicts and status."""
    absent = [s.name for s in sections if s.record is not None and s.when_absent is not msgspec.NODEFAULT]
    doc = _REPORT_DOC
    if absent:
        names = [f"``{n}``" for n in absent]
        listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]
        doc += f" A report on Flight Recorder\ndumps alone has no {listed}."
    fields = [*_HEAD, *((s.name, s.record) if s.when_absent is msgspec.NODEFAULT else (s.name, s.record, s.when_absent)
                        for s in sections if s.record is not None), *_TAIL]
    record: type[Row] = msgspec.defstruct("Report", fields, bases=(Row,), module=__name__, kw_only=True,
                                          namespace={"__doc__": doc})  # type: ignore[assignment]
    return record


def _derive() -> None:
    """Find the declarations and set the derived names (module doc); once, whichever thread asks first (the
    families' frames are computed on threads, which may be the first to ask)."""
    global _discovering
    with _lock:
        if all(name in globals() for name in _DERIVED):
            return  # derived by another thread while this one waited
        if _discovering:
            raise ImportError("a module read the section registry while the registry was importing it: read "
                              "ddprof.analyses.sections' names inside functions, not at import time")
        _discovering = True
        try:
            _set(tuple(_declared()))
        finally:
            _discovering = False


#: The names derived before, kept so that the same declarations found again give the same objects (a
#: ``Report`` class a caller holds stays the report's record after a test's :func:`rediscover`).
_derived_before: list[dict[str, Any]] = []


def _set(sections: tuple[Section, ...]) -> None:
    """The derived names of ``sections``, set together (a thread reads each name set, or derives them)."""
    names = next((d for d in _derived_before if d["SECTIONS"] == sections), None)
    if names is None:
        details = {s.name: s.detail for s in sections if s.detail is not None}
        names = {
            "SECTIONS": sections,
            # What a report with no traced run holds (a fresh copy for each report: ``copy.deepcopy``).
            "EMPTY_SECTIONS": {s.name: s.empty for s in sections if s.empty is not ABSENT},
            # What :func:`.report.analyse` returns: the sections computed from events, and the collectives'
            # warnings (sentences for the run's warnings).
            "SECTION_ORDER": (*(s.name for s in sections if s.analysed), "collective_warnings"),
            # Sections computed per rank: a group's rows are the run's rows of its ranks, in the run's order.
            "PER_RANK": tuple(s.name for s in sections if s.per_rank is not None),
            # Sections whose rows per step are a detail table summarised by :func:`.summaries.per_step`.
            "STEP_SECTIONS": {s.name: s.summary for s in sections if s.summary is not None},
            # Each detail table and the record of its rows; their names.
            "TABLE_ROWS": details,
            "DETAIL": tuple(details),
            # The derived frames the groups keep for the sections computed across ranks, by name.
            "KEPT": {f.__name__: f for s in sections for f in s.keeps},
            "Report": _report_record(sections),
        }
        _derived_before.append(names)
    globals().update(names)


def __getattr__(name: str) -> Any:
    if name in _DERIVED:
        _derive()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _get(name: str) -> Any:
    """A derived name, as the module holds it now (a test may have replaced it)."""
    return globals()[name] if name in globals() else __getattr__(name)


def rediscover() -> None:
    """Forget the derived names, so the next read walks the package again (a test that adds a module)."""
    for name in _DERIVED:
        globals().pop(name, None)


def tables(sections: tuple[Section, ...] | None = None) -> list[Table]:
    """Every declared table of ``sections`` (all of :data:`SECTIONS` by default), in the order they are shown
    (``Table.at``): what the text and the HTML report draw."""
    return ordered([t for s in (_get("SECTIONS") if sections is None else sections) for t in s.tables])


def family_frames(p: Any, family: str) -> dict[str, pl.DataFrame]:
    """The per-rank sections of ``family``, each computed on the events of ``p`` (a Prepared)."""
    return {s.name: s.per_rank(p) for s in _get("SECTIONS") if s.family == family and s.per_rank is not None}


def parse(report: dict[str, Any]) -> Any:
    """The report as its typed record, :data:`Report` (validated: a wrong or missing field raises
    :class:`msgspec.ValidationError` naming its path)."""
    return parse_as(report, _get("Report"))


def schema() -> dict[str, Any]:
    """The JSON Schema of :data:`Report`, with each detail table's rows under ``$defs``
    (:func:`ddprof.report.schema.schema_of`)."""
    return schema_of(_get("Report"), _get("TABLE_ROWS"), source="ddprof/analyses/sections.py")


def schema_text() -> str:
    """:func:`schema` as the committed file's text."""
    return json.dumps(schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m ddprof.analyses.sections [PATH]``: write the schema (default ``docs/report.schema.json``)."""
    from ddprof.store.atomic import write_text_atomic

    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else SCHEMA_PATH
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, schema_text())
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":  # run as a script: the registry is the imported module, not this copy
    from ddprof.analyses.sections import main as _main

    sys.exit(_main())
