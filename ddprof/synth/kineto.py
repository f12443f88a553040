"""A rank's timeline as the Kineto JSON trace PyTorch 2.x writes with CUDA and NCCL.

Per compute kernel: an ``aten::*`` CPU op on the main thread, inside it the ``cudaLaunchKernel`` runtime
call, and the kernel on stream 7; the three share an ``External id``, launch and kernel a
``correlation``. Per collective: ``c10d::allreduce_`` / ``c10d::send`` / ``c10d::recv_`` (with its peer in
``Concrete Inputs``) around ``record_param_comms`` (collective name, message sizes, dtype, process group
name, description and ranks; for send/recv ``Src Rank`` and ``Dst Rank``), around the launch; the NCCL
kernel carries the same metadata.
``ProfilerStep#N`` spans each step on the main thread; ``distributedInfo`` lists the process groups.
Timestamps are µs with three decimals, on the rank's host clock (true time + the host's offset).

:func:`to_kineto` writes any generated event table (:mod:`.scenarios`) as Kineto traces, whole µs. Both
writers spell the arguments through :data:`ARG` (the names the reader decodes) and
:func:`collective_args`, and write files through :func:`write_json_trace`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import msgspec
import polars as pl

try:
    from isal import igzip
except ImportError:  # pragma: no cover - isal is a dependency; the standard library writes the same format
    import gzip as igzip  # type: ignore[no-redef]

from ddprof.readers.kineto.structs import Args
from ddprof.store.atomic import write_atomic
from ddprof.synth.schedule import COMPUTE_STREAM, Comm, Group, Timeline, block_kernels, groups
from ddprof.synth.spec import Spec
from ddprof.vocabulary.units import NS_PER_US

PID = 4242
GPU_PID = 0
NCCL_VERSION = "2.21.5"
#: First correlation id (HTA stores kernel-launch links in the correlation column's type: small ids overflow it).
CORRELATION_BASE = 1_000_000
COMPUTE = {"fwd": [("aten::mm", "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1"),
                   ("aten::add", "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>>"),
                   ("aten::native_layer_norm", "void at::native::vectorized_layer_norm_kernel<float, float>"),
                   ("aten::_softmax", "void at::native::cunn_SoftMaxForward<4, float, float, float>")],
           "bwd": [("aten::mm", "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1"),
                   ("aten::mul", "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>"),
                   ("aten::native_layer_norm_backward", "void at::native::layer_norm_grad_input_kernel<float, float>"),
                   ("aten::sum", "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>")]}
C10D = {"allreduce": "c10d::allreduce_", "send": "c10d::send", "recv": "c10d::recv_"}
NCCL_KERNEL = {"allreduce": "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
               "send": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)",
               "recv": "ncclDevKernel_SendRecv(ncclDevComm*, unsigned long, ncclWork*)"}
#: Kineto's spelling of each argument ddprof reads, by the reader's field name (``ARG["in_nelems"]`` is
#: ``"In msg nelems"``): the reader's struct is the one definition.
ARG: dict[str, str] = {f.name: f.encode_name for f in msgspec.structs.fields(Args)}
_EXT, _CORR, _STREAM = ARG["external_id"], ARG["correlation"], ARG["stream"]


def collective_args(op: str, nelems: int, group_size: int, pg: str, *, desc: str | None = None,
                    ranks: tuple[int, ...] | None = None, src: int | None = None,
                    dst: int | None = None) -> dict[str, Any]:
    """A collective's metadata as ``record_param_comms`` and its kernel carry it (``Float`` elements).
    PyTorch 2.x writes split sizes, the group's description and ranks (``desc``, ``ranks``: all three are
    written when ``desc`` is given), and from 2.5 a send/recv's global ``src``/``dst`` ranks."""
    args: dict[str, Any] = {ARG["coll_name"]: op, ARG["in_nelems"]: nelems, ARG["out_nelems"]: nelems,
                            ARG["group_size"]: group_size, ARG["dtype"]: "Float"}
    if desc is not None:
        args |= {"In split size": "[]", "Out split size": "[]"}
    args[ARG["pg_name"]] = pg
    if desc is not None:
        args |= {"Process Group Description": desc, "Process Group Ranks": str(list(ranks or ()))}
    if src is not None:
        args |= {ARG["src_rank"]: src, ARG["dst_rank"]: dst}
    return args


def _us(ns: int) -> str:
    """ns as Kineto's µs with three decimals, exactly."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _meta(c: Comm, rank: int) -> str:
    """The collective's arguments as JSON members (no braces), to splice into an event's ``args``."""
    g = c.group
    src = dst = None
    if c.peer is not None:  # PyTorch 2.5+ names the global ranks of a send/recv
        src, dst = (rank, g.ranks[c.peer]) if c.op == "send" else (g.ranks[c.peer], rank)
    args = collective_args(c.op, c.nbytes // 4, len(g.ranks), g.name, desc=g.desc, ranks=g.ranks, src=src, dst=dst)
    return json.dumps(args)[1:-1]


def events(spec: Spec, line: Timeline) -> Iterator[str]:
    """The rank's trace events, one JSON object per string."""
    off = spec.offset_ns(line.rank)
    ext, corr = 0, CORRELATION_BASE  # ids of a trace taken after warm-up steps: CUPTI's count is far along
    for step, start, end in line.steps:
        ext += 1
        yield (f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {PID}, "tid": {PID}, '
               f'"ts": {_us(start + off)}, "dur": {_us(end - start)}, "args": {{"{_EXT}": {ext}}}}}')
    for b in line.blocks:
        starts, durs = block_kernels(spec, line.rank, b)
        names = COMPUTE[b.phase]
        cpu = b.launch + off
        step_cpu = int(round(spec.cpu_us * NS_PER_US))
        for i, (s, d) in enumerate(zip(starts.tolist(), durs.tolist())):
            ext += 1
            corr += 1
            op, kernel = names[i % len(names)]
            t = cpu + i * step_cpu
            yield (f'{{"ph": "X", "cat": "cpu_op", "name": "{op}", "pid": {PID}, "tid": {PID}, "ts": {_us(t)}, '
                   f'"dur": {_us(step_cpu - 1000)}, "args": {{"{_EXT}": {ext}}}}}')
            yield (f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {PID}, "tid": {PID}, '
                   f'"ts": {_us(t + 1000)}, "dur": {_us(step_cpu - 3000)}, '
                   f'"args": {{"{_EXT}": {ext}, "cbid": 211, "{_CORR}": {corr}}}}}')
            yield (f'{{"ph": "X", "cat": "kernel", "name": "{kernel}", "pid": {GPU_PID}, "tid": {COMPUTE_STREAM}, '
                   f'"ts": {_us(s + off)}, "dur": {_us(d)}, "args": {{"{_EXT}": {ext}, "queued": 0, '
                   f'"device": 0, "context": 1, "{_STREAM}": {COMPUTE_STREAM}, "{_CORR}": {corr}}}}}')
    for c in line.comms:
        ext += 1
        corr += 1
        meta = _meta(c, line.rank)
        t = c.launch + off
        concrete = f', "{ARG["concrete_inputs"]}": ["", "", "{c.peer}", "0"]' if c.peer is not None else ""
        yield (f'{{"ph": "X", "cat": "cpu_op", "name": "{C10D[c.op]}", "pid": {PID}, "tid": {PID}, "ts": {_us(t)}, '
               f'"dur": {_us(5000)}, "args": {{"{_EXT}": {ext}{concrete}}}}}')
        ext += 1
        yield (f'{{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": {PID}, "tid": {PID}, '
               f'"ts": {_us(t + 500)}, "dur": {_us(4000)}, "args": {{"{_EXT}": {ext}, {meta}}}}}')
        yield (f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {PID}, "tid": {PID}, '
               f'"ts": {_us(t + 1500)}, "dur": {_us(2500)}, "args": {{"{_EXT}": {ext}, "cbid": 211, '
               f'"{_CORR}": {corr}}}}}')
        yield (f'{{"ph": "X", "cat": "kernel", "name": "{NCCL_KERNEL[c.op]}", "pid": {GPU_PID}, "tid": {c.stream}, '
               f'"ts": {_us(c.arrival + off)}, "dur": {_us(c.end - c.arrival)}, "args": {{"{_EXT}": {ext}, '
               f'"queued": 0, "device": 0, "context": 1, "{_STREAM}": {c.stream}, "{_CORR}": {corr}, {meta}}}}}')


def header(spec: Spec, rank: int, all_groups: list[Group]) -> dict[str, object]:
    mine = [g for g in all_groups if rank in g.ranks]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem": 85029158912,
                              "computeMajor": 9, "computeMinor": 0, "numSms": 132}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": spec.ranks, "pg_count": len(mine),
                            "pg_config": [{"pg_name": g.name, "pg_desc": g.desc, "backend_config": "cuda:nccl",
                                           "pg_size": len(g.ranks), "ranks": list(g.ranks)} for g in mine],
                            "nccl_version": NCCL_VERSION},
        "displayTimeUnit": "ms",
        "baseTimeNanoseconds": 1_700_000_000_000_000_000,
    }


def write_json_trace(path: Path, head: dict[str, Any], events: Iterable[str],
                     tail: dict[str, Any] | None = None) -> int:
    """Write a trace to ``path`` (atomically; gzip, as the profiler's ``.json.gz``, when its name ends in
    ``.gz``): ``head``'s members, ``"traceEvents"`` (one JSON event per string, a line each), then ``tail``'s
    members; returns the number of events."""
    count = 0

    def body(tmp: Path) -> None:
        nonlocal count
        if path.suffix == ".gz":  # level 1: a generated trace compresses tenfold even so
            with igzip.open(tmp, "wt", compresslevel=1, encoding="utf-8") as z:
                count = _body(z)
            return
        with open(tmp, "w", encoding="utf-8", buffering=1 << 20) as f:
            count = _body(f)

    def _body(f: IO[str]) -> int:
        n = 0
        f.write(json.dumps(head)[:-1] + (', "traceEvents": [\n' if head else '"traceEvents": [\n'))
        for e in events:
            f.write(e if n == 0 else ",\n" + e)
            n += 1
        f.write("\n]" + (", " + json.dumps(tail)[1:] if tail else "}") + "\n")
        return n

    write_atomic(path, body)
    return count


def write_trace(spec: Spec, line: Timeline, path: Path, all_groups: list[Group] | None = None) -> int:
    """Write one rank's trace to ``path`` (atomically); returns its number of events."""
    return write_json_trace(path, header(spec, line.rank, all_groups or groups(spec)), events(spec, line),
                            {"traceName": path.name})


#: Kineto's category of each kind of a generated event table, where a row names none.
_CATEGORY = {"compute": "kernel", "comm": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset",
             "runtime": "cuda_runtime", "cpu_op": "cpu_op", "annotation": "user_annotation"}


def to_kineto(frame: pl.DataFrame, world: int, backend: str = "nccl") -> dict[int, dict[str, Any]]:
    """One Kineto trace per rank from a generated event table (:mod:`.scenarios`), whole µs: a row's
    stream, device, correlation and external id become its arguments, and a row with a collective and its
    bytes gets the collective's metadata (:func:`collective_args`: a send/recv with a peer, its ranks; a comm
    row off any stream, a CPU collective, also its input's shape and type). Another row's ``shapes`` becomes
    ``Input Dims`` ``[[shapes]]``: equal where they were equal, which is all the store's checksum keeps."""
    out = {}
    for (rank,), part in frame.group_by("rank", maintain_order=True):
        events = []
        for row in part.iter_rows(named=True):
            cat = row["cat"] or _CATEGORY[row["kind"]]
            args: dict[str, Any] = {}
            for col in ("stream", "device", "correlation", "external_id"):
                if row[col] is not None:
                    args[ARG[col]] = row[col]
            if row["coll_op"] is not None and row["bytes"] is not None:
                nel = row["bytes"] // 4
                src = dst = None
                if row["peer"] is not None:  # a send/recv: its global ranks, as PyTorch 2.5+ names them
                    src, dst = (rank, row["peer"]) if row["coll_op"] == "send" else (row["peer"], rank)
                args.update(collective_args(row["coll_op"], nel, row["group_size"], row["pg"], src=src, dst=dst))
                if row.get("send_splits") is not None:  # an all-to-all-v: its splits, in elements
                    recv = row.get("recv_splits") or []
                    args |= {ARG["in_split"]: str([b // 4 for b in row["send_splits"]]),
                             ARG["out_split"]: str([b // 4 for b in recv]), ARG["out_nelems"]: sum(recv) // 4}
                if row["kind"] == "comm" and row["stream"] is None:
                    args.update({ARG["input_dims"]: [[nel]], ARG["input_type"]: ["float"]})
            elif row.get("shapes") is not None:  # an op's recorded shapes, as a stand-in of the same equality
                args.update({ARG["input_dims"]: [[row["shapes"]]], ARG["input_type"]: ["float"]})
            events.append({"ph": "X", "cat": cat, "name": row["name"], "pid": row["pid"], "tid": row["tid"],
                           "ts": row["ts_ns"] // NS_PER_US, "dur": row["dur_ns"] // NS_PER_US, "args": args})
        out[rank] = {"schemaVersion": 1, "distributedInfo": {"backend": backend, "rank": rank, "world_size": world},
                     "traceEvents": events}
    return out
