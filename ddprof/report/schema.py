"""The report contract: the sections' rows as typed records with their field docs, and what every report shares.

``ddprof analyze --format json`` prints a dict (:func:`ddprof.analyses.report.build_report`). Each section's
rows are a :class:`msgspec.Struct`, declared once; the report's own record (the run, every section, the
version, the verdicts, the status) is assembled from the sections' declarations
(:data:`ddprof.analyses.sections.Report`: a section names its record where it is declared), and so is the
JSON Schema committed as ``docs/report.schema.json`` (``python -m ddprof.analyses.sections`` rewrites it; a
test fails while the committed one is stale). A consumer that wants typed rows converts a report, or a
section, with :func:`parse` or :func:`rows` and reads attributes, not string keys.

Here, in the core: :class:`Row`, the pieces every report shares (the ``run`` section, the distributions and
worst steps of a detail table's summary, :data:`REPORT_VERSION`, :func:`version_of`, :func:`parse`,
:func:`rows`, :func:`schema_of`), and the records of ddprof's sections, which the dashboards, the terminal
report, the CLI and the comparison of reports read by name; the core may not import the analyses, so a
record an outer layer reads lives here. A new section may declare its records in its own module.

Why msgspec: it is already a core dependency, it validates and converts a decoded JSON document (or the
dict ``build_report`` returns) into these records at C speed (:func:`msgspec.convert`), rejects a missing
field, a wrong type or an unknown key (``forbid_unknown_fields``) with a message that names the path
(``Expected `int`, got `str` - at `$.overlap[3].rank```), and generates JSON Schema from the same classes
(:func:`msgspec.json.schema`). A dataclass would need a validator beside it; pydantic is a heavier
dependency the core does not carry.

Versions: :data:`REPORT_VERSION` is in every report as ``report_version``. A report without it is
version 1 (ddprof before the contract was declared): it held the per-step and per-instance rows in the
JSON, where version 2 keeps their summaries (``OverlapSteps``, ``Collectives``, ...) and writes the rows as
detail tables beside it (:mod:`ddprof.report.tables`, each table's rows declared by its section: ``detail``);
:func:`version_of` says which.

Floats computed as ratios (percentages, bandwidths, ratios) are ``null`` where the ratio is undefined
(a zero denominator: the analyses write NaN as null).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec
from msgspec import Meta

#: The contract's version, written into every report as ``report_version``.
REPORT_VERSION = 2
#: The committed schema, relative to the repository root.
SCHEMA_PATH = Path("docs") / "report.schema.json"


class Row(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A record of the report: an unknown key is an error, so the declarations stay complete."""


Rank = Annotated[int, Meta(description="global rank")]
Step = Annotated[int, Meta(description="profiler step number (ProfilerStep#N)")]
Pct = Annotated[float | None, Meta(description="percentage, 0-100; null where undefined")]
StepBasis = Annotated[Literal["device", "host"] | None, Meta(
    description="where the step is measured: device (a GPU rank: from the first device activity launched in "
                "the step to the first launched in the next) or host (a CPU-only rank: its ProfilerStep span); "
                "null in a report written before the basis was recorded")]


# --- run --------------------------------------------------------------------------------------------------


class RankSummary(Row):
    """One traced rank, from the run dir's manifest (no event scan)."""

    rank: Rank
    events: Annotated[int, Meta(description="events ingested")]
    kernels: Annotated[int, Meta(description="GPU kernels (compute and communication)")]
    comm_kernels: Annotated[int, Meta(description="communication kernels")]
    comm_events: Annotated[int, Meta(description="communication events (kernels, or gloo ops on a CPU trace)")]
    step_ranges: Annotated[list[list[int]], Meta(description="profiler steps the rank traced, as inclusive "
                                                              "ranges [first, last] of consecutive steps")]
    span_us: Annotated[float | None, Meta(description="traced time: first start to last end of any event in "
                                                      "each profiling window, added up over the rank's windows "
                                                      "(the time between them was never traced), µs")]
    device_names: Annotated[list[str], Meta(description="GPU names the trace reports")]
    host: Annotated[str | None, Meta(description="host the rank ran on, when known")]
    warnings: Annotated[list[str], Meta(description="what ingest noticed about this rank's traces")]
    cpus: Annotated[str | None, Meta(description="the CPUs the rank was bound to (its affinity, as ranges: "
                                                 "\"0-3,8\"), when the collector recorded them")] = None
    windows: Annotated[int, Meta(description="profiling windows (ddprof/store/windows.py)")] = 0


class FailedInput(Row):
    """An input that could not be read; the others were analysed (status ``partial``)."""

    path: Annotated[str | None, Meta(description="the file")]
    rank: Annotated[int | None, Meta(description="its rank, when known")]
    error: Annotated[str | None, Meta(description="why, naming the file")]


class RunSection(Row):
    """What was analysed."""

    world_size: Annotated[int | None, Meta(description="ranks in the job, as the traces say")]
    ranks: Annotated[list[int], Meta(description="traced ranks")]
    backend: Annotated[str | None, Meta(description="nccl, gloo, ...")]
    device: Annotated[str | None, Meta(description="gpu or cpu: what the analyses measured; null when dumps "
                                                    "alone do not tell")]
    steps: Annotated[list[int], Meta(description="profiler steps of the run")]
    warnings: Annotated[list[str], Meta(description="one sentence each, for the reader")]
    per_rank: list[RankSummary] = []
    failed: list[FailedInput] = []


# --- per-rank sections ------------------------------------------------------------------------------------


class OverlapRow(Row):
    """Communication hidden behind compute on one rank: U(comm) ∩ U(compute) over U(comm)."""

    rank: Rank
    overlap_pct: Annotated[float | None, Meta(description="100 × overlapped / comm; null without communication")]
    comm_us: Annotated[float, Meta(description="length of the union of communication intervals, µs")]
    overlapped_us: Annotated[float, Meta(description="communication time with compute running, µs")]
    exposed_comm_us: Annotated[float, Meta(description="communication time without compute, µs")]
    device: Annotated[str, Meta(description="gpu (kernels) or cpu (gloo ops and CPU compute)")]


class OverlapStepRow(Row):
    """:class:`OverlapRow` for one step of one rank."""

    rank: Rank
    step: Step
    overlap_pct: Annotated[float | None, Meta(description="100 × overlapped / comm; null without communication")]
    comm_us: Annotated[float, Meta(description="communication time in the step, µs")]
    overlapped_us: Annotated[float, Meta(description="communication time with compute running, µs")]
    exposed_comm_us: Annotated[float, Meta(description="communication time without compute, µs")]
    basis: StepBasis = None


class BreakdownRow(Row):
    """A rank's traced span cut into idle, compute and non-compute (communication, copies) time (HTA's)."""

    rank: Rank
    idle_us: Annotated[float, Meta(description="no GPU (or CPU) work at all, µs")]
    compute_us: Annotated[float, Meta(description="compute work, µs")]
    non_compute_us: Annotated[float, Meta(description="communication and memory work without compute, µs")]
    span_us: Annotated[float, Meta(description="traced time, summed over profiling windows, µs")]
    idle_pct: Pct
    compute_pct: Pct
    non_compute_pct: Pct


class BreakdownStepRow(BreakdownRow):
    """:class:`BreakdownRow` for one step of one rank, over the step's window instead of the span."""

    step: Step
    basis: StepBasis = None


class IdleRow(Row):
    """Idle gaps on one stream of one rank, by cause."""

    rank: Rank
    stream: Annotated[int, Meta(description="GPU stream (or CPU thread) id")]
    category: Annotated[Literal["host_wait", "kernel_wait", "other"], Meta(description="what the stream waited for")]
    idle_us: Annotated[float, Meta(description="idle time of this category, µs")]
    ratio: Annotated[float | None, Meta(description="share of the stream's idle time, 0-1")]


class IdleStepRow(IdleRow):
    """:class:`IdleRow` for one step (a gap belongs to the step window that holds its end)."""

    step: Step
    basis: StepBasis = None


class BubbleRow(Row):
    """The share of a rank's step with no compute (a pipeline bubble where pipeline stages were found)."""

    rank: Rank
    step: Step
    window_us: Annotated[float, Meta(description="the step's length (its device step on a GPU rank), µs")]
    compute_us: Annotated[float, Meta(description="compute time in the step, µs")]
    bubble_us: Annotated[float, Meta(description="time without compute, µs")]
    bubble_pct: Pct
    basis: StepBasis = None
    stage: Annotated[int | None, Meta(description="pipeline stage of the rank, where pipelines were found")] = None
    stages: Annotated[int | None, Meta(description="pipeline stages (P)")] = None
    micro_batches: Annotated[float | None, Meta(description="micro-batches per step (M)")] = None
    theoretical_pct: Annotated[float | None, Meta(description="100 × (P−1)/(M+P−1)")] = None


class PipelineRow(Row):
    """A rank's place in a pipeline found from its send/recv chains, and its mean bubble."""

    rank: Rank
    pipeline: Annotated[int, Meta(description="pipeline number (several in a run with data parallelism)")]
    stage: Annotated[int, Meta(description="stage of the rank, 0 first")]
    stages: Annotated[int, Meta(description="stages in the pipeline (P)")]
    micro_batches: Annotated[float, Meta(description="micro-batches per step (M)")]
    bubble_pct: Pct
    theoretical_pct: Annotated[float | None, Meta(description="100 × (P−1)/(M+P−1)")]


class StepTimeRow(Row):
    """One step of one rank: its length and work."""

    rank: Rank
    step: Step
    step_us: Annotated[float, Meta(description="the step's length on the host (its ProfilerStep span, the "
                                               "iteration time), µs")]
    kernels: Annotated[int, Meta(description="kernels (or CPU ops) in the step")]
    collectives: Annotated[int, Meta(description="communication events in the step")]
    comm_bytes: Annotated[int, Meta(description="bytes the step's collectives moved")]
    loading_us: Annotated[float | None, Meta(
        description="host time in the step's data-loader spans (their union), µs; null in a report written before "
                    "it was recorded")] = None


# --- cross-rank sections ----------------------------------------------------------------------------------


class StragglerRank(Row):
    """How often one rank arrived last at a collective, what it cost the others, and the evidence the
    straggler decision weighs (analyses/stragglers.py: significant and material)."""

    rank: Rank
    times_last: Annotated[int, Meta(description="collective instances this rank arrived at last")]
    wait_caused_us: Annotated[float, Meta(description="time the other ranks waited for it, summed, µs")]
    waiting_ranks: Annotated[int, Meta(description="ranks that waited for it")]
    instances: Annotated[int, Meta(description="collective instances it took part in")]
    step_us: Annotated[float | None, Meta(description="its mean step time, µs")]
    wait_beyond_schedule_us: Annotated[float, Meta(description=(
        "the part of wait_caused_us its own waiting on pipeline neighbours (point-to-point transfers in "
        "flight, no compute) does not explain, µs; equal to wait_caused_us without point-to-point "
        "transfers"))] = 0.0
    units: Annotated[int, Meta(description=(
        "independent occasions compared: its steps, per process group (each instance where the ranks "
        "have one step or none)"))] = 0
    last_units: Annotated[int, Meta(description="units at which its mean lateness was the largest")] = 0
    chance_last_pct: Annotated[float | None, Meta(description=(
        "share of its units it would be last at by chance (mean of 1 / ranks at the unit), %"))] = None
    lateness_us: Annotated[float | None, Meta(description=(
        "mean over its units of its arrival (pipeline waits taken off) behind the instance's median "
        "arrival, µs; negative when early"))] = None
    p_value: Annotated[float | None, Meta(description=(
        "chance that a run whose last arrival only rotates shows a rank this consistently late: the "
        "smaller p of its lateness t-test and its last-arrival binomial test, times the tests made over the "
        "ranks (Bonferroni; a last-arrival test too weak to reach alpha is not made), at most 1"))] = None
    wait_share_pct: Annotated[float | None, Meta(description=(
        "wait_beyond_schedule_us per waiting rank as a share of the run's time (the median rank's steps "
        "added up): per step, of the mean step, %"))] = None
    significant: Annotated[bool, Meta(description="p_value ≤ alpha: it is late beyond chance")] = False
    material: Annotated[bool, Meta(description="wait_share_pct ≥ min_share_pct: its wait is a real share of "
                                               "the step")] = False


class CauseEvidence(Row):
    """One measure of the straggler beside its peers', per step (median over steps; peers: the median of
    the other ranks' medians)."""

    measure: Annotated[str, Meta(description="lead (host time before the step's first compute), compute (its "
                                              "leaf compute ops), precomm (host time before entering "
                                              "collectives), idle (the step's thread outside any op after its "
                                              "first compute), overhead (host time inside ops between leaf "
                                              "ops), op_ratio (the same ops' fast calls: their 25th percentile durations, ratio), "
                                              "same_shapes (as op_ratio, by op and recorded input shapes), "
                                              "shapes_share (the share of its compute op time on shapes a peer ran), "
                                              "stall_peak (largest step's wait caused / median step's), stall_steps (the long steps, of all), "
                                              "stall_idle (its host idle in its long steps / in its median step), "
                                              "stall_host (of its pauses, what the host's scheduling explains: "
                                              "collectives it left after the others, its wait for a CPU / the "
                                              "pauses), "
                                              "burst_compute (its compute in its long steps / in its median step), "
                                              "compute_per_microbatch (pipeline stage), thread_cpu (its "
                                              "training thread's CPU time, from the step measures), cpu_wait "
                                              "(the time that thread waited for a CPU, from the step measures)")]
    rank_value: Annotated[float, Meta(description="the straggler's value (µs, or a ratio)")]
    peers_value: Annotated[float | None, Meta(description="the other ranks' value (µs, or a ratio)")]
    ratio: Annotated[float | None, Meta(description="rank_value / peers_value; null where undefined")]


class StragglerCause(Row):
    """Why a straggler (or the slowest pipeline stage) is late, from comparing it with its peers
    (analyses/straggler_cause.py)."""

    rank: Rank
    cause: Annotated[Literal["stalls", "input", "communication", "host idle", "contention", "compute",
                             "pipeline imbalance", "undecided"],
                     Meta(description="stalls (a few steps far longer, the rest normal), input (host time before "
                                      "the first compute: data loading, or a sleep there), communication "
                                      "(late into its collectives, compute normal), host idle (its step's "
                                      "thread outside any op mid-step: a sleep, a lock, unrecorded Python), contention (its ops and "
                                      "the time between them slower alike: a busy CPU), compute (its compute "
                                      "ops slower, the rest normal), pipeline imbalance (its stage's compute "
                                      "per micro-batch above the others'), undecided")]
    excess_us: Annotated[float | None, Meta(description="per step, how much longer the deciding measure is than the "
                                                        "peers' (µs)")]
    evidence: Annotated[list[CauseEvidence], Meta(description="the measures compared, deciding one first")] = []


class SlowGroup(Row):
    """Ranks placed alike (one host, or one set of CPUs) that arrive late together (analyses/slow_groups.py)."""

    ranks: Annotated[list[int], Meta(description="the group's ranks")]
    placement: Annotated[str, Meta(description="what they share: \"host NAME\", or \"CPUs 1\" (of a host)")]
    units: Annotated[int, Meta(description="units (steps of a process group) with members and other ranks")]
    last_units: Annotated[int, Meta(description="units at which a member alone arrived last")]
    chance_last: Annotated[float, Meta(description="units a member would be last at by chance (members / ranks "
                                                   "at each unit, added up)")]
    lateness_us: Annotated[float, Meta(description="mean over units of the members' mean lateness less the other "
                                                   "ranks' mean lateness, µs")]
    lateness_pct: Annotated[float | None, Meta(description="lateness_us as a share of the median step, % (null "
                                                           "without steps)")]
    p_value: Annotated[float, Meta(description="family-wise p-value of the group's lateness and last arrivals "
                                               "(Bonferroni over the candidate groups)")]
    wait_share_pct: Annotated[float, Meta(description="the members' wait_share_pct added up, % of a step")]
    wait_us: Annotated[float, Meta(description="wall-clock time a waiting rank spent waiting for the members, "
                                               "added up over them, per step (µs)")]
    cause: Annotated[StragglerCause | None, Meta(description="the cause class most of its members share, told "
                                                             "against the ranks outside the group, as its latest "
                                                             "member of that class shows it")] = None


class Stragglers(Row):
    """The stragglers (ranks both significantly and materially late) and every rank's figures."""

    ranks: Annotated[list[int], Meta(description="the stragglers: significant and material")] = []
    alpha: Annotated[float, Meta(description="family-wise significance level a p_value must reach")] = 0.05
    min_share_pct: Annotated[float, Meta(description=(
        "least wait_share_pct that is material, % of a step"))] = 2.0
    unit: Annotated[str, Meta(description=(
        "what the tests take as independent: step (each step's instances of a process group) or instance"))] = "step"
    per_rank: list[StragglerRank] = []
    causes: Annotated[list[StragglerCause], Meta(description="per straggler, and for a pipeline's slowest "
                                                              "stage, the cause class and its evidence")] = []
    groups: Annotated[list[SlowGroup], Meta(description="ranks placed alike that are slower together: "
                                                         "significant, material, and more than half of them "
                                                         "later than every other rank")] = []


class CollectiveRow(Row):
    """One collective instance matched across the ranks of its process group."""

    pg: Annotated[str, Meta(description="process group")]
    src: Annotated[int | None, Meta(description="sender of a point-to-point transfer")]
    dst: Annotated[int | None, Meta(description="receiver of a point-to-point transfer")]
    index: Annotated[int, Meta(description="position among the group's instances")]
    op: Annotated[str, Meta(description="all_reduce, all_gather, send, ...")]
    bytes: Annotated[int | None, Meta(description="message size")]
    group_size: Annotated[int | None, Meta(description="ranks in the process group")]
    ranks_seen: Annotated[list[int], Meta(description="ranks whose traces hold the instance")]
    arrival_us: Annotated[list[float], Meta(description="each seen rank's arrival after the first, µs")]
    start_us: Annotated[float, Meta(description="first arrival, µs on the run's clock")]
    arrival_skew_us: Annotated[float, Meta(description="last arrival − first arrival, µs")]
    duration_us: Annotated[float, Meta(description="duration without the wait for the last rank, µs")]
    clock_aligned: Annotated[bool, Meta(description="the ranks' clocks agree (one host or aligned)")]
    last_rank: Annotated[int | None, Meta(description="the rank that arrived last")]
    n: Annotated[int, Meta(description="ranks taking part (nccl-tests' n)")]
    missing_ranks: Annotated[list[int], Meta(description="group members with no record of it")]
    algbw_gbps: Annotated[float | None, Meta(description="bytes / duration, GB/s")]
    busbw_gbps: Annotated[float | None, Meta(description="algbw × nccl-tests' bus factor, GB/s")]


class BandwidthRow(Row):
    """nccl-tests' algbw/busbw for one op, message size and group size: bytes / mean duration."""

    op: Annotated[str, Meta(description="collective op")]
    bytes: Annotated[int, Meta(description="message size")]
    n: Annotated[int, Meta(description="ranks taking part")]
    count: Annotated[int, Meta(description="instances")]
    duration_us: Annotated[float, Meta(description="mean duration without the wait, µs")]
    algbw_gbps: Annotated[float | None, Meta(description="GB/s")]
    busbw_gbps: Annotated[float | None, Meta(description="GB/s")]


class CommKernelRow(Row):
    """The kernel names one rule made communication."""

    rule: Annotated[str, Meta(description="rule name (a built-in family or the user's pattern)")]
    source: Annotated[str, Meta(description="built-in, user, or metadata")]
    pattern: Annotated[str, Meta(description="the regular expression")]
    op: Annotated[str | None, Meta(description="the op it gave; null for a rule of yours without one (the op "
                                               "read from the name) that matched nothing")]
    name: Annotated[str | None, Meta(description="kernel name; null for a rule that matched nothing")]
    count: Annotated[int, Meta(description="kernels of that name")]
    ranks: Annotated[int, Meta(description="ranks they ran on")]


class KernelRow(Row):
    """One of the top kernels by total time."""

    name: Annotated[str, Meta(description="kernel name")]
    kind: Annotated[str, Meta(description="compute, comm or memory")]
    count: Annotated[int, Meta(description="launches on every rank")]
    total_us: Annotated[float, Meta(description="time on every rank, µs")]
    mean_us: Annotated[float, Meta(description="per launch, µs")]
    ranks: Annotated[int, Meta(description="ranks it ran on")]
    per_step_us: Annotated[float | None, Meta(description="time per rank and step, µs")]
    per_step_count: Annotated[float | None, Meta(description="launches per rank and step")]
    shapes: Annotated[int | None, Meta(description="a CPU op recorded with shapes: one number for the set of "
                                                   "input shapes and types it ran on (other sizes, another "
                                                   "number); null otherwise")] = None
    shapes_distinct: Annotated[int | None, Meta(description="how many distinct input shapes that set holds "
                                                            "(every rank's); null without")] = None


class KernelStepRow(Row):
    """A top kernel's time in one step, every rank together."""

    name: Annotated[str, Meta(description="kernel name")]
    kind: Annotated[str, Meta(description="compute, comm or memory")]
    step: Step
    count: Annotated[int, Meta(description="launches")]
    total_us: Annotated[float, Meta(description="µs")]


class HostClockRow(Row):
    """One host's clock against the reference host's: offset(t) = offset_ns + drift · (t − t0_ns)."""

    host: str
    ranks: list[int]
    offset_ns: int
    drift_ppm: float
    t0_ns: int
    bound_ns: Annotated[int, Meta(description="the estimate's error bound, ns")]
    instances: Annotated[int, Meta(description=(
        "collectives shared with the reference host; through other hosts, the collectives and send/recv "
        "transfers along the path"))]
    applied: bool
    reason: str
    via: Annotated[list[str], Meta(description=(
        "hosts the estimate passes through (collectives of any group, send/recv transfers); empty when "
        "estimated from what the host shares with the reference"))] = []


class Clocks(Row):
    """Per-host clock offsets, estimated and applied before the analyses when the evidence holds."""

    applied: bool
    reason: str
    reference: Annotated[str | None, Meta(description="the reference host")]
    hosts: list[HostClockRow] = []


class HealthFinding(Row):
    """What the trace cannot tell (ddprof/analyses/health.py lists the codes)."""

    finding: Annotated[str, Meta(description="its code")]
    rank: Annotated[int | None, Meta(description="the rank; null for a finding about the run")]
    ranks: Annotated[list[int], Meta(description="the ranks concerned")]
    count: Annotated[int, Meta(description="events, ranks or notices that show it")]
    example: Annotated[str, Meta(description="one of them")]
    affects: Annotated[str, Meta(description="the metrics it bends, and how")]
    headline: Annotated[bool, Meta(description="it changes a headline number (also a verdict)")]


# --- hang -------------------------------------------------------------------------------------------------


class HangRankState(Row):
    """One member rank's state at a stuck collective, from its Flight Recorder dump."""

    rank: Rank
    state: str
    entered_upto: Annotated[int | None, Meta(description="last sequence number it entered; null when unknown")]
    completed_upto: Annotated[int | None, Meta(description="last it completed; null when unknown")]
    input_sizes: list[list[int]] | None = None
    input_dtypes: list[str] | None = None
    time_created_ns: int | None = None


class HangFirstIncomplete(Row):
    """The first collective of the group some member never completed."""

    index: int
    op: str
    op_name: str
    not_completed_ranks: list[int]
    completed_ranks: list[int]


class HangChannel(Row):
    """Unmatched sends and receives between two ranks."""

    src: int
    dst: int
    pending_sends: int
    pending_recvs: int


class HangCollective(Row):
    """Per process group: the first collective (or send/recv) some ranks never reached or finished."""

    pg: Annotated[str, Meta(description="process group")]
    op: Annotated[str, Meta(description="the op, normalised as in other sections")]
    index: Annotated[int, Meta(description="its sequence number in the group")]
    pg_desc: Annotated[str, Meta(description="its description (default_pg, PP, ...)")] = ""
    pg_ranks: list[int] = []
    kind: Literal["collective", "p2p"] = "collective"
    op_name: Annotated[str, Meta(description="Flight Recorder's name (nccl:send 1->2)")] = ""
    seq_id: int | None = None
    seq_rank: int | None = None
    status: Annotated[str, Meta(description="missing, not_completed or unknown_peer")] = ""
    missing_ranks: Annotated[list[int], Meta(description="never entered it")] = []
    not_completed_ranks: Annotated[list[int], Meta(description="entered, not completed")] = []
    completed_ranks: list[int] = []
    unknown_ranks: Annotated[list[int], Meta(description="no dump, or no record")] = []
    waiting_ranks: list[int] = []
    waits: Annotated[list[list[int]], Meta(description="[rank, peer] pairs waiting")] = []
    channels: list[HangChannel] = []
    absent_reasons: dict[str, str] = {}
    waiting_since_ns: int | None = None
    per_rank: list[HangRankState] = []
    first_incomplete: HangFirstIncomplete | None = None
    verdict: str = ""


class HangFailure(Row):
    """A dump that could not be read."""

    path: str | None
    rank: int | None
    reason: str


class Hang(Row):
    """From NCCL Flight Recorder dumps; ``{collectives: []}`` without dumps."""

    collectives: list[HangCollective] = []
    source: str | None = None
    format_versions: list[str] = []
    world_size: int | None = None
    ranks: list[int] = []
    missing_dumps: list[int] = []
    failed: list[HangFailure] = []
    skipped_files: list[str] = []
    suspect_ranks: Annotated[list[int], Meta(description="ranks others wait for, waiting for nobody")] = []
    unaccounted_ranks: Annotated[list[int], Meta(description="ranks others wait for that left no dump")] = []
    deadlock_cycles: Annotated[list[list[int]], Meta(description="groups of ranks waiting for each other")] = []
    lagging_completion_ranks: list[int] = []
    verdict: str | None = None
    warnings: list[str] = []


# --- summaries of the detail tables ---------------------------------------------------------------------


class Distribution(Row):
    """A measure over the steps (or instances) of a group: nulls left out, percentiles interpolated."""

    mean: float | None
    p50: float | None
    p95: float | None
    max: float | None
    total: Annotated[float | None, Meta(description="sum of the values")]


class WorstStep(Row):
    """One of the run's worst steps of a section, by its headline measure."""

    rank: Rank
    step: Step
    value: float | None


class WorstIdleStep(Row):
    """One of the run's steps with the most idle time of one cause (every stream of the step added)."""

    rank: Rank
    category: Annotated[Literal["host_wait", "kernel_wait", "other"], Meta(description="what the streams waited for")]
    step: Step
    value: float | None


class WorstKernelStep(Row):
    """One of the steps in which a top kernel took the most time (every rank together)."""

    name: Annotated[str, Meta(description="kernel name")]
    kind: Annotated[str, Meta(description="compute, comm or memory")]
    step: Step
    value: float | None


class OverlapSteps(Row):
    """A rank's ``overlap_by_step`` rows (detail table), summarised."""

    rank: Rank
    steps: Annotated[int, Meta(description="rows in the detail table")]
    exposed_comm_us: Distribution
    overlap_pct: Distribution
    basis: StepBasis = None


class OverlapStepSummary(Row):
    """``overlap_by_step``: per rank, its steps' distributions; the run's worst steps by exposed communication."""

    per_rank: list[OverlapSteps]
    worst: list[WorstStep]


class BreakdownSteps(Row):
    """A rank's ``breakdown_by_step`` rows (detail table), summarised."""

    rank: Rank
    steps: Annotated[int, Meta(description="rows in the detail table")]
    span_us: Distribution
    idle_pct: Distribution
    basis: StepBasis = None


class BreakdownStepSummary(Row):
    """``breakdown_by_step``: per rank, its steps' distributions; the run's worst steps by idle share."""

    per_rank: list[BreakdownSteps]
    worst: list[WorstStep]


class IdleSteps(Row):
    """A rank's ``idle_by_step`` rows (detail table) of one cause, every stream of a step added, summarised."""

    rank: Rank
    category: Annotated[Literal["host_wait", "kernel_wait", "other"], Meta(description="what the stream waited for")]
    steps: Annotated[int, Meta(description="rows in the detail table")]
    idle_us: Distribution
    basis: StepBasis = None


class IdleStepSummary(Row):
    """``idle_by_step``: per rank and cause, its steps' distribution; the run's worst (rank, cause, step)."""

    per_rank: list[IdleSteps]
    worst: list[WorstIdleStep]


class BubbleSteps(Row):
    """A rank's ``bubbles`` rows (detail table), summarised."""

    rank: Rank
    steps: Annotated[int, Meta(description="rows in the detail table")]
    bubble_us: Distribution
    bubble_pct: Distribution
    basis: StepBasis = None


class BubbleStepSummary(Row):
    """``bubbles``: per rank, its steps' distributions; the run's worst steps by the share without compute."""

    per_rank: list[BubbleSteps]
    worst: list[WorstStep]


class StepTimeSteps(Row):
    """A rank's ``step_times`` rows (detail table), summarised."""

    rank: Rank
    steps: Annotated[int, Meta(description="rows in the detail table")]
    step_us: Distribution


class StepTimeSummary(Row):
    """``step_times``: per rank, its steps' distribution; the run's slowest steps."""

    per_rank: list[StepTimeSteps]
    worst: list[WorstStep]


class KernelSteps(Row):
    """A top kernel's ``kernels_by_step`` rows (detail table), summarised."""

    name: Annotated[str, Meta(description="kernel name")]
    kind: Annotated[str, Meta(description="compute, comm or memory")]
    steps: Annotated[int, Meta(description="rows in the detail table")]
    total_us: Distribution


class KernelStepSummary(Row):
    """``kernels_by_step``: per top kernel, its steps' distribution; the steps where a kernel took longest."""

    per_kernel: list[KernelSteps]
    worst: list[WorstKernelStep]


class CollectiveOp(Row):
    """The instances of one op and message size (``collectives`` detail table), summarised."""

    op: Annotated[str, Meta(description="collective op")]
    bytes: Annotated[int | None, Meta(description="message size")]
    count: Annotated[int, Meta(description="instances")]
    arrival_skew_us: Distribution
    duration_us: Distribution
    busbw_gbps: Distribution


class Collectives(Row):
    """Every collective instance matched across ranks is a row of the ``collectives`` detail table; here,
    their count, per op and size their distributions, and the instances with the largest arrival skew."""

    instances: Annotated[int, Meta(description="rows in the detail table")]
    by_op: list[CollectiveOp]
    worst: Annotated[list[CollectiveRow], Meta(description="largest arrival skew first (ties: earlier first)")]


T = TypeVar("T")


def version_of(report: dict[str, Any]) -> int:
    """The contract version a decoded report follows: its ``report_version``, 1 when it has none."""
    version = report.get("report_version", 1)
    return version if isinstance(version, int) and not isinstance(version, bool) else 1


def parse(report: Any, record: type[T]) -> T:
    """A report (or one of its sections) as ``record``, validated: a wrong or missing field raises
    :class:`msgspec.ValidationError` naming its path. The whole report's record is assembled from the
    sections' declarations: :func:`ddprof.analyses.sections.parse`."""
    return msgspec.convert(dict(report) if isinstance(report, dict) else report, record)


def field_of(section: dict[str, Any], record: type[Row], name: str) -> Any:
    """One field of a section as ``record`` declares it: its value converted to the declared type (validated),
    or its declared default where the section lacks it. For a reader of one field of a section that may be
    given in part (a report being built, a test's report); a name ``record`` does not declare is a KeyError."""
    info = {f.name: f for f in msgspec.structs.fields(record)}[name]
    if name in section:
        return msgspec.convert(section[name], info.type)
    if info.required:
        raise msgspec.ValidationError(f"Object missing required field `{name}` of {record.__name__}")
    return info.default if info.default is not msgspec.NODEFAULT else info.default_factory()


def rows(items: list[dict[str, Any]], record: type[T]) -> list[T]:
    """One section's rows as ``record`` instances (validated)."""
    return msgspec.convert(items, list[record])  # type: ignore[valid-type]


def schema_of(report: type[Row], table_rows: dict[str, type[Row]], source: str) -> dict[str, Any]:
    """The JSON Schema of the report's record ``report``; the rows of each detail table (a Parquet file
    beside the report) are declared under ``$defs`` too (``table_rows``: name -> record). ``source``: where
    the record is assembled, named in the description."""
    (top, *_), defs = msgspec.json.schema_components((report, *table_rows.values()))
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "title": "ddprof report",
            "description": f"ddprof analyze --format json, report_version {REPORT_VERSION} ({source}); "
                           "detail tables NAME.parquet beside it: " + ", ".join(
                               f"{name} ({record.__name__})" for name, record in table_rows.items()),
            **top, "$defs": defs}


# --- the whole job, from its step measures (analyses/job.py) ---------------------------------------------------

class JobEpisode(Row):
    """A stretch of steps at which a rank was slow (the live view's rule, replayed over the job)."""

    rank: Annotated[int, Meta(description="the slow rank")]
    first_step: Annotated[int, Meta(description="its first slow step")]
    last_step: Annotated[int, Meta(description="its last slow step")]
    steps: Annotated[int, Meta(description="steps from its first to its last slow step")]
    named_step: Annotated[int, Meta(description="the step at which the rule named it")]
    excess_ms: Annotated[float, Meta(description="its own time over the other ranks' median, ms (median)")]
    traced: Annotated[bool, Meta(description="whether the traced steps overlap it")]


class JobPoint(Row):
    """Consecutive steps of the job, one point of the timeline."""

    first_step: Annotated[int, Meta(description="the bucket's first step")]
    last_step: Annotated[int, Meta(description="its last step")]
    median_ms: Annotated[float, Meta(description="the median step time over its steps, ms")]
    max_ms: Annotated[float, Meta(description="its longest step time, ms")]


class JobRankCpu(Row):
    """Where a rank's CPU went in the traced steps (every step where none was traced), from its step measures:
    medians over the steps of its training thread's own CPU time, of the time that thread was ready to run
    but waited for a CPU (the scheduler's run-queue delay), and of its process's other threads' CPU time."""

    rank: Annotated[int, Meta(description="the rank")]
    steps: Annotated[int, Meta(description="steps with these figures")]
    step_ms: Annotated[float, Meta(description="median step time of the rank (wall), ms")]
    thread_cpu_ms: Annotated[float, Meta(description="its training thread's CPU time a step, ms (median)")]
    wait_ms: Annotated[float, Meta(description="the time its training thread waited for a CPU a step, ms (median)")]
    other_threads_ms: Annotated[float, Meta(description="its process's other threads' CPU time a step, ms (median)")]
    wait_peaks: Annotated[list[tuple[int, float]], Meta(
        description="its steps of the longest waits for a CPU, [step, ms], the longest first (a few: what tells a "
                    "pause that was the machine's)")] = []


class Job(Row):
    """The whole job from its step measures (every step, not only the traced ones)."""

    measured: Annotated[bool, Meta(description="whether the run dir holds step measures of 2 ranks or more")] = False
    ranks: Annotated[int, Meta(description="ranks with measures")] = 0
    steps: Annotated[int, Meta(description="steps every rank measured")] = 0
    first_step: Annotated[int | None, Meta(description="the first of them")] = None
    last_step: Annotated[int | None, Meta(description="the last of them")] = None
    step_ms: Annotated[float | None, Meta(description="median step time over the job, ms")] = None
    step_ms_p90: Annotated[float | None, Meta(description="90th percentile step time, ms")] = None
    traced_first: Annotated[int | None, Meta(description="the first traced step")] = None
    traced_last: Annotated[int | None, Meta(description="the last traced step")] = None
    traced_step_ms: Annotated[float | None, Meta(description="median step time over the traced steps, ms")] = None
    episodes: Annotated[list[JobEpisode], Meta(description="the longest slow stretches, in step order")] = []
    episodes_total: Annotated[int, Meta(description="slow stretches found in all")] = 0
    timeline: Annotated[list[JobPoint], Meta(description="step time in at most 200 buckets of steps")] = []
    cpu: Annotated[list[JobRankCpu], Meta(description="per rank, where its CPU went in the traced steps, where the "
                                                      "collector measured it")] = []


if __name__ == "__main__":  # the schema's generator moved where the report's record is assembled
    import sys

    sys.exit("the report's schema is assembled from the sections' declarations: "
             "python -m ddprof.analyses.sections [PATH]")

