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

from typing import Any, NamedTuple

from ddprof.ingestion import comms


class Meta(NamedTuple):
    coll_op: str | None = None
    pg: str | None = None
    group_size: int | None = None
    in_bytes: int | None = None
    out_bytes: int | None = None
    dtype: str | None = None
    seq: int | None = None
    peer: int | None = None

    def fill_from(self, outer: Meta) -> Meta:
        """This (inner) metadata, with fields it lacks taken from an enclosing marker."""
        return Meta._make(a if a is not None else b for a, b in zip(self, outer))


def row_meta(row: dict[str, Any]) -> Meta:
    """Metadata carried by one row itself (new-format fields, else old-format Input Dims)."""
    op = comms.normalize_op(row["coll_name"]) or comms.normalize_op(row["name"])
    dtype = row["dtype"]
    size = comms.dtype_size(dtype)
    in_n, out_n = row["in_nelems"], row["out_nelems"]
    in_b = in_n * size if size and in_n is not None and in_n > 0 else None
    out_b = out_n * size if size and out_n is not None and out_n > 0 else None
    if in_b is None and out_b is None:
        in_b, old_dtype = comms.input_bytes(row["input_dims"], row["input_type"])
        dtype = dtype or old_dtype
    gs = row["group_size"]
    peer = comms.p2p_peer(row["name"], row["concrete_inputs"]) if op in ("send", "recv") else None
    return Meta(coll_op=op, pg=row["pg"], group_size=gs if gs is not None and 0 < gs < 2**31 else None,
                in_bytes=in_b, out_bytes=out_b, dtype=dtype, seq=row["seq"], peer=peer)


def launch_meta(markers: list[dict[str, Any]], own: dict[int, Meta],
                runtimes: list[dict[str, Any]]) -> dict[int, Meta]:
    """Map runtime row index -> merged metadata of the markers enclosing it on its thread.

    ``markers`` and ``runtimes`` are rows with ``_row, ts_ns, dur_ns, pid, tid``; ``own`` maps each
    marker's ``_row`` to its own metadata (:func:`row_meta`).
    """
    by_thread: dict[tuple[Any, Any], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for m in markers:
        by_thread.setdefault((m["pid"], m["tid"]), ([], []))[0].append(m)
    for r in runtimes:
        key = (r["pid"], r["tid"])
        if key in by_thread:
            by_thread[key][1].append(r)
    chains: dict[tuple[int, ...], Meta] = {}
    out: dict[int, Meta] = {}
    for mk, rt in by_thread.values():
        mk.sort(key=lambda m: (m["ts_ns"], -m["dur_ns"]))
        rt.sort(key=lambda r: r["ts_ns"])
        stack: list[dict[str, Any]] = []
        j = 0
        for r in rt:
            t = r["ts_ns"]
            while j < len(mk) and mk[j]["ts_ns"] <= t:
                while stack and stack[-1]["ts_ns"] + stack[-1]["dur_ns"] < mk[j]["ts_ns"]:
                    stack.pop()
                stack.append(mk[j])
                j += 1
            while stack and stack[-1]["ts_ns"] + stack[-1]["dur_ns"] < t:
                stack.pop()
            if not stack:
                continue
            key = tuple(m["_row"] for m in stack)
            if key not in chains:
                merged = Meta()
                for m in reversed(stack):
                    merged = merged.fill_from(own[m["_row"]])
                chains[key] = merged
            out[r["_row"]] = chains[key]
    return out
