"""Accelerators that are not GPUs, by the words their traces use.

Kineto's plug-ins for other accelerators record the device's activity under categories of their own,
which no GPU analysis of ddprof reads: Meta's MTIA writes its device work as ``mtia_ccp_events`` (DMA
requests, processing-element runs, event records and waits) and its runtime calls as ``mtia_runtime``.
Ingest keeps such events as kind ``other`` and counts them per rank (the manifest's
``accelerator_events``); the health section says the accelerator was not analysed.

>>> accelerator_of("mtia_ccp_events"), accelerator_of("kernel")
('MTIA', None)
"""

from __future__ import annotations

import re
from typing import Final

#: Category patterns of an accelerator's own activity -> the accelerator's name.
ACCELERATOR_CATEGORIES: Final = {r"^mtia_": "MTIA"}
#: Any of them, as one pattern (for Polars' ``str.contains``).
ACCELERATOR_CAT_PATTERN: Final = "|".join(f"(?:{p})" for p in ACCELERATOR_CATEGORIES)


def accelerator_of(cat: str) -> str | None:
    """The accelerator whose own category ``cat`` is, or None."""
    return next((name for p, name in ACCELERATOR_CATEGORIES.items() if re.search(p, cat)), None)
