"""Where raw traces are ingested for a command that analyses them: ``SRC/.ddprof-cache`` beside the traces,
unless that place is read-only (no import beyond the standard library: the program asks before it loads)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

CACHE_NAME = ".ddprof-cache"


def writable(path: Path) -> bool:
    """Writable by its owner's mode bits too: root ignores permissions, but a read-only tree stays untouched."""
    try:
        return os.access(path, os.W_OK) and bool(path.stat().st_mode & stat.S_IWUSR)
    except OSError:
        return False


def default_cache(src: Path) -> Path | None:
    """Cache beside the traces (``SRC/.ddprof-cache``), or None when that place is read-only."""
    base = src if src.is_dir() else src.parent
    target = base / CACHE_NAME if src.is_dir() else base / CACHE_NAME / src.name
    existing = target if target.exists() else base / CACHE_NAME if (base / CACHE_NAME).exists() else base
    return target if writable(existing) else None
