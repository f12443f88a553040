"""A rank's timeline as the Kineto JSON trace PyTorch 2.x writes with CUDA and NCCL.

Per compute kernel: an ``aten::*`` CPU op on the main thread, inside it the ``cudaLaunchKernel`` runtime
call, and the kernel on stream 7; the three share an ``External id``, launch and kernel a
``correlation``. Per collective: ``c10d::allreduce_`` / ``c10d::send`` / ``c10d::recv_`` (with its peer in
``Concrete Inputs``) around ``record_param_comms`` (collective name, message sizes, dtype, process group
name, description and ranks; for send/recv ``Src Rank`` and ``Dst Rank``), around the launch; the NCCL
kernel carries the same metadata.
``ProfilerStep#N`` spans each step on the main thread; ``distributedInfo`` lists the process groups.
Timestamps are µs with three decimals, on the rank's host clock (true time + the host's offset).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from ddprof.atomic import write_atomic
from ddprof.synth.schedule import COMPUTE_STREAM, Comm, Group, Timeline, block_kernels, groups
from ddprof.synth.spec import Spec

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


def _us(ns: int) -> str:
    """ns as Kineto's µs with three decimals, exactly."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _meta(c: Comm, rank: int) -> str:
    g = c.group
    nel = c.nbytes // 4
    p2p = ""
    if c.peer is not None:  # PyTorch 2.5+ names the global ranks of a send/recv
        src, dst = (rank, g.ranks[c.peer]) if c.op == "send" else (g.ranks[c.peer], rank)
        p2p = f', "Src Rank": {src}, "Dst Rank": {dst}'
    return (f'"Collective name": "{c.op}", "In msg nelems": {nel}, "Out msg nelems": {nel}, '
            f'"Group size": {len(g.ranks)}, "dtype": "Float", "In split size": "[]", "Out split size": "[]", '
            f'"Process Group Name": "{g.name}", "Process Group Description": "{g.desc}", '
            f'"Process Group Ranks": "{list(g.ranks)}"{p2p}')


def events(spec: Spec, line: Timeline) -> Iterator[str]:
    """The rank's trace events, one JSON object per string."""
    off = spec.offset_ns(line.rank)
    ext, corr = 0, CORRELATION_BASE  # ids of a trace taken after warm-up steps: CUPTI's count is far along
    for step, start, end in line.steps:
        ext += 1
        yield (f'{{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#{step}", "pid": {PID}, "tid": {PID}, '
               f'"ts": {_us(start + off)}, "dur": {_us(end - start)}, "args": {{"External id": {ext}}}}}')
    for b in line.blocks:
        starts, durs = block_kernels(spec, line.rank, b)
        names = COMPUTE[b.phase]
        cpu = b.launch + off
        step_cpu = int(round(spec.cpu_us * 1000))
        for i, (s, d) in enumerate(zip(starts.tolist(), durs.tolist())):
            ext += 1
            corr += 1
            op, kernel = names[i % len(names)]
            t = cpu + i * step_cpu
            yield (f'{{"ph": "X", "cat": "cpu_op", "name": "{op}", "pid": {PID}, "tid": {PID}, "ts": {_us(t)}, '
                   f'"dur": {_us(step_cpu - 1000)}, "args": {{"External id": {ext}}}}}')
            yield (f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {PID}, "tid": {PID}, '
                   f'"ts": {_us(t + 1000)}, "dur": {_us(step_cpu - 3000)}, '
                   f'"args": {{"External id": {ext}, "cbid": 211, "correlation": {corr}}}}}')
            yield (f'{{"ph": "X", "cat": "kernel", "name": "{kernel}", "pid": {GPU_PID}, "tid": {COMPUTE_STREAM}, '
                   f'"ts": {_us(s + off)}, "dur": {_us(d)}, "args": {{"External id": {ext}, "queued": 0, '
                   f'"device": 0, "context": 1, "stream": {COMPUTE_STREAM}, "correlation": {corr}}}}}')
    for c in line.comms:
        ext += 1
        corr += 1
        meta = _meta(c, line.rank)
        t = c.launch + off
        concrete = f', "Concrete Inputs": ["", "", "{c.peer}", "0"]' if c.peer is not None else ""
        yield (f'{{"ph": "X", "cat": "cpu_op", "name": "{C10D[c.op]}", "pid": {PID}, "tid": {PID}, "ts": {_us(t)}, '
               f'"dur": {_us(5000)}, "args": {{"External id": {ext}{concrete}}}}}')
        ext += 1
        yield (f'{{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": {PID}, "tid": {PID}, '
               f'"ts": {_us(t + 500)}, "dur": {_us(4000)}, "args": {{"External id": {ext}, {meta}}}}}')
        yield (f'{{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {PID}, "tid": {PID}, '
               f'"ts": {_us(t + 1500)}, "dur": {_us(2500)}, "args": {{"External id": {ext}, "cbid": 211, '
               f'"correlation": {corr}}}}}')
        yield (f'{{"ph": "X", "cat": "kernel", "name": "{NCCL_KERNEL[c.op]}", "pid": {GPU_PID}, "tid": {c.stream}, '
               f'"ts": {_us(c.arrival + off)}, "dur": {_us(c.end - c.arrival)}, "args": {{"External id": {ext}, '
               f'"queued": 0, "device": 0, "context": 1, "stream": {c.stream}, "correlation": {corr}, {meta}}}}}')


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


def write_trace(spec: Spec, line: Timeline, path: Path, all_groups: list[Group] | None = None) -> int:
    """Write one rank's trace to ``path`` (atomically); returns its number of events."""
    head = json.dumps(header(spec, line.rank, all_groups or groups(spec)))[:-1]
    count = 0

    def body(tmp: Path) -> None:
        nonlocal count
        with open(tmp, "w", encoding="utf-8", buffering=1 << 20) as f:
            _body(f)

    def _body(f: IO[str]) -> None:
        nonlocal count
        f.write(head + ', "traceEvents": [\n')
        first = True
        for e in events(spec, line):
            f.write(e if first else ",\n" + e)
            first = False
            count += 1
        f.write('\n], "traceName": "' + path.name + '"}\n')

    write_atomic(path, body)
    return count
