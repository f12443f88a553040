"""Generated training runs with known answers: Kineto JSON as PyTorch 2.x writes it, and the truth.

>>> from ddprof.synth import Spec, generate
>>> truth = generate(Spec(ranks=8, steps=4, kernels=60), "out/")   # doctest: +SKIP

:mod:`.spec` (what to generate), :mod:`.schedule` (the timeline: every rank's GPU work in blocks of
kernels and the collectives that bind ranks together), :mod:`.kineto` (the trace files),
:mod:`.truth` (the true metrics, computed from the timeline) and :mod:`.write` (all of it on disk).

Smaller runs placed event by event, whose answers follow from their parameters by hand:
:mod:`.scenarios` (:class:`DataParallel` with a slow rank, delays or jitter, on GPU or CPU;
:class:`Pipeline`; :class:`CollectiveBench`; :class:`MoE`: all-to-all with uneven routing) and :mod:`.noisy` (:class:`NoisyDP`,
:class:`NoisyPipeline`: runs that differ by noise only, for ``ddprof check``) and :mod:`.faults`
(:class:`FaultyDP`: one rank with a fault of known cause, for the straggler's cause). Each has ``events()``,
``kineto()`` and (but the noisy ones) ``truth()``; :func:`ingest_generated` makes one a run dir.

>>> run = ingest_generated(DataParallel(ranks=4, slow_rank=2), Path("out"))   # doctest: +SKIP
"""

from ddprof.synth.faults import FaultyDP
from ddprof.synth.kineto import to_kineto
from ddprof.synth.noisy import NoisyDP, NoisyPipeline
from ddprof.synth.scenarios import US, CollectiveBench, DataParallel, MoE, Pipeline
from ddprof.synth.spec import Spec
from ddprof.synth.write import generate, ingest_generated, write_kineto, write_meta, write_traces

__all__ = ["US", "CollectiveBench", "DataParallel", "FaultyDP", "MoE", "NoisyDP", "NoisyPipeline", "Pipeline", "Spec", "generate",
           "ingest_generated", "to_kineto", "write_kineto", "write_meta", "write_traces"]
