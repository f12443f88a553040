"""Collective metadata fields of a Kineto trace: element sizes, input bytes, the peer of a send/recv.

Two generations of Kineto metadata exist:

* new: ``Collective name``, ``In/Out msg nelems``, ``Group size``, ``dtype``, ``Process Group Name``
  (or ``Process Group ID``) on ``record_param_comms`` and copied onto the NCCL kernels;
* old: only ``Input Dims``/``Input type`` on ``record_param_comms`` and on its ``nccl:<op>`` child;
  the op is known from the sibling op's name (``nccl:all_to_all``, ``c10d::allreduce_``) or the kernel name.

Gloo (CPU) runs carry ``gloo:<op>`` annotations with ``Input Dims``/``Input type``.

The op names, marker and kernel patterns and nccl-tests' message size these fields feed are the
vocabulary of :mod:`ddprof.vocabulary.collective_ops`.
"""

from __future__ import annotations

import msgspec

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

_dims_decoder = msgspec.json.Decoder()


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


def _int_list(value: object) -> list[int] | None:
    """``[10, 11]`` or ``"[10, 11]"`` -> [10, 11]; a truncated list (``"[1, 2, ...]"``), a negative or
    non-integer entry -> None."""
    if isinstance(value, str):
        text = value.strip()
        if "..." in text:
            return None
        try:
            value = _dims_decoder.decode(text.encode())
        except msgspec.DecodeError:
            return None
    if not isinstance(value, list):
        return None
    out = []
    for v in value:
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            return None
        out.append(v)
    return out


def _raw_list(raw: bytes | None) -> list[int] | None:
    if not raw:
        return None
    try:
        return _int_list(_dims_decoder.decode(raw))
    except msgspec.DecodeError:
        return None


def _as_bytes(splits: list[int] | None, total: int | None) -> list[int] | None:
    """Split sizes (rows of dim 0 per rank) as bytes, from the tensor's total bytes: each row holds
    ``total / sum(splits)`` bytes. An empty list (even splits), no total, or a total the rows do not
    divide -> None."""
    if not splits or total is None:
        return None
    rows = sum(splits)
    if rows == 0:
        return [0] * len(splits) if total == 0 else None
    if total % rows:
        return None
    return [s * (total // rows) for s in splits]


def _dims_bytes(dims: object, dtype: str | None) -> int | None:
    size = dtype_size(dtype)
    if size is None or not isinstance(dims, list) or not all(isinstance(x, int) for x in dims):
        return None
    n = 1
    for x in dims:
        n *= x
    return n * size


def split_bytes(name: str, in_split: bytes | None, out_split: bytes | None, in_bytes: int | None,
                out_bytes: int | None, dims_raw: bytes | None, types_raw: bytes | None,
                concrete_raw: bytes | None) -> tuple[list[int] | None, list[int] | None]:
    """An all-to-all-v's bytes sent to and received from each rank of its group, in the group's order.

    From ``In split size``/``Out split size`` (``record_param_comms``; rows of dim 0 per rank) and the
    message's input/output bytes; else, on ``c10d::alltoall_base_`` recorded with shapes (gloo traces),
    from its ``Concrete Inputs`` (output splits 4th, input splits 5th) and ``Input Dims`` (output, input).
    Even splits (an empty list) and unknown ones -> None: the message size says the rest.

    >>> split_bytes("record_param_comms", b'"[1, 3]"', b'"[2, 2]"', 16, 16, None, None, None)
    ([4, 12], [8, 8])
    >>> split_bytes("c10d::alltoall_base_", None, None, None, None, b'[[30, 8], [21, 8], []]',
    ...             b'["float", "float", ""]', b'["", "", "", "[10, 20]", "[10, 11]", "False", "-1"]')
    ([320, 352], [320, 640])
    """
    send, recv = _raw_list(in_split), _raw_list(out_split)
    if send is not None or recv is not None:
        return _as_bytes(send, in_bytes), _as_bytes(recv, out_bytes)
    if not concrete_raw or not name.startswith("c10d::alltoall_base") or not dims_raw or not types_raw:
        return None, None
    try:
        values = _dims_decoder.decode(concrete_raw)
        dims = _dims_decoder.decode(dims_raw)
        types = _dims_decoder.decode(types_raw)
    except msgspec.DecodeError:
        return None, None
    if not (isinstance(values, list) and isinstance(dims, list) and isinstance(types, list)) or len(values) < 5 \
            or len(dims) < 2 or len(types) < 2:
        return None, None
    t_out, t_in = (t if isinstance(t, str) else None for t in types[:2])
    return (_as_bytes(_int_list(values[4]), _dims_bytes(dims[1], t_in)),
            _as_bytes(_int_list(values[3]), _dims_bytes(dims[0], t_out)))
