"""Collective metadata: what a communication event is, how many bytes it moves, which group.

Two generations of Kineto metadata exist:

* new: ``Collective name``, ``In/Out msg nelems``, ``Group size``, ``dtype``, ``Process Group Name``
  (or ``Process Group ID``) on ``record_param_comms`` and copied onto the NCCL kernels;
* old: only ``Input Dims``/``Input type`` on ``record_param_comms`` and on its ``nccl:<op>`` child;
  the op is known from the sibling op's name (``nccl:all_to_all``, ``c10d::allreduce_``) or the kernel name.

Gloo (CPU) runs carry ``gloo:<op>`` annotations with ``Input Dims``/``Input type``.

``bytes`` follows nccl-tests' message size S: all-reduce/broadcast/reduce = count x element size;
all-gather = output bytes; reduce-scatter = input bytes; all-to-all = total bytes sent; send/recv = bytes
moved. Example: an all-gather of 1,024 floats per rank over 8 ranks has in_bytes 4,096 and S = 32,768.
"""

from __future__ import annotations

import re
from functools import lru_cache

import msgspec
import polars as pl

# Element sizes by every spelling seen in traces: new-format ``dtype`` and old-format ``Input type``.
DTYPE_SIZE = {
    "float": 4, "float32": 4, "c10::float": 4, "double": 8, "float64": 8, "c10::half": 2, "half": 2,
    "float16": 2, "c10::bfloat16": 2, "bfloat16": 2, "long": 8, "long int": 8, "int64": 8, "int": 4,
    "int32": 4, "short": 2, "short int": 2, "int16": 2, "char": 1, "signed char": 1, "int8": 1,
    "byte": 1, "unsigned char": 1, "uint8": 1, "bool": 1, "c10::complex<float>": 8, "complexfloat": 8,
    "c10::complex<double>": 16, "complexdouble": 16, "c10::float8_e4m3fn": 1, "float8_e4m3fn": 1,
    "c10::float8_e5m2": 1, "float8_e5m2": 1, "c10::float8_e4m3fnuz": 1, "c10::float8_e5m2fnuz": 1,
    "unsigned short": 2, "uint16": 2, "unsigned int": 4, "uint32": 4, "unsigned long": 8, "uint64": 8,
}

_OP_ALIASES = {
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

#: CPU ops and annotations that mark a collective (their launches are communication).
MARKER_RE = re.compile(
    r"^(record_param_comms$|nccl:|gloo:|c10d::|c10d_functional::|_c10d_functional::|symm_mem::|vllm::all_reduce)"
)
_STRIP_RE = re.compile(r"^(nccl:|gloo:|c10d::|c10d_functional::|_c10d_functional::|symm_mem::|vllm::)")

#: GPU kernel names that are communication whatever their metadata says.
COMM_KERNEL_RE = re.compile(r"(?i)^(void )?(nccl|rccl)|ncclKernel|ncclDevKernel|multimem_all_reduce|"
                            r"one_shot_all_reduce|two_shot_all_reduce|cross_device_reduce")

# Kernel names in ncclKernel_<Op>_... / ncclDevKernel_<Op>_...
_KERNEL_OP_RE = re.compile(r"nccl(?:Dev)?Kernel_([A-Za-z]+)")
_KERNEL_OPS = {"AllReduce": "all_reduce", "AllGather": "all_gather", "ReduceScatter": "reduce_scatter",
               "Broadcast": "broadcast", "Reduce": "reduce", "SendRecv": "sendrecv", "Send": "send",
               "Recv": "recv", "AllToAll": "all_to_all"}

_dims_decoder = msgspec.json.Decoder()


@lru_cache(maxsize=4096)
def normalize_op(name: str | None) -> str | None:
    """``'nccl:all_reduce'``, ``'allreduce'``, ``'c10d::allreduce_'`` -> ``'all_reduce'``; unknown -> None."""
    if not name:
        return None
    base = _STRIP_RE.sub("", name.strip()).lower()
    if base in _OP_ALIASES:
        return _OP_ALIASES[base]
    base = base.rstrip("_")
    return _OP_ALIASES.get(base)


def op_from_kernel(name: str) -> str | None:
    m = _KERNEL_OP_RE.search(name)
    if m:
        return _KERNEL_OPS.get(m.group(1))
    if "all_reduce" in name:
        return "all_reduce"
    return None


def dtype_size(dtype: str | None) -> int | None:
    if not dtype:
        return None
    return DTYPE_SIZE.get(dtype.strip().lower())


def input_bytes(dims_raw: bytes | None, types_raw: bytes | None) -> tuple[int | None, str | None]:
    """Bytes of the tensor inputs listed in old-format ``Input Dims``/``Input type``, and their dtype.

    >>> input_bytes(b'[[394241], []]', b'["float", "Scalar"]')
    (1576964, 'float')
    """
    if dims_raw is None or types_raw is None:
        return None, None
    try:
        dims = _dims_decoder.decode(dims_raw)
        types = _dims_decoder.decode(types_raw)
    except msgspec.DecodeError:
        return None, None
    if not isinstance(dims, list) or not isinstance(types, list):
        return None, None
    total, seen, dtype = 0, False, None
    for d, t in zip(dims, types):
        size = dtype_size(t) if isinstance(t, str) else None
        if size is None or not isinstance(d, list) or not all(isinstance(x, int) for x in d):
            continue
        n = 1
        for x in d:
            n *= x
        total += n * size
        seen = True
        dtype = dtype or t
    return (total if seen and total > 0 else None), dtype


def message_size(op: pl.Expr, in_bytes: pl.Expr, out_bytes: pl.Expr, group_size: pl.Expr) -> pl.Expr:
    """nccl-tests S for each collective (see module docstring), from its own and its group's sizes."""
    i, o = pl.when(in_bytes > 0).then(in_bytes), pl.when(out_bytes > 0).then(out_bytes)
    g = pl.when(group_size > 0).then(group_size.cast(pl.Int64))
    return (pl.when(op == "all_gather").then(pl.coalesce(o, i * g))
            .when(op == "reduce_scatter").then(pl.coalesce(i, o * g))
            .when(op == "barrier").then(pl.lit(None, dtype=pl.Int64))
            .otherwise(pl.coalesce(i, o)))


def p2p_peer(name: str, concrete_raw: bytes | None) -> int | None:
    """Peer of a ``c10d::send``/``c10d::recv_`` op: its third concrete input (``dstRank``/``srcRank``),
    a rank within the op's process group.

    >>> p2p_peer("c10d::send", b'["", "", "2", "0"]')
    2
    """
    if not concrete_raw or not name.startswith("c10d::"):
        return None
    try:
        values = _dims_decoder.decode(concrete_raw)
    except msgspec.DecodeError:
        return None
    if not isinstance(values, list) or len(values) < 3:
        return None
    v = values[2]
    if isinstance(v, int) and not isinstance(v, bool):
        return v if 0 <= v < 2**31 else None
    if isinstance(v, str) and v.isdigit() and int(v) < 2**31:
        return int(v)
    return None
