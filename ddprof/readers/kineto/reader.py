"""The PyTorch profiler (Kineto) trace reader: JSON or gzip JSON, any generation (:mod:`.decode`, :mod:`.build`).

What makes a Chrome-format trace a PyTorch profiler trace (:func:`from_pytorch`), any one of:

* a top-level key only the PyTorch profiler writes: ``schemaVersion``, ``distributedInfo``,
  ``deviceProperties``, ``baseTimeNanoseconds`` (``computeProperties`` in PyTorch 1.8);
* an event of a category the PyTorch profiler writes (:data:`PYTORCH_CATS`), in any generation's spelling
  (``Operator``, ``Kernel``, ``Runtime`` of PyTorch 1.8 are ``cpu_op``, ``kernel``, ``cuda_runtime``);
* an event named ``ProfilerStep#N``.

A Chrome trace with none of them (a merged framework timeline, an accelerator vendor's trace) holds
nothing ddprof can classify: it is refused by name rather than analysed into an empty report. A document
with no event at all is left to the ingest pipeline's "no complete events" refusal. Two more shapes are
refused rather than analysed into a report that says nothing, or says it of the wrong thing
(:func:`unanalysable`):

* a trace with no work in it: its events are all annotations (``user_annotation``, ``ProfilerStep#N``,
  ``gpu_user_annotation``), Python frames or categories ddprof does not read, with no CPU operator, GPU
  kernel, copy or runtime call (:data:`WORK_CATS`) and no collective's annotation (``gloo:send``: gloo's
  communication, :data:`~ddprof.vocabulary.collective_ops.MARKER_PATTERN`);
* a Chrome trace without any PyTorch profiler key and without CPU operators whose GPU activity comes from
  several processes (``pid``): several ranks merged into one file (a merged framework timeline), which
  ddprof would read as one rank with several devices. It reads one rank per Kineto file: the refusal says
  to give one file per rank.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from ddprof.errors import BadInputError
from ddprof.readers.base import Identity, Opened
from ddprof.readers.kineto.build import build_events
from ddprof.readers.kineto.categories import CAT_KIND, GPU_CATS
from ddprof.readers.kineto.decode import Decoded, decode
from ddprof.readers.kineto.names import is_trace_name
from ddprof.readers.unread import execution_trace
from ddprof.vocabulary.collective_ops import MARKER_PATTERN, CommRule

#: Top-level keys only the PyTorch profiler writes.
PYTORCH_KEYS = frozenset({"schemaVersion", "distributedInfo", "deviceProperties", "baseTimeNanoseconds",
                          "computeProperties"})
#: Event categories the PyTorch profiler writes (modern spelling: :func:`.categories.canonical` maps
#: the older ones). Not ``Trace`` nor ``memory``: other tools write those words too.
PYTORCH_CATS = frozenset({*CAT_KIND, "python_function", "overhead", "ac2g", "fwdbwd", "cpu_instant_event",
                          "gpu_memory"})
STEP_NAME = "ProfilerStep#"
NOT_PYTORCH = "a Chrome trace without PyTorch profiler events"
#: Categories of the work ddprof analyses: operators, GPU activity, runtime calls (not annotations).
WORK_CATS = frozenset(c for c, kind in CAT_KIND.items() if kind != "annotation")
_JSON_START = re.compile(rb"(?:\xef\xbb\xbf)?[ \t\r\n]*[\[{]")


def from_pytorch(dec: Decoded) -> bool:
    """Whether a decoded trace was written by the PyTorch profiler (module doc)."""
    if dec.header_keys & PYTORCH_KEYS or dec.categories & PYTORCH_CATS:
        return True
    return bool(dec.frame.get_column("name").str.starts_with(STEP_NAME).any())


class KinetoReader:
    """PyTorch profiler traces (:mod:`ddprof.readers.base`'s :class:`~ddprof.readers.base.EventReader`)."""

    name = "kineto"
    describes = "a PyTorch profiler (Kineto) trace"
    names = "*.json, *.json.gz"

    def claims_name(self, name: str) -> bool:
        return is_trace_name(name)

    def recognise(self, name: str, head: bytes) -> bool:
        """A JSON document (an object or a bare list of events): the Chrome trace format's two shapes; not a
        PyTorch execution trace (:func:`ddprof.readers.unread.execution_trace`), which is refused naming it."""
        return _JSON_START.match(head) is not None and not execution_trace(head)

    def open(self, path: Path) -> Opened:
        dec = decode(path)
        if dec.frame.height and not from_pytorch(dec):
            raise BadInputError(f"{NOT_PYTORCH} (no event of a PyTorch profiler category such as cpu_op, "
                                f"kernel or cuda_runtime, no {STEP_NAME}N step, no distributedInfo or other "
                                "PyTorch profiler key): not a format ddprof reads", path=path)
        why = unanalysable(dec)
        if why is not None:
            raise BadInputError(why, path=path)
        warnings: list[str] = []
        info = dec.distributed_info = checked_info(dec.distributed_info, warnings)
        text = {k: v if isinstance(v, str) else None for k in ("backend", "nccl_version") for v in (info.get(k),)}
        groups = info.get("pg_config")
        identity = Identity(
            rank=info.get("rank"), world_size=info.get("world_size"), backend=text["backend"],
            pg_config=groups if isinstance(groups, list) else [], nccl_version=text["nccl_version"],
            device_names=[str(d["name"]) for d in dec.device_properties if isinstance(d, dict) and d.get("name")],
            base_time_ns=dec.base_time_ns, claims_in="distributedInfo")
        return Opened(identity=identity, sha1=dec.sha1, raw_complete=dec.raw_complete, dropped=dict(dec.dropped),
                      notices=list(dec.notices), warnings=warnings, state=dec)

    def read(self, opened: Sequence[Opened], ranks: Sequence[int],
             rules: tuple[CommRule, ...]) -> tuple[pl.DataFrame, list[list[str]]]:
        return build_events([o.state for o in opened], ranks, rules)


def unanalysable(dec: Decoded) -> str | None:
    """Why a PyTorch-looking trace is refused though it decodes (module doc), or None. Examples: "a trace
    with no work ddprof analyses: its 5 events are user_annotation ...", "a Chrome trace whose GPU activity
    comes from 2 processes (pid 0, 1) ..."."""
    frame = dec.frame
    if frame.height == 0:
        return None
    if not dec.categories & WORK_CATS and not frame.get_column("name").str.contains(MARKER_PATTERN).any():
        cats = frame.get_column("cat").fill_null("<none>").value_counts(sort=True).head(4).rows()
        listed = ", ".join(f"{n} {c}" for c, n in cats)
        return (f"a trace with no work ddprof analyses: its {frame.height} complete events are annotations, "
                f"Python frames or categories it does not read ({listed}); there is no CPU operator (cpu_op), "
                "GPU kernel, copy or runtime call (kernel, gpu_memcpy, cuda_runtime) to measure")
    if dec.header_keys & PYTORCH_KEYS or "cpu_op" in dec.categories:
        return None
    pids = (frame.filter(pl.col("cat").is_in(GPU_CATS)).get_column("pid").drop_nulls().unique().sort().to_list())
    if len(pids) > 1:
        shown = ", ".join(map(str, pids[:8])) + (f" ... ({len(pids)} in all)" if len(pids) > 8 else "")
        return (f"a Chrome trace whose GPU activity comes from {len(pids)} processes (pid {shown}) with no "
                "PyTorch profiler key (distributedInfo, deviceProperties, ...) and no CPU operator: several ranks "
                "merged into one file, which ddprof does not split (it reads one rank per trace file); give it "
                "each rank's own PyTorch profiler trace")
    return None


def checked_info(info: dict[str, Any] | None, warnings: list[str]) -> dict[str, Any]:
    """``distributedInfo`` with the values ingestion reads in the shapes it reads them: a ``pg_config``
    that is not a list is ignored (with a warning naming its type), as are its entries that are not
    objects. The header is the producer's claim; a wrong shape must not break the events."""
    info = dict(info or {})
    groups = info.get("pg_config")
    if groups is not None and not isinstance(groups, list):
        warnings.append(f"distributedInfo.pg_config ignored: a {type(groups).__name__}, not a list")
        info["pg_config"] = []
    elif groups:
        kept = [g for g in groups if isinstance(g, dict)]
        if len(kept) < len(groups):
            warnings.append(f"distributedInfo.pg_config: {len(groups) - len(kept)} entries that are not "
                            "objects ignored")
        info["pg_config"] = kept
    return info
