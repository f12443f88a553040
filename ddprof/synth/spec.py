"""What a generated run looks like: ranks, parallelism, steps, kernels, slow ranks, clocks, noise.

Ranks are laid out as Megatron does: tensor-parallel rank fastest, then data-parallel, then pipeline
stage: ``rank = (stage · dp + d) · tp + t`` with ``dp = ranks / (tp · pp)``. Hosts hold
``gpus_per_host`` consecutive ranks.

Per step and rank (times in µs, kernel durations ``kernel_us · (1 ± noise)``, seeded):

* without pipeline (``pp == 1``): a forward pass of ``kernels // 3`` compute kernels in ``layers``
  chunks, each chunk followed by a tensor-parallel all-reduce (``tp > 1``; the compute stream waits for
  it); a backward pass of the other kernels in ``buckets`` chunks, each followed by a data-parallel
  all-reduce on its own stream that overlaps the next chunk (``dp > 1``; with ``poor_overlap``, every
  bucket's all-reduce after the last chunk); the step ends when the GPU has
  finished everything (the host synchronises);
* with a pipeline (``pp > 1``): ``micro_batches`` forward and backward passes of ``kernels //
  (2 · micro_batches)`` kernels each, in GPipe or 1F1B order; activations go to the next stage and
  gradients to the previous one by send/recv (a receive blocks the compute stream; a send does not),
  then the data-parallel all-reduces of the backward pass (``dp > 1``).

A slow rank's kernels take ``slow[rank]`` times longer. A slow link (``slow_link[host]``): the host's own
link between its GPUs (NVLink, PCIe) that many times slower: every collective and send/recv whose ranks all
sit on that host transfers that many times longer (a tensor-parallel group's all-reduce, a pipeline's
transfer between stages of one host). Poor overlap (``poor_overlap``, data-parallel runs without a
pipeline): the backward pass's all-reduces are issued after the whole backward, one after another (a
gradient all-reduce after ``loss.backward()``, or DDP with a single bucket), instead of each after its
chunk, overlapping the next. A host's clock reads ``clock_offset_us[host]``
more than the true time (every event of its ranks is shifted; the truth is on the true clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ddprof.errors import UsageError

SCHEDULES = ("1f1b", "gpipe")


@dataclass(frozen=True)
class Spec:
    ranks: int = 8
    steps: int = 4
    kernels: int = 60
    tp: int = 1
    pp: int = 1
    micro_batches: int = 4
    schedule: str = "1f1b"
    layers: int = 4
    buckets: int = 4
    gpus_per_host: int = 8
    kernel_us: float = 40.0
    kernel_gap_us: float = 2.0
    cpu_us: float = 6.0
    launch_latency_us: float = 5.0
    step_gap_us: float = 200.0
    bucket_bytes: int = 25 << 20
    tp_bytes: int = 4 << 20
    p2p_bytes: int = 8 << 20
    bus_gbps: float = 100.0
    slow: dict[int, float] = field(default_factory=dict)
    slow_link: dict[int, float] = field(default_factory=dict)
    clock_offset_us: dict[int, float] = field(default_factory=dict)
    poor_overlap: bool = False
    noise: float = 0.1
    seed: int = 0
    base_us: float = 1_000_000.0

    def __post_init__(self) -> None:
        problems = []
        if self.ranks < 1 or self.steps < 1:
            problems.append("ranks and steps must be at least 1")
        if self.tp < 1 or self.pp < 1 or self.ranks % (self.tp * self.pp):
            problems.append(f"ranks ({self.ranks}) must be a multiple of tp·pp ({self.tp}·{self.pp})")
        if self.schedule not in SCHEDULES:
            problems.append(f"schedule must be one of {', '.join(SCHEDULES)}, not {self.schedule!r}")
        if self.pp > 1 and self.kernels < 2 * self.micro_batches:
            problems.append(f"kernels ({self.kernels}) must be at least 2 · micro_batches ({self.micro_batches})")
        if self.pp == 1 and self.kernels < 3 * max(self.layers, self.buckets):
            problems.append(f"kernels ({self.kernels}) must be at least 3 · max(layers, buckets)")
        if not 0 <= self.noise < 0.5:
            problems.append("noise must lie in [0, 0.5)")
        if self.cpu_us < 6:
            problems.append("cpu_us must be at least 6 (a launch and its CPU op take that long)")
        if self.kernel_us * (1 - self.noise) + self.kernel_gap_us < self.cpu_us:
            problems.append("the host must launch kernels faster than they run: "
                            "kernel_us · (1 − noise) + kernel_gap_us ≥ cpu_us")
        if any(not 0 <= r < self.ranks for r in self.slow) or any(f < 1 for f in self.slow.values()):
            problems.append("slow ranks must exist and have a factor ≥ 1")
        if any(not 0 <= h < self.hosts for h in self.slow_link) or any(f < 1 for f in self.slow_link.values()):
            problems.append("slow links must be of hosts that exist and have a factor ≥ 1")
        if self.poor_overlap and (self.pp > 1 or self.dp < 2):
            problems.append("poor overlap is of a data-parallel run without a pipeline (pp 1, dp at least 2)")
        if problems:
            raise UsageError("synth: " + "; ".join(problems))

    @property
    def dp(self) -> int:
        return self.ranks // (self.tp * self.pp)

    @property
    def hosts(self) -> int:
        return -(-self.ranks // self.gpus_per_host)

    def host_of(self, rank: int) -> int:
        return rank // self.gpus_per_host

    def coords(self, rank: int) -> tuple[int, int, int]:
        """(stage, data-parallel index, tensor-parallel index) of a rank."""
        stage, rest = divmod(rank, self.dp * self.tp)
        d, t = divmod(rest, self.tp)
        return stage, d, t

    def rank_at(self, stage: int, d: int, t: int) -> int:
        return (stage * self.dp + d) * self.tp + t

    def offset_ns(self, rank: int) -> int:
        return int(round(self.clock_offset_us.get(self.host_of(rank), 0.0) * 1000))
