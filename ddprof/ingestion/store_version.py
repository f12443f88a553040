"""Which ingest code wrote a store: a cache written by other code is never reused.

A store's contents depend on the code that parses, classifies and links the events: ``ddprof.ingestion``
and every ddprof module it imports, directly or not (the schema, the collective vocabulary, key joins,
rank resolution, ...). :func:`store_modules` finds them by reading the imports in the source, so a module
that starts to shape the store is covered the day it is imported, with no list to keep. A package's
``__init__.py`` above such a module is covered too (it runs when the module is imported), but only its
module-level imports are followed: the names a package's public face imports on first use (``ddprof``'s
``analyze`` imports the analyses) are not run by ingest, and following them would make the set depend on
the install layout (in a checkout the analyses sit beside the ``ddprof`` folder; installed, inside it).
So the set, and the fingerprint, are the same in a checkout and in an installed wheel. The manifest
records :data:`INGEST_VERSION` and a hash of those modules' source (:func:`store_fingerprint`); ingest
reuses a cached rank only where both match.
"""

from __future__ import annotations

import hashlib
import os
import re
from functools import cache, lru_cache
from pathlib import Path

#: Raised by hand when what ingest writes changes without a change to ddprof's code (a dependency's
#: behaviour, a decision taken in data): stores of another version are rebuilt.
INGEST_VERSION = 2

_PACKAGE = "ddprof"
_ROOT = Path(__file__).resolve().parents[1]  # the ddprof package
_ROOT_DIR = str(_ROOT)


@cache
def _module_file(name: str) -> str | None:
    """The source file of a module of the ddprof package (``ddprof.x.y`` -> ddprof/x/y.py or
    ddprof/x/y/__init__.py, or ddprof/x/y.c for a compiled one: its C source is installed beside it), or None
    for a name that is not one (an attribute, another package).
    Paths as strings: the walk below asks for a few hundred names, and :mod:`pathlib` made it 10 ms."""
    parts = name.split(".")
    if parts[0] != _PACKAGE:
        return None
    base = os.path.join(_ROOT_DIR, *parts[1:])
    for candidate in (base + ".py", os.path.join(base, "__init__.py"), base + ".c"):
        if os.path.isfile(candidate):
            return candidate
    return None


#: ``import ddprof.x`` / ``from ddprof.x import a, b`` (also parenthesised over several lines), at any
#: indentation: lazy imports inside functions count too.
_IMPORT = re.compile(rb"^[ \t]*(?:import[ \t]+(ddprof[\w.]*)|from[ \t]+(ddprof[\w.]*)[ \t]+import[ \t]+"
                     rb"(\([^)]*\)|[^\n]*))", re.MULTILINE)


def _imports(source: bytes, module_level: bool = False) -> set[str]:
    """The ddprof modules a source file imports, with each ``from M import n`` as ``M`` and ``M.n``
    (n may be a submodule); with ``module_level``, only the imports written at the start of a line (not
    those inside a function or an ``if TYPE_CHECKING:`` block). Read with a regular expression, not
    parsed: a tenth of the time."""
    found: set[str] = set()
    for match in _IMPORT.finditer(source):
        if module_level and match.group(0)[:1] in (b" ", b"\t"):
            continue
        plain, module, names = match.groups()
        if plain:
            found.add(plain.decode())
            continue
        found.add(module.decode())
        for name in names.strip(b"()").replace(b"\n", b" ").split(b","):
            word = name.split(b"#")[0].split()
            if word:
                found.add(f"{module.decode()}.{word[0].decode()}")
    return found


def _source(path: str | Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


@lru_cache(maxsize=1)
def store_modules() -> tuple[Path, ...]:
    """The source files of ``ddprof.ingestion`` and of every ddprof module they import, transitively;
    sorted. A package's ``__init__.py`` is included where one of its modules is, its module-level
    imports followed (module doc)."""
    ingestion = os.path.join(_ROOT_DIR, "ingestion")
    todo = sorted(os.path.join(ingestion, n) for n in os.listdir(ingestion) if n.endswith(".py"))
    seen: set[str] = set()
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        folder, name = os.path.split(path)
        ancestor = name == "__init__.py" and folder != ingestion
        found = [_module_file(m) for m in _imports(_source(path), module_level=ancestor)]
        todo.extend(f for f in [*found, *_packages_above(folder)] if f is not None and f not in seen)
    return tuple(sorted(map(Path, seen)))


@cache
def _packages_above(folder: str) -> tuple[str, ...]:
    """The ``__init__.py`` of ``folder`` and of each folder above it up to the ddprof package's, those that exist."""
    found = []
    while True:
        init = os.path.join(folder, "__init__.py")
        if os.path.isfile(init):
            found.append(init)
        if len(folder) <= len(_ROOT_DIR):  # the package's own folder (or, for a path outside it, above)
            return tuple(found)
        folder = os.path.dirname(folder)


@lru_cache(maxsize=1)
def store_fingerprint() -> str:
    """:data:`INGEST_VERSION` and a hash of every module of :func:`store_modules`, e.g. ``2-1f0c93a7d4e2b865``."""
    h = hashlib.sha1()
    for path in store_modules():
        h.update(str(path.relative_to(_ROOT)).encode() + b"\0" + _source(path) + b"\0")
    return f"{INGEST_VERSION}-{h.hexdigest()[:16]}"
