"""Find the trace files in what the user pointed at: files, directories, trees."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ddprof.capture_status import explain_no_trace
from ddprof.errors import UsageError

TRACE_SUFFIXES = (".json", ".json.gz")
_SKIP_NAMES = {"manifest.json"}


def is_trace_name(name: str) -> bool:
    low = name.lower()
    return low.endswith(TRACE_SUFFIXES) and name not in _SKIP_NAMES and not low.endswith(".meta.json")


def discover(sources: Sequence[str | Path]) -> list[Path]:
    """Trace files under ``sources``, sorted, without duplicates.

    A file named explicitly is always taken. In a directory tree, ``*.json``/``*.json.gz`` files are taken,
    except ``manifest.json``, ``*.meta.json`` and anything under a hidden folder (caches) or a run dir's
    ``events/``. When nothing is found in a capture's run dir, the error is what its processes' status
    files say (:func:`ddprof.capture_status.explain_no_trace`), not a bare "no trace files".
    """
    found: dict[Path, None] = {}
    for src in sources:
        p = Path(src)
        if p.is_file():
            found[p] = None
        elif p.is_dir():
            for f in sorted(p.rglob("*")):
                rel = f.relative_to(p).parts
                if any(part.startswith(".") for part in rel[:-1]) or "events" in rel[:-1]:
                    continue
                if f.is_file() and is_trace_name(f.name):
                    found[f] = None
        else:
            raise UsageError(f"{src}: no such file or directory")
    if not found:
        for src in sources:  # a capture whose processes wrote no trace: say what they saw instead
            explanation = explain_no_trace(Path(src)) if Path(src).is_dir() else None
            if explanation:
                raise UsageError(explanation)
        raise UsageError(f"no trace files (*.json, *.json.gz) found in {', '.join(map(str, sources))}")
    return sorted(found)
