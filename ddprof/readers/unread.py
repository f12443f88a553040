"""Formats ddprof recognises but does not read: each is refused naming what the file is.

Recognition looks at the name and the first bytes only: an Nsight Systems report, a Perfetto protobuf trace, a
PyTorch execution trace (JSON, but a graph of ops with no times: not a profiler trace). When a reader for one of them arrives
(:mod:`ddprof.readers.registry`), its entry here goes. An Nsight Systems report (``.nsys-rep``, ``.qdrep``) is
refused here with the command that exports it to the SQLite file the Nsight Systems reader takes
(:mod:`ddprof.readers.nsys`, which also refuses any other SQLite database, naming its tables).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

PERFETTO_SUFFIXES = (".pftrace", ".perfetto-trace", ".perfetto")
#: A PyTorch execution trace (``ExecutionTraceObserver``, Chakra): a JSON object that opens with its
#: ``"schema"`` version and holds ``"nodes"``, the ops and their tensors, no times to measure.
_EXECUTION_TRACE = re.compile(rb'(?:\xef\xbb\xbf)?\s*\{\s*"schema"\s*:\s*"')
NSYS_REPORT_SUFFIXES = (".nsys-rep", ".qdrep")


@dataclass(frozen=True)
class Refusal:
    """What a file recognised but not read is, and why it is not read (both end up in the message)."""

    what: str
    why: str = "not supported yet"

    def message(self) -> str:
        return f"{self.what}: {self.why}"


def refusal(path: Path, head: bytes) -> Refusal | None:
    """What ``path`` is when it is a format ddprof knows but does not read (module doc), else None."""
    name = path.name.lower()
    if name.endswith(NSYS_REPORT_SUFFIXES):
        return Refusal("an Nsight Systems report", "not read directly: export it with `nsys export --type sqlite "
                                                   f"{path.name}` and give ddprof the .sqlite file it writes")
    if name.endswith(PERFETTO_SUFFIXES) or _perfetto_packet(head):
        return Refusal("a Perfetto protobuf trace")
    if execution_trace(head):
        return Refusal("a PyTorch execution trace (ExecutionTraceObserver's graph of ops and tensors: 'schema', "
                       "'nodes')", "it records no times: give ddprof the profiler trace taken with it (a Kineto "
                       "trace, *.pt.trace.json)")
    return None


def execution_trace(head: bytes) -> bool:
    """Whether the first bytes are a PyTorch execution trace's (module doc): ``{"schema": "1.0.1", ...,
    "nodes": [`` with no ``traceEvents`` before its nodes."""
    if _EXECUTION_TRACE.match(head) is None or b'"nodes"' not in head:
        return False
    events = head.find(b'"traceEvents"')
    return events < 0 or events > head.find(b'"nodes"')


def _perfetto_packet(head: bytes) -> bool:
    """Whether the bytes start like a Perfetto trace: a ``TracePacket`` (field 1, length-delimited: byte
    0x0a, then a varint length) that is binary, not text (a text file may start with a newline, 0x0a)."""
    if len(head) < 4 or head[0] != 0x0A:
        return False
    length, shift, i = 0, 0, 1
    while i < min(len(head), 6):
        b = head[i]
        length |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            break
        shift += 7
    else:
        return False
    body = head[i:i + min(length, 64)]
    return length > 0 and any(c < 0x09 or 0x0D < c < 0x20 for c in body)
