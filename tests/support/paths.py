"""Where the tests' inputs are: the repository, its bundled samples, and the real traces copied into
``tests/data/traces`` (each set with its licence; ``tests/data/traces/SOURCES.md`` says where from).
Nothing outside the repository is read."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TESTS = REPO / "tests"
SUPPORT = TESTS / "support"
SAMPLES = REPO / "sample_traces"
#: Real public traces and Flight Recorder dumps: ``hta/``, ``tracelens/``, ``nsys-h100-2gpu/``, ``flight-recorder/``,
#: ``kineto-1.8-era/``, ``kineto-tb-resnet50/`` (a loader-bound step and the same with loader workers), and
#: the OSDI'25 straggler study's operation tables ``osdi25/``.
TRACES = TESTS / "data" / "traces"
#: The bundled 8-rank DLRM traces (also the README's quick-start input).
DLRM = SAMPLES / "dlrm-8xV100-nccl"
FLIGHT_RECORDER = TRACES / "flight-recorder"
#: The OSDI'25 straggler study's three jobs (operation tables and the published answers).
OSDI25 = TRACES / "osdi25"
#: Run dirs of real captures (the collector's store and step measures, the raw traces left out): ``README.md`` there.
RUNS = TESTS / "data" / "runs"
#: Saved reports of clean gloo runs of one job, each a re-run of the others (``README.md`` there).
CLEAN_RERUNS = TESTS / "data" / "reports" / "gloo-clean-reruns"


def trace_set(name: str) -> Path:
    """A real trace set by name: a bundled sample (``dlrm-8xV100-nccl``) or a folder of ``tests/data/traces``
    (``hta/sendrecv-2-of-128``)."""
    for root in (SAMPLES, TRACES):
        if (root / name).exists():
            return root / name
    raise FileNotFoundError(f"no trace set {name!r} in {SAMPLES} or {TRACES}")
