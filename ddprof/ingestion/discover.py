"""Find the trace files in what the user pointed at: files, directories, trees.

Which names are traces is the readers' say (:func:`ddprof.readers.registry.claimed`): a new format's
files are found the day its reader is registered."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ddprof.errors import UsageError
from ddprof.readers import registry
from ddprof.store.capture_status import explain_no_trace


def discover(sources: Sequence[str | Path]) -> list[Path]:
    """Trace files under ``sources``, sorted, without duplicates.

    A file named explicitly is always taken (recognition then says what it is). In a directory tree, the
    files an event reader claims by name are taken (Kineto: ``*.json``/``*.json.gz``, except
    ``manifest.json`` and ``*.meta.json``; Nsight Systems: ``*.sqlite``), except under a hidden folder (caches) or a run dir's
    ``events/``. When nothing is found in a capture's run dir, the error is what its processes' status
    files say (:func:`ddprof.store.capture_status.explain_no_trace`), not a bare "no trace files"; elsewhere, it
    names the files of a format ddprof knows but reads not (an Nsight Systems report, a Perfetto trace...).
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
                if f.is_file() and registry.claimed(f.name):
                    found[f] = None
        else:
            raise UsageError(f"{src}: no such file or directory")
    if not found:
        for src in sources:  # a capture whose processes wrote no trace: say what they saw instead
            explanation = explain_no_trace(Path(src)) if Path(src).is_dir() else None
            if explanation:
                raise UsageError(explanation)
        seen = "".join(f"; {f}: {why}" for f in _unread(sources) for why in (registry.unread(f),) if why)
        raise UsageError(f"no trace files ({registry.claimed_names()}) found in {', '.join(map(str, sources))}{seen}")
    return sorted(found)


#: Files of a directory with no trace that are looked at, to name the formats ddprof knows but reads not.
LOOK_AT = 16


def _unread(sources: Sequence[str | Path]) -> list[Path]:
    """The first :data:`LOOK_AT` visible files of the directories among ``sources`` (none was a trace)."""
    files: list[Path] = []
    for src in sources:
        if Path(src).is_dir():
            files += [f for f in sorted(Path(src).iterdir()) if f.is_file() and not f.name.startswith(".")]
    return files[:LOOK_AT]
