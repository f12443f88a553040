"""The package type-checks (mypy): core, analyses and collectors, so the annotations py.typed advertises are true."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO

#: Top-level folders that install as ``ddprof.<name>`` (pyproject.toml [tool.setuptools] package-dir).
MAPPED = ("analyses", "collectors")


def _installed_layout(root: Path) -> Path:
    """``root/ddprof``: the core package's entries plus ``analyses`` and ``collectors``, as symlinks.

    mypy cannot check these folders in place: ``mypy ddprof analyses collectors`` names them the top-level
    modules ``analyses`` and ``collectors``, while their imports say ``ddprof.analyses...``, which neither
    the source tree nor the editable install (an import hook mypy does not run) provides. With
    ``ignore_missing_imports`` those imports silently become ``Any`` and calls across modules go unchecked.
    Laid out as installed, ``mypy -p ddprof`` checks all three in one run with every import resolved.
    """
    pkg = root / "ddprof"
    pkg.mkdir(parents=True)
    for entry in (REPO / "ddprof").iterdir():
        if entry.name != "__pycache__":
            (pkg / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    for name in MAPPED:
        (pkg / name).symlink_to(REPO / name, target_is_directory=True)
    return root


def test_package_type_checks(tmp_path):
    pytest.importorskip("mypy")
    root = _installed_layout(tmp_path / "src")
    proc = subprocess.run([sys.executable, "-m", "mypy", "-p", "ddprof", "--config-file", str(REPO / "pyproject.toml"),
                           "--cache-dir", str(tmp_path / "cache")],
                          cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Every module was checked, the symlinked analyses and collectors included (and the compiled scanner's stub).
    n_modules = sum(1 for top in ("ddprof", *MAPPED) for pattern in ("*.py", "*.pyi") for f in (REPO / top).rglob(pattern)
                    if "__pycache__" not in f.parts)
    assert f"no issues found in {n_modules} source files" in proc.stdout, proc.stdout
