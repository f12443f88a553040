"""Generated training runs with known answers: Kineto JSON as PyTorch 2.x writes it, and the truth.

>>> from ddprof.synth import Spec, generate
>>> truth = generate(Spec(ranks=8, steps=4, kernels=60), "out/")   # doctest: +SKIP

:mod:`.spec` (what to generate), :mod:`.schedule` (the timeline: every rank's GPU work in blocks of
kernels and the collectives that bind ranks together), :mod:`.kineto` (the trace files),
:mod:`.truth` (the true metrics, computed from the timeline) and :mod:`.write` (all of it on disk).
"""

from ddprof.synth.spec import Spec
from ddprof.synth.write import generate

__all__ = ["Spec", "generate"]
