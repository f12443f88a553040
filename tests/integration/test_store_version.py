"""Cache validity: a store written by other ingest code is rebuilt, whichever module that shapes it changed;
and the modules fingerprinted are the same in a checkout and in an installed wheel."""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

import ddprof
from ddprof.ingestion import pipeline, store_version
from ddprof.synth import DataParallel, write_kineto

REPO = Path(store_version.__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def fresh_fingerprint():
    store_version.store_modules.cache_clear()
    store_version.store_fingerprint.cache_clear()
    yield
    store_version.store_modules.cache_clear()
    store_version.store_fingerprint.cache_clear()


def _ast_closure() -> set[Path]:
    """The same closure as store_modules, read with the parser instead of the regular expression."""
    todo, seen = sorted((REPO / "ingestion").glob("*.py")), set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        names: set[str] = set()
        tree = ast.parse(path.read_text())
        ancestor = path.name == "__init__.py" and path.parent != REPO / "ingestion"
        for node in (tree.body if ancestor else ast.walk(tree)):  # a package's face: its module-level imports
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.update([node.module, *(f"{node.module}.{a.name}" for a in node.names)])
        for name in names:
            parts = name.split(".")
            if parts[0] == "ddprof":
                base = REPO.joinpath(*parts[1:])
                todo += [f for f in (base.with_suffix(".py"), base / "__init__.py") if f.is_file()]
                if not base.with_suffix(".py").is_file() and base.with_suffix(".c").is_file():
                    seen.add(base.with_suffix(".c"))  # a compiled module: its C source (no Python import in it)
        todo += [p / "__init__.py" for p in path.parents if REPO in (p, *p.parents)]
    return seen


def test_every_module_that_shapes_the_store_is_fingerprinted():
    modules = set(store_version.store_modules())
    assert modules == _ast_closure()
    names = {str(p.relative_to(REPO)) for p in modules}
    # launch matching, the collective vocabulary, the schema, rank resolution: imported, so covered
    assert {"frames/keyjoin.py", "vocabulary/collective_ops.py", "store/schema.py", "readers/ranks.py",
            "vocabulary/fields.py"} <= names
    # the readers, through the registry ingestion asks: Kineto's decoding and linking shape the store
    assert {"readers/registry.py", "readers/base.py", "readers/kineto/reader.py", "readers/kineto/decode.py",
            "readers/kineto/link.py", "readers/kineto/build.py", "readers/kineto/_scan.c"} <= names
    # the registry also lists the Flight Recorder reader: a change there rebuilds stores it does not shape
    # (a cache miss, never a stale store)
    assert "readers/flightrec/reader.py" in names
    assert not any(n.startswith(("analyses", "collectors", "dashboards", "cli")) for n in names)
    # the report's contract is not what ingest runs: the store reads a report's detail tables without it
    # (Run.table), so a change to a record or a detail table leaves every cached store valid
    assert not any(n.startswith("report/") for n in names)


def test_changing_any_of_them_changes_the_fingerprint(monkeypatch):
    original = store_version.store_fingerprint()
    assert original.startswith(f"{store_version.INGEST_VERSION}-")
    real = store_version._source
    for path in store_version.store_modules():
        monkeypatch.setattr(store_version, "_source", lambda p, path=path: real(p) + (b"#" if p == path else b""))
        store_version.store_fingerprint.cache_clear()
        assert store_version.store_fingerprint() != original, path
    monkeypatch.setattr(store_version, "_source", real)
    monkeypatch.setattr(store_version, "INGEST_VERSION", store_version.INGEST_VERSION + 1)
    store_version.store_fingerprint.cache_clear()
    assert store_version.store_fingerprint() != original


def test_a_store_of_other_code_is_rebuilt_and_the_same_code_reuses_it(tmp_path, monkeypatch):
    traces = write_kineto(DataParallel(ranks=2, steps=1), tmp_path / "traces")
    parsed: list[str] = []
    real_ingest_files = pipeline.ingest_files
    monkeypatch.setattr(pipeline, "ingest_files", lambda paths, *a: parsed.extend(paths) or real_ingest_files(paths, *a))
    ddprof.ingest([traces], tmp_path / "run")
    assert len(parsed) == 2
    ddprof.ingest([traces], tmp_path / "run")
    assert len(parsed) == 2  # same code, unchanged traces: reused
    keyjoin = REPO / "frames" / "keyjoin.py"
    real = store_version._source
    monkeypatch.setattr(store_version, "_source", lambda p: real(p) + (b"\n# changed" if p == keyjoin else b""))
    store_version.store_fingerprint.cache_clear()
    run = ddprof.ingest([traces], tmp_path / "run")
    assert len(parsed) == 4 and run.manifest["ingest_fingerprint"] == store_version.store_fingerprint()


#: Prints the fingerprinted modules (relative to the ddprof package) of the ddprof that ``python`` imports,
#: loading store_version.py by its path: the wheel's venv has none of ddprof's dependencies.
_LIST = """
import importlib.util, json, sys, sysconfig
from pathlib import Path
pkg = Path(sysconfig.get_paths()["purelib"]) / "ddprof"
spec = importlib.util.spec_from_file_location("store_version", pkg / "ingestion" / "store_version.py")
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
print(json.dumps([str(p.relative_to(pkg)) for p in mod.store_modules()]))
"""


@pytest.mark.slow
def test_an_installed_wheel_fingerprints_the_same_modules_as_the_checkout(tmp_path):
    """Installed, the analyses, collectors and dashboards sit inside the ddprof package: the set must not
    grow with them (it did through the package's ``__init__``), or every cache is rebuilt whenever an
    analysis changes."""
    root = tmp_path / "src"  # a copy: setuptools builds in the source tree (build/, *.egg-info)
    shutil.copytree(REPO.parent, root, ignore=shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "tests",
                                                                       "sample_traces", "benchmarks", "__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(root)], check=True, capture_output=True)
    wheel = next((tmp_path / "dist").glob("ddprof-*.whl"))
    venv.create(tmp_path / "venv", with_pip=True)
    py = tmp_path / "venv" / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], check=True,
                   capture_output=True)
    installed = set(json.loads(subprocess.run([str(py), "-c", _LIST], check=True, capture_output=True,
                                              text=True).stdout))
    assert (tmp_path / "venv").joinpath(*_purelib(py), "ddprof", "analyses", "report.py").is_file()  # the layout differs
    checkout = {str(p.relative_to(REPO)) for p in store_version.store_modules()}
    assert installed == checkout
    assert not any(n.startswith(("analyses", "collectors", "dashboards", "cli")) for n in installed)


def _purelib(py: Path) -> tuple[str, ...]:
    """The venv's site-packages, relative to the venv."""
    out = subprocess.run([str(py), "-c", "import sysconfig, sys; print(sysconfig.get_paths()['purelib'][len(sys.prefix) + 1:])"],
                         check=True, capture_output=True, text=True).stdout.strip()
    return tuple(Path(out).parts)
