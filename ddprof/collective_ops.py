"""The vocabulary of collectives, one place for every reader and analysis.

* **op names**: every spelling a trace or a Flight Recorder dump uses (``nccl:all_reduce``,
  ``c10d::allreduce_``, ``_allgather_base``, ``nccl:send 1->2``) normalised to one of :data:`OPS`
  (:func:`normalize_op`, :func:`profiling_op`);
* **markers**: the CPU ops and annotations that stand for a collective (:data:`MARKER_RE`);
* **kernels**: the GPU kernel names that are communication whatever their metadata says
  (:data:`COMM_KERNEL_RE`), and the op a kernel name states (:func:`op_from_kernel`);
* **nccl-tests definitions**: the message size S of a collective (:func:`message_size`) and the
  bus-bandwidth factor (:func:`busbw_factor`).

Kineto ingest, the collective analyses and the hang diagnosis all read these names from here.
"""

from __future__ import annotations

import re
from functools import lru_cache

import polars as pl

#: Normalised collective names (the store's ``coll_op``; ``unknown`` where a trace does not say).
OPS = (
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
    "send", "recv", "sendrecv", "barrier", "gather", "scatter", "unknown",
)

#: Point-to-point ops: matched per (sender, receiver) pair, not per group order.
P2P = ("send", "recv")

_ALIASES = {
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "allreduce_coalesced": "all_reduce",
    "allgather": "all_gather", "all_gather": "all_gather", "_allgather_base": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "allgather_coalesced": "all_gather",
    "all_gather_into_tensor": "all_gather", "all_gather_base": "all_gather",
    "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "alltoall": "all_to_all", "all_to_all": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_allv": "all_to_all", "alltoallv": "all_to_all", "all_to_all_single": "all_to_all",
    "broadcast": "broadcast", "reduce": "reduce", "send": "send", "recv": "recv", "recv_": "recv",
    "recv_any_source": "recv", "barrier": "barrier", "gather": "gather", "scatter": "scatter",
    "sendrecv": "sendrecv", "multimem_all_reduce": "all_reduce", "one_shot_all_reduce": "all_reduce",
    "two_shot_all_reduce": "all_reduce",
}

#: Namespaces of the ops that stand for a collective.
_NAMESPACES = r"nccl:|gloo:|c10d::|c10d_functional::|_c10d_functional::|symm_mem::"

#: CPU ops and annotations that mark a collective (their launches are communication). As a string for
#: Polars' ``str.contains``, compiled for Python's ``re``.
MARKER_PATTERN = rf"^(record_param_comms$|{_NAMESPACES}|vllm::all_reduce)"
MARKER_RE = re.compile(MARKER_PATTERN)
_STRIP_RE = re.compile(rf"^({_NAMESPACES}|vllm::)")

#: GPU kernel names that are communication whatever their metadata says.
COMM_KERNEL_RE = re.compile(r"(?i)^(void )?(nccl|rccl)|ncclKernel|ncclDevKernel|multimem_all_reduce|"
                            r"one_shot_all_reduce|two_shot_all_reduce|cross_device_reduce")

# Kernel names in ncclKernel_<Op>_... / ncclDevKernel_<Op>_...
_KERNEL_OP_RE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
_KERNEL_OPS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
               "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "sendrecv", "Send": "send",
               "Recv": "recv", "AllToAll": "all_to_all"}


@lru_cache(maxsize=4096)
def normalize_op(name: str | None) -> str | None:
    """``'nccl:all_reduce'``, ``'allreduce'``, ``'c10d::allreduce_'`` -> ``'all_reduce'``; unknown -> None."""
    if not name:
        return None
    base = _STRIP_RE.sub("", name.strip()).lower()
    if base in _ALIASES:
        return _ALIASES[base]
    return _ALIASES.get(base.rstrip("_"))


def profiling_op(raw: str) -> str:
    """The op of a Flight Recorder ``profiling_name``: ``nccl:all_to_all`` -> all_to_all;
    ``nccl:send 1->2`` -> send; ``nccl:_all_gather_base`` -> all_gather; a name no alias covers keeps
    its base: ``nccl:coalesced`` -> coalesced; an empty name -> unknown."""
    base = raw.split()[0] if raw.strip() else raw
    short = base.split(":", 1)[-1].lstrip("_")
    op = normalize_op(base) or normalize_op(short) or normalize_op(short.removesuffix("_coalesced"))
    return op or short or "unknown"


def op_from_kernel(name: str) -> str | None:
    """The op a communication kernel's name states: ``ncclKernel_AllReduce_RING_LL_Sum_float`` ->
    all_reduce; ``ncclDevKernel_Generic`` (RCCL) -> None."""
    m = _KERNEL_OP_RE.search(name)
    if m:
        return _KERNEL_OPS.get(m.group(1))
    if "all_reduce" in name:
        return "all_reduce"
    return None


def message_size(op: pl.Expr, in_bytes: pl.Expr, out_bytes: pl.Expr, group_size: pl.Expr) -> pl.Expr:
    """nccl-tests' message size S of each collective, from its input and output bytes and group size:
    all-reduce/broadcast/reduce = count x element size; all-gather = output bytes; reduce-scatter = input
    bytes; all-to-all = total bytes sent; send/recv = bytes moved; barrier none. Example: an all-gather
    of 1,024 floats per rank over 8 ranks has in_bytes 4,096 and S = 32,768."""
    i, o = pl.when(in_bytes > 0).then(in_bytes), pl.when(out_bytes > 0).then(out_bytes)
    g = pl.when(group_size > 0).then(group_size.cast(pl.Int64))
    return (pl.when(op == "all_gather").then(pl.coalesce(o, i * g))
            .when(op == "reduce_scatter").then(pl.coalesce(i, o * g))
            .when(op == "barrier").then(pl.lit(None, dtype=pl.Int64))
            .otherwise(pl.coalesce(i, o)))


def busbw_factor(op: pl.Expr, n: pl.Expr) -> pl.Expr:
    """nccl-tests' busbw / algbw for n ranks: all-reduce 2(n−1)/n; all-gather, reduce-scatter,
    all-to-all, gather, scatter (n−1)/n; broadcast, reduce, sendrecv 1; null for other ops.
    Example: all-reduce over 8 ranks -> 1.75."""
    n = n.cast(pl.Float64)
    return (
        pl.when(op == "all_reduce").then(2.0 * (n - 1) / n)
        .when(op.is_in(["all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"])).then((n - 1) / n)
        .when(op.is_in(["broadcast", "reduce", "sendrecv"])).then(pl.lit(1.0))
    )
