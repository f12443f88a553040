"""What a host's GPU runtime and driver calls do, by name: the classes that say where a host was while its
device sat idle (:mod:`analyses.idle_host`).

CUDA (``cuda*`` runtime, ``cu*`` driver) and HIP (``hip*``) spell the same calls alike; an Nsight Systems
export adds a version suffix (``cudaLaunchKernel_v7000``), so each class is a pattern over the name's start:

* ``memory``: allocating and freeing device or pinned memory (``cudaMalloc``, ``cudaFree``, ``cudaHostAlloc``,
  ``cuMemAlloc_v2``, ``hipMalloc``...). ``cudaFree`` waits for the device first: a caching allocator that
  gives memory back (``torch.cuda.empty_cache()``, fragmentation, a batch shape that keeps changing) stalls
  the host while the device drains;
* ``sync``: calls that wait for the device (``cudaDeviceSynchronize``, ``cudaStreamSynchronize``,
  ``cudaEventSynchronize``, a copy or memset without ``Async``: ``cudaMemcpy``, ``cuMemcpyDtoH_v2``);
* ``setup``: creating and destroying streams and events, loading modules and kernels, device and context
  set-up, graph instantiation (``cudaStreamCreateWithFlags``, ``cudaEventCreateWithFlags``,
  ``cuModuleLoadData``, ``cudaGraphInstantiate``...): start-up and warm-up work, not a training loop's;
* ``launch``: enqueuing work (``cudaLaunchKernel``, ``cudaGraphLaunch``, ``cudaMemcpyAsync``,
  ``cudaEventRecord``, ``cudaStreamWaitEvent``...): the launches themselves;
* every other runtime call: ``other``.

Examples: ``runtime_class("cudaFree") == "memory"``, ``runtime_class("cudaMemcpyAsync") == "launch"``,
``runtime_class("cudaMemcpy") == "sync"``, ``runtime_class("cudaGetLastError") == "other"``.
"""

from __future__ import annotations

import re

_API = r"^(cuda|cu|hip)"

#: The classes by name pattern, tried in this order (a copy or memset whose name says ``Async`` is a launch;
#: one that does not waits for the device: ``sync``). Polars' regular expressions, and Python's.
RUNTIME_CLASSES: dict[str, str] = {
    "memory": _API + r"(Malloc|Free|HostAlloc|HostRegister|HostUnregister|MemAlloc|MemFree|MemHostAlloc|"
                     r"MemHostRegister|MemHostUnregister|MemCreate|MemRelease|MemMap|MemUnmap|MemAddressReserve|"
                     r"MemAddressFree|ExtMallocWithFlags)",
    "setup": _API + r"(StreamCreate|StreamDestroy|EventCreate|EventDestroy|ModuleLoad|ModuleGetFunction|ModuleUnload|"
                    r"LibraryLoad|LibraryGetKernel|KernelGetFunction|FuncGetAttributes|FuncSetAttribute|"
                    r"GetDeviceProperties|DeviceGetAttribute|SetDevice|Init|CtxCreate|DevicePrimaryCtx|"
                    r"GraphInstantiate|GraphCreate|GraphExecUpdate|StreamBeginCapture|StreamEndCapture|"
                    r"GetFuncBySymbol|OccupancyMaxActiveBlocksPerMultiprocessor)",
    "launch": _API + r"(LaunchKernel|LaunchCooperativeKernel|ExtLaunchKernel|ModuleLaunchKernel|LaunchHostFunc|"
                     r"GraphLaunch|Memcpy\w*Async|Memset\w*Async|EventRecord|StreamWaitEvent)",
    "sync": _API + r"((Device|Stream|Event|Ctx)Synchronize|Memcpy|Memset)",
}
#: Within ``launch``: the calls that enqueue a kernel, and the asynchronous copies and memsets.
KERNEL_LAUNCH = _API + r"(LaunchKernel|LaunchCooperativeKernel|ExtLaunchKernel|ModuleLaunchKernel)"
ASYNC_COPY = _API + r"(Memcpy\w*Async|Memset\w*Async)"
#: Which class a moment inside calls of several classes (on several threads) counts for: the calls that
#: hold the host longest first.
PRIORITY = ("memory", "sync", "setup", "launch", "other")
_COMPILED = {c: re.compile(p) for c, p in RUNTIME_CLASSES.items()}


def runtime_class(name: str) -> str:
    """The class of a runtime or driver call by its name (module doc): one of :data:`RUNTIME_CLASSES`, or
    ``other``."""
    return next((c for c, p in _COMPILED.items() if p.match(name)), "other")
