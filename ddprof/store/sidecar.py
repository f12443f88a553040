"""Per-rank sidecar files written by the collector (``rank-NNNNN.meta.json``) beside the traces.

They carry what a Kineto trace does not: the host and the CPUs the rank was bound to, clock readings for cross-host alignment, versions.
Read when present, so that ``ddprof ingest run_dir/raw -o run_dir`` rebuilds the same manifest the
collector would have. A malformed sidecar is a warning, never a failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

META_FORMAT = "ddprof-collector-meta"


def find_sidecars(sources: list[Path]) -> list[Path]:
    out: list[Path] = []
    for src in sources:
        if src.is_dir():
            out.extend(p for p in sorted(src.rglob("*.meta.json")) if p.is_file())
    return out


def read_sidecars(sources: list[Path]) -> tuple[dict[str, Any], list[str]]:
    """``({"hosts": {rank: host}, "cpus": {rank: "0-3"}, "clocks": {rank: {start, end}}, "versions": {...}},
    warnings)``."""
    hosts: dict[str, str] = {}
    cpus: dict[str, str] = {}
    clocks: dict[str, dict[str, Any]] = {}
    versions: dict[str, Any] = {}
    warnings: list[str] = []
    for path in find_sidecars(sources):
        try:
            meta = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            warnings.append(f"{path}: unreadable collector meta file ({exc}); host and clocks unknown")
            continue
        if not isinstance(meta, dict) or meta.get("format") != META_FORMAT:
            continue
        rank = meta.get("rank")
        if not isinstance(rank, int):
            warnings.append(f"{path}: collector meta file without a rank; ignored")
            continue
        if isinstance(meta.get("host"), str):
            hosts[str(rank)] = meta["host"]
        if isinstance(meta.get("cpus"), str):
            cpus[str(rank)] = meta["cpus"]
        clocks[str(rank)] = {"start": meta.get("start"), "end": meta.get("end")}
        if isinstance(meta.get("versions"), dict):
            for k, v in meta["versions"].items():
                versions.setdefault(k, v)
    return {"hosts": hosts, "cpus": cpus, "clocks": clocks, "versions": versions}, warnings
