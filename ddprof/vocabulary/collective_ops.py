"""The vocabulary of collectives, one place for every reader and analysis.

* **op names**: every spelling a trace or a Flight Recorder dump uses (``nccl:all_reduce``,
  ``c10d::allreduce_``, ``_allgather_base``, ``nccl:send 1->2``) normalised to one of :data:`OPS`
  (:func:`normalize_op`, :func:`profiling_op`);
* **markers**: the CPU ops and annotations that stand for a collective (:data:`MARKER_RE`);
* **kernels**: the GPU kernel names that are communication whatever their metadata says, by family
  (:data:`KERNEL_FAMILIES`: NCCL/RCCL, custom all-reduce of serving engines, PyTorch symmetric memory,
  DeepEP, NVSHMEM, TransformerEngine userbuffers, MSCCL/MSCCL++) and by a user's rules
  (:func:`parse_rule`, ``--comm-kernel 'REGEX[=op]'``), each with the op the name states
  (:func:`match_kernel`);
* **nccl-tests definitions**: the message size S of a collective (:func:`message_size`) and the
  bus-bandwidth factor (:func:`busbw_factor`).

Kineto ingest, the collective analyses and the hang diagnosis all read these names from here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # loaded by the two expressions below when they are built: reading a trace's names needs none
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


def _has(*words: str) -> Callable[[str], bool]:
    """A test for any of ``words`` in a lower-cased name, each standing alone between non-letters
    (``_rs`` matches ``gpu_rr_rs(``, not ``offsets``)."""
    pattern = re.compile("|".join(rf"(?<![a-z]){w}(?![a-z])" for w in words))
    return lambda name: pattern.search(name) is not None


_OP_WORDS: tuple[tuple[str, Callable[[str], bool]], ...] = (
    ("reduce_scatter", _has("reduce_?scatter", "reducescatter", "rs")),
    ("all_gather", _has("all_?gather", "allgather", "fcollect", "ag")),
    ("all_to_all", _has("all_?to_?all", "alltoallv?", "dispatch", "combine")),
    ("all_reduce", _has("all_?reduce", "allreduce")),
    ("broadcast", _has("broadcast", "bcast")),
    ("barrier", _has("barrier")),
    ("send", _has("send", "pullsend", "pushsend", "put")),
    ("recv", _has("recv", "pushrecv", "get")),
)


def op_from_name(name: str) -> str | None:
    """The op a kernel name states in words, for families whose names do not follow NCCL's:
    ``userbuffers_fp16_sum_inplace_gpu_rr_rs`` -> reduce_scatter; ``deep_ep::intranode::combine<8>``
    -> all_to_all; ``multimem_all_gather_kernel`` -> all_gather; ``nvshmemi_init`` -> None."""
    low = name.lower()
    for op, test in _OP_WORDS:
        if test(low):
            return op
    return None


def _nccl_op(name: str) -> str | None:
    return op_from_kernel(name)


def _userbuffers_op(name: str) -> str | None:
    """Userbuffers kernels say ``_rs``/``_ag`` when they reduce-scatter/all-gather; an in-place sum
    with neither is an all-reduce."""
    return op_from_name(name) or ("all_reduce" if "sum_inplace" in name else None)


def _all_reduce(name: str) -> str | None:
    return "all_reduce"


def _all_to_all(name: str) -> str | None:
    """DeepEP's kernels exchange tokens between every pair of ranks of the expert-parallel group, whatever
    the kernel's own word: ``dispatch``, ``combine``, and the exchanges of counts before them
    (``notify_dispatch``, ``cached_notify``) are all all-to-all."""
    return "all_to_all"


@dataclass(frozen=True)
class CommRule:
    """A rule that makes GPU kernels communication by name: ``pattern`` is searched in the kernel's
    name (:func:`re.search`); ``op`` is the collective it states (None: read from the name, else
    ``unknown``; ``none``: the kernels are *not* communication by name). ``source`` is ``built-in``
    or ``user``; ``name`` is the family's name or the rule as the user wrote it."""

    name: str
    pattern: str
    op: str | None = None
    source: str = "user"

    def op_of(self, kernel: str) -> str:
        """The op of a kernel this rule matched."""
        if self.op is not None:
            return self.op
        fn = _FAMILY_OP.get(self.name) if self.source == "built-in" else op_from_name
        return (fn or op_from_name)(kernel) or "unknown"


_FAMILY_OP: dict[str, Callable[[str], str | None]] = {
    "nccl": _nccl_op, "custom_all_reduce": _all_reduce, "userbuffers": _userbuffers_op, "deep_ep": _all_to_all,
}

#: Kernel families that communicate, in the order they are tried (the first match names the kernel).
KERNEL_FAMILIES: tuple[CommRule, ...] = (
    CommRule("nccl", r"(?i:^(void )?(nccl|rccl))|ncclKernel|ncclDevKernel", source="built-in"),
    # vLLM / SGLang custom all-reduce, PyTorch symmetric memory's one/two-shot, vLLM's ROCm quick reduce
    CommRule("custom_all_reduce", r"cross_device_reduce_?[12]stage|cross_device_reduce|one_shot_all_reduce|"
             r"two_shot_all_reduce|quickreduce::allreduce", source="built-in"),
    CommRule("symm_mem_multimem", r"multimem_", source="built-in"),  # multimem_all_reduce, multimem_all_gather
    # DeepEP's expert-parallel dispatch/combine (intranode, internode, low-latency) and the count exchanges
    # before them (notify_dispatch, cached_notify), not its layout kernel nor its buffer cleaning; DeepSeek's
    # own build names the same kernels dpsk::ep::internode::dispatch, dpsk::ep::internode_ll::combine ...
    # (its dpsk::ep::cuda::get_dispatch_layout and cdpsk::ep::CUB_* scans compute, they do not transfer)
    CommRule("deep_ep", r"(?<![A-Za-z_])(?:deep_ep|dpsk::ep)::(?:intranode|internode(?:_ll)?)::"
             r"(?!get_dispatch_layout|clean)", source="built-in"),
    CommRule("nvshmem", r"(?i:(?<![a-z])nvshmem)", source="built-in"),
    CommRule("userbuffers", r"(?<![a-z])k?userbuffers_", source="built-in"),  # TransformerEngine
    CommRule("msccl", r"(?i:msccl)", source="built-in"),  # MSCCL (mscclKernel_*) and MSCCL++ (mscclpp::)
)

#: Every built-in family as one pattern (a name matching none of them is no communication by name).
COMM_KERNEL_RE = re.compile("|".join(f"(?:{r.pattern})" for r in KERNEL_FAMILIES))


class RuleError(ValueError):
    """A ``REGEX[=op]`` rule that is not one (its message names the rule and the problem)."""


_OP_WORD = re.compile(r"[A-Za-z_]+")


def parse_rule(text: str) -> CommRule:
    """``'REGEX[=op]'`` -> a user :class:`CommRule`. The text after the last ``=`` is the op when it is
    a word (an op name or alias of :data:`OPS`, or ``none``); otherwise the whole text is the regex
    (``a(?=b)`` has no op). Raises :class:`RuleError` for an invalid regex or an unknown op.

    >>> parse_rule("my_a2a_kernel=alltoall").op, parse_rule("fused_ar").op
    ('all_to_all', None)
    """
    pattern, sep, word = text.rpartition("=")
    op: str | None = None
    if sep and not pattern:
        raise RuleError(f"communication kernel rule {text!r}: the regular expression is empty")
    if sep and _OP_WORD.fullmatch(word):
        op = "none" if word.lower() == "none" else normalize_op(word) or (word if word in OPS else None)
        if op is None:
            raise RuleError(f"communication kernel rule {text!r}: unknown op {word!r} (one of "
                            f"{', '.join(OPS)}, or none for kernels that are not communication)")
    else:
        pattern = text
    if not pattern:
        raise RuleError(f"communication kernel rule {text!r}: the regular expression is empty")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise RuleError(f"communication kernel rule {text!r}: invalid regular expression ({exc})") from None
    return CommRule(name=text, pattern=pattern, op=op, source="user")


@lru_cache(maxsize=64)
def _compiled(rules: tuple[CommRule, ...]) -> tuple[tuple[CommRule, re.Pattern[str]], ...]:
    return tuple((r, re.compile(r.pattern)) for r in rules)


def kernel_rules(user: Sequence[str] = ()) -> tuple[CommRule, ...]:
    """The rules in the order they are tried: the user's (as ``REGEX[=op]`` texts), then
    :data:`KERNEL_FAMILIES`."""
    return (*(parse_rule(t) for t in user), *KERNEL_FAMILIES)


def match_kernel(name: str, rules: tuple[CommRule, ...]) -> tuple[CommRule, str] | None:
    """The first rule whose pattern is found in ``name``, with the op it gives; None when no rule
    matches or the first match is a ``none`` rule (the kernel is not communication by name).

    >>> match_kernel("void deep_ep::intranode::dispatch<8>(int*)", kernel_rules())[1]
    'all_to_all'
    """
    for rule, rx in _compiled(rules):
        if rx.search(name):
            return None if rule.op == "none" else (rule, rule.op_of(name))
    return None


def message_size(op: pl.Expr, in_bytes: pl.Expr, out_bytes: pl.Expr, group_size: pl.Expr) -> pl.Expr:
    """nccl-tests' message size S of each collective, from its input and output bytes and group size:
    all-reduce/broadcast/reduce = count x element size; all-gather = output bytes; reduce-scatter = input
    bytes; all-to-all = total bytes sent; send/recv = bytes moved; barrier none. Example: an all-gather
    of 1,024 floats per rank over 8 ranks has in_bytes 4,096 and S = 32,768."""
    import polars as pl

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
    import polars as pl

    n = n.cast(pl.Float64)
    return (
        pl.when(op == "all_reduce").then(2.0 * (n - 1) / n)
        .when(op.is_in(["all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"])).then((n - 1) / n)
        .when(op.is_in(["broadcast", "reduce", "sendrecv"])).then(pl.lit(1.0))
    )
