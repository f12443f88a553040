"""The core package type-checks (mypy), so the annotations that py.typed advertises are true."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_core_type_checks(tmp_path):
    pytest.importorskip("mypy")
    proc = subprocess.run([sys.executable, "-m", "mypy", "ddprof", "--cache-dir", str(tmp_path / "cache")],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
