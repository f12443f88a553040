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
