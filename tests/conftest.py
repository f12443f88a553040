"""Shared fixtures: where the real traces are, and a session cache of ingested runs."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
TRACES = SHARED / "traces"


@pytest.fixture(scope="session")
def traces() -> Path:
    if not TRACES.is_dir():
        pytest.fail(f"real traces not found at {TRACES}: the tests need ../shared/traces beside the repo")
    return TRACES


@pytest.fixture(scope="session")
def ingested(tmp_path_factory: pytest.TempPathFactory, traces: Path):
    """``ingested("dlrm-8xV100-nccl")`` -> Run, each trace set ingested once per session."""
    import ddprof

    cache: dict[str, object] = {}

    def get(name: str):
        if name not in cache:
            out = tmp_path_factory.mktemp(name.replace("/", "_"))
            cache[name] = ddprof.ingest([traces / name], out)
        return cache[name]

    return get
