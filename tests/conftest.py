"""Shared fixtures: where the real traces are (in the repository: :mod:`tests.support.paths`), and a
session cache of ingested runs. Every report the suite builds is validated against the declared contract
(:func:`pytest_configure`)."""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.paths import TRACES, trace_set


def pytest_configure(config: pytest.Config) -> None:
    """Wrap :func:`ddprof.analyses.report.build_report` for the session, before any test module imports it,
    so that every report a test builds (directly, through ``ddprof.analyze`` or the CLI in-process) is
    converted into its record assembled from the sections' declarations (:data:`ddprof.analyses.sections.Report`),
    and each of its detail tables into its rows' record:
    a field that drifts from its declaration fails the test that built the report, naming the field's path."""
    import ddprof.analyses.report as report_module
    from ddprof.analyses.sections import parse

    from ddprof.report.schema import rows

    original = report_module.build_report

    @functools.wraps(original)
    def build_report(*args, **kwargs):
        report = original(*args, **kwargs)
        parse(report)
        from ddprof.analyses.sections import TABLE_ROWS

        for name, record in TABLE_ROWS.items():  # each detail table's rows as their declared record
            rows(report.table(name).to_dicts(), record)
        return report

    report_module.build_report = build_report


@pytest.fixture(scope="session")
def traces() -> Path:
    """``tests/data/traces``: the real public traces and dumps copied into the repository."""
    return TRACES


@pytest.fixture(scope="session")
def ingested(tmp_path_factory: pytest.TempPathFactory):
    """``ingested("dlrm-8xV100-nccl")`` -> Run, each real trace set (:func:`tests.support.paths.trace_set`)
    ingested once per session."""
    import ddprof

    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            out = tmp_path_factory.mktemp(name.replace("/", "_"))
            cache[name] = ddprof.ingest([trace_set(name)], out)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def terminal_stderr(pytestconfig: pytest.Config):
    """A file on the stderr pytest itself writes to, beneath its capture of the tests' output: what a test
    writes there just before the process is stopped (a hung case's stacks) is shown, where captured output
    would die with the process. None when pytest captures nothing (stderr is the terminal's already)."""
    capman = pytestconfig.pluginmanager.getplugin("capturemanager")
    if capman is None:
        yield None
        return
    with capman.global_and_fixture_disabled():
        fd = os.dup(2)
    with os.fdopen(fd, "w") as f:
        yield f


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Callable[[str, str], Path]]:
    """``tmpfs(size, name)``: a new directory under ``tmp_path`` with a tmpfs of that size (``"96k"``)
    mounted on it, unmounted after the test; the test is skipped when not run as root (CI runs as root)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs (a small or a read-only file system) needs root; CI runs as root")
    mounted: list[Path] = []

    def mount(size: str, name: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(d)], check=True)
        mounted.append(d)
        return d

    yield mount
    for d in reversed(mounted):
        subprocess.run(["umount", "-l", str(d)], check=True)
