"""Dependency direction (docs/DESIGN.md §1): cli -> dashboards -> render | inputs -> analyses | collectors ->
core; inside the core, ingestion -> readers: the input formats (ddprof/readers) know nothing of the pipeline
that uses them.

Checked on the source with the AST, so a violation fails even if the import sits in a branch no test runs.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tests.support.paths import REPO

LAYERS = {  # folder -> installed package
    "ddprof": "ddprof", "analyses": "ddprof.analyses", "collectors": "ddprof.collectors",
    "dashboards": "ddprof.dashboards",
}
HEAVY = {"torch", "dash", "plotly", "click"}
#: Folders of ddprof/ that are layers of their own (the rest of ddprof/ is the core).
SUBLAYERS = ("cli", "readers", "render", "inputs")

FORBIDDEN = {
    "core": {"ddprof.analyses", "ddprof.collectors", "ddprof.dashboards", "ddprof.cli", "ddprof.render",
             "ddprof.inputs"} | HEAVY,
    "readers": {"ddprof.analyses", "ddprof.collectors", "ddprof.dashboards", "ddprof.cli", "ddprof.ingestion",
                "ddprof.inputs", "ddprof.render", "ddprof.synth"} | HEAVY,
    "analyses": {"ddprof.ingestion", "ddprof.collectors", "ddprof.dashboards", "ddprof.cli", "ddprof.render",
                 "ddprof.inputs"} | HEAVY,
    "render": {"ddprof.collectors", "ddprof.dashboards", "ddprof.cli", "ddprof.inputs"} | HEAVY,
    "inputs": {"ddprof.collectors", "ddprof.dashboards", "ddprof.cli", "ddprof.render"} | HEAVY,
    "collectors": {"ddprof.analyses", "ddprof.dashboards", "ddprof.cli", "ddprof.render", "ddprof.inputs", "dash",
                   "plotly", "click"},
    "dashboards": {"ddprof.cli", "ddprof.collectors", "torch", "click"},
    "cli": {"torch"},
}
# The public face re-exports lazily (function-level imports in ddprof/__init__.py): `ddprof.analyze` from
# the inputs, `ddprof.profile`/`ddprof.init` from the collectors, so `import ddprof` loads neither Polars
# nor torch. The program's entry point runs the CLI, and asks where `analyze` keeps its cache before it
# loads (to read a trace ahead: ddprof.inputs.cache, the standard library only).
ALLOWED = {("ddprof/__init__.py", "ddprof.collectors"), ("ddprof/__init__.py", "ddprof.inputs"),
           ("ddprof/__main__.py", "ddprof.cli"), ("ddprof/__main__.py", "ddprof.inputs.cache"),
           # The pytest helper runs the regression check: it loads the reports, compares and renders them
           # inside its function.
           ("ddprof/testing.py", "ddprof.analyses"), ("ddprof/testing.py", "ddprof.inputs"),
           ("ddprof/testing.py", "ddprof.render")}


def layer_of(rel: Path) -> str:
    top = rel.parts[0]
    if top == "ddprof":
        sub = rel.parts[1] if len(rel.parts) > 1 else ""
        return sub if sub in SUBLAYERS else "core"
    return top


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def _allowed(rel: str, mod: str) -> bool:
    """An :data:`ALLOWED` pair names the module, or a package above it."""
    return any(f == rel and (mod == m or mod.startswith(m + ".")) for f, m in ALLOWED)


def violations() -> list[str]:
    out = []
    for folder in LAYERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO)
            layer = layer_of(rel)
            for mod in imports(path):
                for banned in FORBIDDEN[layer]:
                    if (mod == banned or mod.startswith(banned + ".")) and not _allowed(str(rel), mod):
                        out.append(f"{rel} ({layer}) imports {mod}")
    return out


def test_dependency_direction():
    assert violations() == []


def test_the_public_face_imports_the_outer_layers_lazily():
    """ddprof/__init__.py's sanctioned imports sit inside functions, never at module level."""
    tree = ast.parse((REPO / "ddprof" / "__init__.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    names = {a.name for n in top if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in top if isinstance(n, ast.ImportFrom) and n.module}
    assert not {m for m in names if m.startswith(("ddprof.analyses", "ddprof.collectors", "ddprof.cli", "ddprof.inputs"))}


#: What code outside ddprof/readers may import of it: the interface, the registry, the formats it refuses,
#: the file reading all readers share, rank resolution, and the Flight Recorder dumps' data model that the
#: hang analysis reads (the dump set and its records).
READERS_FACE = {"ddprof.readers", "ddprof.readers.base", "ddprof.readers.registry", "ddprof.readers.unread",
                "ddprof.readers.source", "ddprof.readers.ranks", "ddprof.readers.read_ahead",
                "ddprof.readers.flightrec.load", "ddprof.readers.flightrec.records"}
#: The run generator writes Kineto traces: it spells their args with the names the Kineto reader decodes.
READERS_SHARED = {("ddprof/synth/kineto.py", "ddprof.readers.kineto.structs")}


def reader_internals() -> list[str]:
    out = []
    for folder in LAYERS:
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO)
            if rel.parts[:2] == ("ddprof", "readers"):
                continue
            for mod in imports(path):
                shared = any(mod.startswith(m) for f, m in READERS_SHARED if f == str(rel))
                parent = mod.rsplit(".", 1)[0]  # a name imported from a module of the face
                face = mod in READERS_FACE or (parent in READERS_FACE and parent != "ddprof.readers")
                if mod.startswith("ddprof.readers.") and not face and not shared:
                    out.append(f"{rel} imports {mod}")
    return out


def test_formats_are_known_through_the_registry_only():
    """The pipeline, the discovery of files and the sources pick a reader through ddprof.readers.registry:
    no module outside ddprof/readers imports a reader's own folder (a new format touches no caller)."""
    assert reader_internals() == []


def test_the_registry_check_catches_a_violation(tmp_path, monkeypatch):
    for name in LAYERS:
        (tmp_path / name).mkdir()
    (tmp_path / "ddprof" / "ingestion").mkdir()
    (tmp_path / "ddprof" / "ingestion" / "bad.py").write_text(
        "from ddprof.readers import registry\nfrom ddprof.readers.kineto.decode import decode\n")
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert sorted(reader_internals()) == ["ddprof/ingestion/bad.py imports ddprof.readers.kineto.decode",
                                  "ddprof/ingestion/bad.py imports ddprof.readers.kineto.decode.decode"]


def test_the_rooms_are_where_the_layout_says():
    """Input formats are readers (Kineto traces and Flight Recorder dumps, each a folder of
    ddprof/readers); the hang analysis and the frames the metrics share are subpackages of the analyses;
    each command is a module of the CLI."""
    for path in ("ddprof/readers/flightrec/unpickle.py", "ddprof/readers/flightrec/dump.py",
                 "ddprof/readers/flightrec/records.py", "ddprof/readers/flightrec/load.py",
                 "ddprof/readers/kineto/decode.py", "ddprof/readers/kineto/build.py", "ddprof/readers/registry.py",
                 "ddprof/readers/base.py", "ddprof/vocabulary/collective_ops.py", "analyses/hang/diagnose.py",
                 "analyses/frames/memo.py", "ddprof/cli/analyze_cmd.py", "ddprof/cli/ingest_cmd.py",
                 "ddprof/cli/launch_cmd.py"):
        assert (REPO / path).is_file(), path
    assert not list((REPO / "analyses").glob("fr_*.py")) and not list((REPO / "analyses").glob("hang_*.py"))


def test_the_check_catches_a_violation(tmp_path, monkeypatch):
    fake = tmp_path / "analyses"
    fake.mkdir()
    (fake / "bad.py").write_text("import torch\nfrom ddprof.collectors import profile\n")
    for name in ("ddprof", "collectors", "dashboards"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert sorted(violations()) == ["analyses/bad.py (analyses) imports ddprof.collectors",
                                    "analyses/bad.py (analyses) imports ddprof.collectors.profile",
                                    "analyses/bad.py (analyses) imports torch"]


def test_every_package_is_installed():
    """A wheel holds only the packages pyproject lists; an unlisted subpackage works in a checkout and is
    missing from every real install."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = set()
    for folder, package in LAYERS.items():
        for init in (REPO / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO / folder).parts
            found.add(".".join((package, *rel)))
    assert found == listed


def test_every_design_reference_resolves():
    """Each ``docs/DESIGN.md §N`` the code cites names a section the page has."""
    import re

    page = (REPO / "docs" / "DESIGN.md").read_text()
    sections = set(re.findall(r"^## (\d+)\. ", page, flags=re.M))
    cited: dict[str, set[str]] = {}
    for folder in (*LAYERS, "tests", "benchmarks"):
        for path in (REPO / folder).rglob("*.py"):
            for n in re.findall(r"DESIGN\.md §(\d+)", path.read_text()):
                cited.setdefault(n, set()).add(str(path.relative_to(REPO)))
    assert cited, "the code cites the design page"
    assert {n: files for n, files in cited.items() if n not in sections} == {}
