"""Decode a trace in a child process while this one loads the program: one large trace's ingest as a
user waits for it.

``ddprof ingest TRACE`` spends about 0.3 s importing (Polars, NumPy, the pipeline) before it reads the
first byte, and inflating and decoding a large trace need none of that. On a machine of two cores or more,
:func:`start`, called first thing, forks a child that loads nothing but msgspec; it decodes the file into
plain columns (:mod:`ddprof.readers.kineto.plain`), writing each run into an anonymous memory file as soon
as it is decoded and noting where it lies on a pipe, while this process imports. When the Kineto reader
comes to that file (:func:`take`) it makes the frame of the runs as they come instead of decoding the file.

From then on this process has a core free for decoding too: it asks the child for runs as their text,
:data:`ASK_AHEAD` at a time, on a second pipe, and decodes each itself (:func:`.decode._consume`) while the
child decodes the next ones; the child hands over the next run it comes to for each ask (checked to be
whole events). A trace the child decodes in about the time the imports take (the 54 MB one, 53 runs) has
few runs left to share: 0-15 came as text, the whole process took 0.99x the time of not asking (median of
31 pairs). Four times that trace (216 MB of JSON): 0.83x (1.24 s against 1.49 s, 9 pairs), peak memory 5 %
higher.

Only an optimisation, never a second reader: the frame is the one decoding the file here makes, row for
row (``tests/unit/test_ingest_stream.py`` runs every case every way), and any doubt sends the file the
ordinary way: another file, a file changed while the child read it (device, inode, size, modification
time, before and after), a child that failed or declined (a file that is not a streamable trace is read,
and refused, by the ordinary path), a run handed over as text that does not decode. The child ends with this process however it ends
(:func:`ddprof.runtime.lifetime.bind_to_parent`), and is killed when nobody takes its work (a cached
trace, another executor, an error).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: Smallest file read ahead: below it the fork and the hand-over cost about what the overlap saves.
MIN_BYTES = 2 << 20
#: ``DDPROF_READ_AHEAD=off`` reads every file in the process that builds its frame.
SWITCH = "DDPROF_READ_AHEAD"
#: Runs this process has asked for as text and not yet decoded: two, so that one is waiting whenever it
#: finishes another (the child sees an ask only between two runs).
ASK_AHEAD = 2
_RECORD = struct.Struct("<QQ")  # where a piece lies in the memory file: offset, length


class Lost(Exception):
    """The child's pieces cannot be used (it failed, or the file changed): the file is read the ordinary way."""


class _Child:
    """A child reading ahead: its pid, the memory file it writes the pieces into, the reading end of the
    pipe it notes each whole piece on, the writing end of the pipe it is asked for runs as text on, the file
    (resolved) and the process that forked it (only that one reads it)."""

    def __init__(self, pid: int, fd: int, notes: int, asks: int, path: str, owner: int) -> None:
        self.pid, self.fd, self.notes, self.asks, self.path, self.owner = pid, fd, notes, asks, path, owner


_child: _Child | None = None


def start(path: Path) -> bool:
    """Fork a child that decodes ``path`` (a Kineto trace of :data:`MIN_BYTES` or more) ahead; whether it
    started. Nothing happens where fork or an anonymous memory file is not available, or on one core."""
    global _child
    if _child is not None or os.environ.get(SWITCH, "").lower() in ("off", "0", "no") or _cores() < 2 \
            or not hasattr(os, "fork") or not hasattr(os, "memfd_create"):
        return False
    try:
        resolved = os.path.realpath(path)
        if os.stat(resolved).st_size < MIN_BYTES:
            return False
        fd = os.memfd_create("ddprof-read-ahead", os.MFD_CLOEXEC)
        notes, note = os.pipe()
        asked, asks = os.pipe()
    except OSError:
        return False
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child; what it leaves is checked by the tests through take()
        os.close(notes)
        os.close(asks)
        _run_child(resolved, fd, note, asked, parent)
    os.close(note)
    os.close(asked)
    os.set_blocking(asks, False)  # an ask that does not fit is not made, never waited for
    _child = _Child(pid, fd, notes, asks, resolved, parent)
    atexit.register(discard)
    return True


def trace_of(sources: list[str]) -> Path | None:
    """The one Kineto trace that ``sources`` (what the user named) hold, or None: one file, or a directory
    tree holding one file named as a trace (hidden folders and a run dir's ``events/`` passed over, as
    discovery does); anything else is left to the ordinary path."""
    from ddprof.readers.kineto.names import is_trace_name

    if len(sources) != 1:
        return None
    top = Path(sources[0])
    if top.is_file():
        return top
    found: list[Path] = []
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d != "events"]
        found += [Path(folder, f) for f in files if is_trace_name(f)]
        if len(found) > 1:
            return None
    return found[0] if found else None


def take(path: Path) -> Iterator[Any] | None:
    """The pieces the child decoded of ``path`` (:data:`ddprof.readers.kineto.plain.Piece`), each as soon as
    it is whole; None when no child read this file. The iterator raises :class:`Lost` where the pieces
    cannot be used (the child failed, or the file changed while it read it)."""
    child = _child
    if child is None or child.owner != os.getpid() or os.path.realpath(path) != child.path:
        return None  # not the file read ahead: it may still come
    return _pieces(child)


def _pieces(child: _Child) -> Iterator[Any]:
    """Each piece once whole; ends (normally) only after the child's last record said the file is unchanged.
    The child is this generator's from its first step (before it, :func:`discard` ends it at exit)."""
    import pickle

    global _child
    _child = None
    ended = False
    try:
        _ask(child, ASK_AHEAD)
        with os.fdopen(child.notes, "rb") as notes:
            while len(record := notes.read(_RECORD.size)) == _RECORD.size:
                at, size = _RECORD.unpack(record)
                kind, piece = pickle.loads(os.pread(child.fd, size, at))
                release(child.fd, at, size)
                if kind == "end":
                    ended = piece == _identity(child.path)
                    break
                yield piece
                if isinstance(piece, bytes):  # decoded here: ask for another
                    _ask(child, 1)
    finally:
        _end(child, kill=not ended)  # not ended: failed, or the reader stopped early (the child may still write)
    if not ended:
        raise Lost(f"{child.path}: not read ahead to its end, unchanged")


def _ask(child: _Child, runs: int) -> None:
    """Ask the child for its next ``runs`` runs as text (a child that has ended is not asked)."""
    with contextlib.suppress(OSError):
        os.write(child.asks, b"?" * runs)


#: ``fallocate``'s mode that frees a range of a file and keeps its size (``FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE``).
_PUNCH_HOLE = 0x02 | 0x01


def release(fd: int, at: int, size: int) -> bool:
    """Free the memory of a piece read (the memory file would otherwise hold every piece of the file until
    the end: a fifth of the JSON's size); whether it was freed (Linux; elsewhere it stays until the end)."""
    global _fallocate
    if _fallocate is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _fallocate = libc.fallocate
            _fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
        except (OSError, AttributeError):  # pragma: no cover - not glibc
            _fallocate = False
    return bool(_fallocate) and _fallocate(fd, _PUNCH_HOLE, at, size) == 0


_fallocate: Any = None


def discard() -> None:
    """End the child and free what it wrote (nobody took it)."""
    global _child
    child, _child = _child, None
    if child is None or child.owner != os.getpid():
        return
    _end(child, kill=True)
    os.close(child.notes)


def _end(child: _Child, kill: bool) -> None:
    """Reap the child (killed first when ``kill``) and close its memory file and the pipe it is asked on."""
    try:
        if kill:
            os.kill(child.pid, signal.SIGKILL)
        os.waitpid(child.pid, 0)
    except OSError:  # pragma: no cover - already reaped
        pass
    os.close(child.fd)
    os.close(child.asks)


def _identity(path: str) -> tuple[int, ...] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def _run_child(path: str, fd: int, note: int, asked: int, parent: int) -> None:  # pragma: no cover - the child
    """Decode, writing each piece into ``fd`` and then its place into ``note``; the last record says the
    file's identity, which must be what it was before. Each byte read from ``asked`` asks for one run as
    text. Exit 0 when all went, 1 otherwise (the parent reads the file itself). Never returns, never prints,
    runs no handler of the parent's (``os._exit``)."""
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it with the parent, silently
        from ddprof.runtime.lifetime import bind_to_parent

        bind_to_parent(parent)
        import pickle

        from ddprof.readers.kineto.plain import Declined, read_plain

        at, owed = 0, 0  # owed: runs asked for as text and not yet sent
        os.set_blocking(asked, False)

        def send(kind: str, obj: Any) -> None:
            nonlocal at, owed
            blob = pickle.dumps((kind, obj), protocol=pickle.HIGHEST_PROTOCOL)
            os.pwrite(fd, blob, at)
            os.write(note, _RECORD.pack(at, len(blob)))
            at += len(blob)
            owed -= isinstance(obj, bytes)

        def wanted() -> bool:
            nonlocal owed
            with contextlib.suppress(BlockingIOError):  # nothing asked since
                owed += len(os.read(asked, 64))
            return owed > 0

        before = _identity(path)
        try:
            read_plain(Path(path), lambda piece: send("piece", piece), wanted)
        except Declined:
            return
        if _identity(path) == before:
            send("end", before)
            code = 0
    except BaseException:  # noqa: BLE001 - whatever happened, the ordinary path reads the file
        code = 1
    finally:
        os._exit(code)
