"""Regression checks inside a test suite, for teams that keep recorded traces beside their tests::

    from ddprof.testing import assert_no_regression

    def test_training_step_did_not_regress(tmp_path):
        run = capture_a_few_steps(tmp_path)             # a run dir or traces
        assert_no_regression(run, "baselines/train.json")  # a saved `ddprof analyze --format json` report

The failure message is the explanation ``ddprof check`` prints. The ``ddprof_check`` fixture hands out the
same function: add ``pytest_plugins = ["ddprof.testing"]`` to a ``conftest.py``. The analyses load on first use.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["RegressionError", "assert_no_regression", "ddprof_check"]


class RegressionError(AssertionError):
    """The run regressed (or its environment or workload changed: ``result["status"]`` says which); ``result``
    is the check's result dict."""

    def __init__(self, message: str, result: dict[str, Any]):
        super().__init__(message)
        self.result = result


def assert_no_regression(run: str | Path, baseline: str | Path, rules: str | Path | dict[str, Any] | None = None,
                         *, allow_different_job: bool = False, cache: str | Path | None = None) -> dict[str, Any]:
    """Check ``run`` against ``baseline`` (each a run dir, traces or a saved report) with ``rules`` (a TOML
    file, a dict of overrides, or None for the defaults). Returns the result when nothing regressed; raises
    :class:`RegressionError` with the explanation otherwise, and BadInputError (with its reason) for a
    baseline of another job unless ``allow_different_job``."""
    from ddprof.analyses.compare.check import check
    from ddprof.analyses.compare.rules import load_rules, merge_rules
    from ddprof.inputs.reports import load_report
    from ddprof.render.compare import check_text

    cfg = merge_rules(rules) if isinstance(rules, dict) else load_rules(rules)
    result = check(load_report(run, cache=cache), load_report(baseline, cache=cache), cfg,
                   allow_different_job=allow_different_job, run_source=str(run), base_source=str(baseline))
    if result["status"] != "ok":
        raise RegressionError(check_text(result), result)
    return result


try:
    import pytest
except ImportError:  # pragma: no cover - pytest is only needed for the fixture
    pass
else:
    @pytest.fixture
    def ddprof_check() -> Callable[..., dict[str, Any]]:
        """The :func:`assert_no_regression` function, as a fixture."""
        return assert_no_regression
