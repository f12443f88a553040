"""Kineto event categories: every generation's spelling, the one ddprof stores, and the ``kind`` it gives.

PyTorch 1.8-1.10 wrote categories with capitals and other words (``Kernel``, ``Runtime``, ``Operator``,
``Memcpy``, ``Memset``, ``Python``, ``User Annotation``); later profilers write ``kernel``,
``cuda_runtime``, ``cpu_op``, ``gpu_memcpy``... A category is matched case-insensitively, with spaces
and dashes read as underscores, and the historical names mapped (:func:`canonical`); the store keeps
the modern spelling, so every later stage knows one vocabulary. A category no generation uses is kept
as written (it becomes kind ``other`` and is counted in the warnings).

>>> canonical("Kernel"), canonical("Runtime"), canonical("User Annotation"), canonical("my_cat")
('kernel', 'cuda_runtime', 'user_annotation', 'my_cat')
"""

from __future__ import annotations

#: Categories on a GPU track (their ``stream`` and ``device`` come from the event).
GPU_CATS = ["kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "gpu_user_annotation"]
#: The kind of the categories that have one; every other category is ``other``.
CAT_KIND = {"kernel": "compute", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync",
            "cpu_op": "cpu_op", "user_annotation": "annotation", "gpu_user_annotation": "annotation",
            "cuda_runtime": "runtime", "cuda_driver": "runtime"}
#: Categories ddprof knows (no warning), with or without a kind.
KNOWN_CATS = [*CAT_KIND, "python_function", "Trace", "overhead", "ac2g", "fwdbwd", "cpu_instant_event",
              "gpu_memory", "memory"]

#: Spellings of older generations (lower-cased, spaces as underscores) -> the modern name.
_HISTORICAL = {
    "runtime": "cuda_runtime", "driver": "cuda_driver", "operator": "cpu_op", "memcpy": "gpu_memcpy",
    "memset": "gpu_memset", "python": "python_function", "python_function": "python_function",
    "trace": "Trace", "sync": "cuda_sync", "cpu_instant_event": "cpu_instant_event",
}
_MODERN = {c.lower(): c for c in KNOWN_CATS}


def canonical(cat: str | None) -> str | None:
    """The modern spelling of a category (module doc); an unknown one unchanged, None stays None."""
    if cat is None:
        return None
    key = cat.strip().lower().replace(" ", "_").replace("-", "_")
    return _HISTORICAL.get(key) or _MODERN.get(key) or cat
