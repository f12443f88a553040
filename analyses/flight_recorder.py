"""Safe reader for PyTorch NCCL Flight Recorder (FR) dumps: the public loading API.

A dump is what ``ProcessGroupNCCL`` writes on a timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``): one file per rank,
named ``<prefix><rank>`` (``_dump_12``), holding a pickled dict (or JSON, from ``_dump_nccl_trace_json``)::

    {"version": "2.9",
     "pg_config": {"74": {"name": "74", "desc": "EXPERT_MODEL_PARALLEL_GROUP", "ranks": "[12, 13, 14, 15]"}, ...},
     "pg_status": {"11": {"last_enqueued_collective": 20536, "last_completed_collective": 20529, ...}, ...},
     "entries": [{"record_id": 90084, "pg_id": 11, "process_group": ("74", "EXPERT_MODEL_PARALLEL_GROUP"),
                  "collective_seq_id": 20530, "p2p_seq_id": 0, "is_p2p": False, "op_id": 20530,
                  "profiling_name": "nccl:all_to_all", "state": "scheduled", "time_created_ns": ...,
                  "input_sizes": [[4096, 5120]], "input_dtypes": ["BFloat16"], ...}, ...],
     "nccl_version": "2.27.3"}

Things about the format that are easy to get wrong (seen in real 2.9 dumps):

- There is no rank field. The rank comes from the content when the content pins it, else from the file
  name's trailing number; a file whose content and name disagree is refused, and there is no default
  (:mod:`~ddprof.analyses.fr_dump`).
- ``pg_config`` is keyed by the group *name* (a counter shared by all ranks); ``pg_status`` is keyed by the
  local ``pg_id`` (a per-process counter). Entries carry both, which anchors the mapping; for groups without
  entries both counters grow in creation order, so the sorted names map onto the sorted ids.
- ``pg_status`` counts collectives and point-to-point work in one field: ``last_enqueued_collective`` is the
  sequence number of the last enqueued work of *either* kind (``collective_seq_id`` or ``p2p_seq_id``).
- ``ranks`` in ``pg_config`` is a string (``"[12, 13]"``); send/recv names use group-local ranks
  (``nccl:send 3->0``).

Loading never imports anything (:mod:`~ddprof.analyses.fr_unpickle`). The code lives in ``fr_records``
(the records), ``fr_unpickle`` (file -> plain objects), ``fr_dump`` (plain objects -> one rank's dump) and
``fr_load`` (a directory of dumps); this module re-exports their public names.
"""

from __future__ import annotations

from ddprof.analyses.fr_dump import (
    SUPPORTED_MAJOR,
    map_status_to_names,
    parse_dump,
    rank_from_filename,
    resolve_rank,
)
from ddprof.analyses.fr_load import (
    SKIPPED_SUFFIXES,
    DumpSet,
    is_flight_recorder_dir,
    load_dump,
    load_dump_dir,
)
from ddprof.analyses.fr_records import FRDump, FREntry, PGStatus
from ddprof.analyses.fr_unpickle import SafeUnpickler, read_dump_object

__all__ = [
    "FREntry",
    "FRDump",
    "PGStatus",
    "DumpSet",
    "SafeUnpickler",
    "read_dump_object",
    "parse_dump",
    "load_dump",
    "load_dump_dir",
    "is_flight_recorder_dir",
    "rank_from_filename",
    "resolve_rank",
    "map_status_to_names",
    "SKIPPED_SUFFIXES",
    "SUPPORTED_MAJOR",
]
