"""Atomic file writes: write to a temporary sibling, fsync, then rename over the target.

A killed process leaves at worst a ``.NAME.tmp-HOST-PID-XXXX`` file that no reader looks at, never a
half-written file under the final name; :func:`remove_stale_tmp` deletes those whose process is gone.
An output that cannot be written (no permission, a read-only mount, a full disk) raises
:class:`~ddprof.errors.OutputError`: one sentence naming the path, and for a full disk the space needed.
"""

from __future__ import annotations

import errno
import os
import re
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ddprof.errors import OutputError

#: A temporary file whose writer cannot be asked (another host, an unknown name) is stale after this long.
STALE_TMP_S = 24 * 3600
_HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
_TMP = re.compile(r"^\..+\.tmp-(?:(?P<host>[A-Za-z0-9._]+)-(?P<pid>\d+)-)?[a-z0-9_]+$")


def _open_tmp(path: Path) -> tuple[Path, int]:
    """A new empty temporary sibling of ``path``, open for writing, with the permissions a plain ``open()``
    gives a new file (``0o666`` less the umask, applied by the kernel; ``mkstemp``'s are a private ``0o600``,
    and reading the umask to widen them costs as much as the rest of a small file's write)."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.tmp-{_HOST}-{os.getpid()}-{os.urandom(4).hex()}")
        try:
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path))  # pragma: no cover


def write_atomic(path: str | Path, writer: Callable[[Path], object], *,
                 needed: Callable[[], int] | None = None, durable: bool = True) -> Path:
    """Call ``writer(tmp_path)`` then rename ``tmp_path`` to ``path``.

    Raises :class:`~ddprof.errors.OutputError` when the file cannot be written, nothing left behind;
    ``needed`` says how many bytes the output takes (asked only when the disk is full).

    ``durable=False`` skips the fsync (half the cost of a small file's write): for a cache that its reader
    checks and rebuilds when it is not whole, where a crash of the machine may leave a file that is
    empty or cut short (never a killed process: the rename still comes after the last write).

    The file gets the permissions a plain ``open()`` would give it (``0o666`` less the umask), not
    ``mkstemp``'s private ``0o600``: run dirs are often shared with teammates. A writer that replaces the
    file rather than writing into it must keep that mode. Bytes already in memory: :func:`write_bytes_atomic`.
    """
    def fill(tmp: Path, fd: int) -> None:
        os.close(fd)
        writer(tmp)
        if durable:
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())

    return _replace(Path(path), fill, needed)


def write_bytes_atomic(path: str | Path, data: bytes, *, durable: bool = True) -> Path:
    """:func:`write_atomic` of bytes already in memory, written and synced through the one descriptor that
    created the temporary file (a writer given a path opens it again, and once more to sync it)."""
    def fill(tmp: Path, fd: int) -> None:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)

    return _replace(Path(path), fill, lambda: len(data))


def _replace(path: Path, fill: Callable[[Path, int], None], needed: Callable[[], int] | None) -> Path:
    """``fill(tmp_path, fd)`` (``fd``: the temporary file, open for writing; ``fill`` closes it), then
    ``tmp_path`` renamed to ``path``; any failure removes the temporary file, one of the system's raised as
    :func:`output_error`."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp_path, fd = _open_tmp(path)
    except OSError as exc:
        raise output_error(path, exc, needed) from None
    try:
        fill(tmp_path, fd)
        os.replace(tmp_path, path)
    except BaseException as exc:
        tmp_path.unlink(missing_ok=True)
        os_exc = _as_os_error(exc)
        if os_exc is None:
            raise
        raise output_error(path, os_exc, needed) from None
    return path


def _as_os_error(exc: BaseException) -> OSError | None:
    """The operating system's error behind ``exc``: itself, or the one a library wrapped in its own
    exception (Polars' Parquet writer says ``... (os error 28)``)."""
    if isinstance(exc, OSError):
        return exc
    m = re.search(r"\(os error (\d+)\)", str(exc)) if isinstance(exc, Exception) else None
    return OSError(int(m[1]), os.strerror(int(m[1]))) if m else None


def output_error(path: Path, exc: OSError, needed: Callable[[], int] | None = None) -> OutputError:
    """The one-sentence error for an output that could not be written (``needed``: its size in bytes,
    asked only for a full disk)."""
    code = exc.errno
    if code in (errno.ENOSPC, errno.EDQUOT):
        need = ""
        if needed is not None:
            try:
                need = f"; it needs {_human(needed())}"
            except Exception:  # the size is a courtesy: the error stands without it
                need = ""
        return OutputError(f"cannot write {path}: no space left on the device{need}, "
                           f"{_human(_free(path.parent))} free there", path=path)
    if code in (errno.EACCES, errno.EPERM):
        why = "permission denied"
    elif code == errno.EROFS:
        why = "read-only file system"
    elif code in (errno.ENOTDIR, errno.EEXIST):
        why = "a part of the path is a file, not a directory"
    else:
        why = exc.strerror or str(exc)
    return OutputError(f"cannot write {path}: {why}", path=path)


def _free(directory: Path) -> int:
    for d in (directory, *directory.parents):
        try:
            st = os.statvfs(d)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return 0


def _human(n: int) -> str:
    """``1536`` -> ``'1.5 KiB'``; ``12`` -> ``'12 bytes'``."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{n} bytes" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"  # pragma: no cover - the loop returns


def remove_stale_tmp(directory: Path, *, now: float | None = None) -> list[Path]:
    """Delete the temporary files of writers that are gone, in ``directory`` and its subdirectories;
    return them. A file of this host whose process is dead is stale at once; one of another host (or
    named otherwise) once it is :data:`STALE_TMP_S` old. A live writer's file is never touched."""
    now = time.time() if now is None else now
    removed = []
    for p in directory.rglob(".*.tmp-*"):
        m = _TMP.match(p.name)
        if m is None or not p.is_file():
            continue
        if m["host"] == _HOST and m["pid"] is not None:
            stale = not _alive(int(m["pid"]))
        else:
            try:
                stale = now - p.stat().st_mtime > STALE_TMP_S
            except OSError:
                continue
        if stale:
            try:
                p.unlink()
            except OSError:
                continue
            removed.append(p)
    return removed


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    try:  # a zombie (killed, not yet reaped: common in containers whose init reaps nothing) writes nothing
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def write_text_atomic(path: str | Path, text: str) -> Path:
    return write_bytes_atomic(path, text.encode("utf-8"))


def json_text(obj: Any) -> str:
    """``obj`` as indented JSON text, keys in their order, anything else JSON lacks as its ``str``.

    Encoded by msgspec, in C: the standard library's encoder runs in pure Python once asked to indent
    (a 1 MB report: 60 ms against 5 ms). Same text as ``json.dumps(obj, indent=2, default=str)``, except
    that NaN and infinities, which JSON lacks, become null.
    """
    return msgspec.json.format(msgspec.json.encode(obj, enc_hook=str), indent=2).decode()


def write_json_atomic(path: str | Path, obj: Any) -> Path:
    return write_text_atomic(path, json_text(obj) + "\n")
