"""The public face on a run: ``ddprof.validate(run)`` checks its events; ``repr(run)`` is one short line."""

from __future__ import annotations

import polars as pl
import pytest

import ddprof
from ddprof.errors import SchemaError
from tests.support.paths import DLRM


@pytest.fixture(scope="module")
def dlrm_run(tmp_path_factory):
    return ddprof.ingest([DLRM], tmp_path_factory.mktemp("dlrm") / "run")


def test_validate_takes_a_run(dlrm_run):
    ddprof.validate(dlrm_run)  # the bundled run holds every invariant
    ddprof.validate(dlrm_run.events())
    with pytest.raises(TypeError, match="an event table or a run, not int"):
        ddprof.validate(3)


def test_validate_names_the_run_dir_when_an_invariant_breaks(dlrm_run, monkeypatch):
    bad = dlrm_run.events().collect().with_columns(pl.lit(-1, dtype=pl.Int64).alias("dur_ns")).lazy()
    monkeypatch.setattr(type(dlrm_run), "events", lambda self, ranks=None: bad)
    with pytest.raises(SchemaError, match=rf"^{dlrm_run.path}: event table: \d+ row\(s\) with negative duration"):
        ddprof.validate(dlrm_run)


def test_repr_of_a_run_is_one_short_line(dlrm_run):
    text = repr(dlrm_run)
    assert text == f"Run({str(dlrm_run.path)!r}, ranks 0-7 of 8, gpu, 1 step)"
    assert len(text) < 200 and "\n" not in text
