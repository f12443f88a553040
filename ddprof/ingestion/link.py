"""Link GPU rows to the collective that launched them.

A communication kernel's metadata lives on CPU "markers" (``record_param_comms``, ``nccl:<op>``,
``c10d::<op>``, ``symm_mem::<op>``...). A kernel finds its marker two ways:

1. by ``External id`` (new traces: the kernel carries the id of the CPU op that launched it);
2. by launch containment: the runtime call with the kernel's ``correlation`` happened inside the
   marker's interval on the same thread (old traces, where External id is not a CPU op id).

Markers nest (``c10d::alltoall_base_`` > ``record_param_comms`` > ``nccl:all_to_all``); the innermost
one names the op and outer ones fill in what it lacks.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ddprof.ingestion import comms


@dataclass(frozen=True)
class Meta:
    coll_op: str | None = None
    pg: str | None = None
    group_size: int | None = None
    in_bytes: int | None = None
    out_bytes: int | None = None
    dtype: str | None = None
    seq: int | None = None

    def fill_from(self, outer: Meta) -> Meta:
        """This (inner) metadata, with fields it lacks taken from an enclosing marker."""
        changes = {k: getattr(outer, k) for k in self.__dataclass_fields__
                   if getattr(self, k) is None and getattr(outer, k) is not None}
        return replace(self, **changes) if changes else self


def row_meta(cols: dict[str, Any], i: int, name: str) -> Meta:
    """Metadata carried by row ``i`` itself (new-format fields, else old-format Input Dims)."""
    op = comms.normalize_op(cols["coll_name"][i]) or comms.normalize_op(name)
    dtype = cols["dtype"][i]
    size = comms.dtype_size(dtype)
    in_n, out_n = cols["in_nelems"][i], cols["out_nelems"][i]
    in_b = in_n * size if size and isinstance(in_n, int) and in_n > 0 else None
    out_b = out_n * size if size and isinstance(out_n, int) and out_n > 0 else None
    if in_b is None and out_b is None:
        in_b, old_dtype = comms.input_bytes(cols["input_dims"][i], cols["input_type"][i])
        dtype = dtype or old_dtype
    gs = cols["group_size"][i]
    return Meta(coll_op=op, pg=cols["pg"][i], group_size=gs if isinstance(gs, int) and gs > 0 else None,
                in_bytes=in_b, out_bytes=out_b, dtype=dtype, seq=cols["seq"][i])


def launch_meta(cols: dict[str, Any], markers: dict[int, Meta], runtimes: list[int]) -> dict[int, Meta]:
    """Map runtime row index -> merged metadata of the markers enclosing it on its thread.

    ``markers`` maps each marker row to its own metadata (:func:`row_meta`).
    """
    ts, dur = cols["ts_ns"].tolist(), cols["dur_ns"].tolist()
    tid, pid = cols["tid"], cols["pid"]
    by_thread: dict[tuple[Any, Any], tuple[list[int], list[int]]] = {}
    for i in markers:
        by_thread.setdefault((pid[i], tid[i]), ([], []))[0].append(i)
    for i in runtimes:
        key = (pid[i], tid[i])
        if key in by_thread:
            by_thread[key][1].append(i)
    chains: dict[tuple[int, ...], Meta] = {}
    out: dict[int, Meta] = {}
    for mk, rt in by_thread.values():
        mk.sort(key=lambda i: (ts[i], -dur[i]))
        rt = _inside_any(mk, rt, ts, dur)
        stack: list[int] = []
        j = 0
        for r in rt:
            t = ts[r]
            while j < len(mk) and ts[mk[j]] <= t:
                while stack and ts[stack[-1]] + dur[stack[-1]] < ts[mk[j]]:
                    stack.pop()
                stack.append(mk[j])
                j += 1
            while stack and ts[stack[-1]] + dur[stack[-1]] < t:
                stack.pop()
            if not stack:
                continue
            key = tuple(stack)
            if key not in chains:
                merged = Meta()
                for m in reversed(stack):
                    merged = merged.fill_from(markers[m])
                chains[key] = merged
            out[r] = chains[key]
    return out


def _inside_any(markers: list[int], runtimes: list[int], ts: Any, dur: Any) -> list[int]:
    """The runtime rows (sorted by start) whose start lies inside at least one marker interval."""
    if not runtimes:
        return []
    starts = np.array([ts[i] for i in markers], dtype=np.int64)
    ends = np.maximum.accumulate(np.array([ts[i] + dur[i] for i in markers], dtype=np.int64))
    rt = np.array(runtimes, dtype=np.int64)
    rts = np.array([ts[i] for i in runtimes], dtype=np.int64)
    pos = np.searchsorted(starts, rts, side="right") - 1
    hit = (pos >= 0) & (rts <= ends[np.maximum(pos, 0)])
    kept = rt[hit]
    return kept[np.argsort(rts[hit], kind="stable")].tolist()
