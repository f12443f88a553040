"""Reading PyTorch NCCL Flight Recorder (FR) dumps: an input format, like Kineto traces.

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
  (:func:`ddprof.readers.ranks.dump_rank`).
- ``pg_config`` is keyed by the group *name* (a counter shared by all ranks); ``pg_status`` is keyed by the
  local ``pg_id`` (a per-process counter). Entries carry both, which anchors the mapping; for groups without
  entries both counters grow in creation order, so the sorted names map onto the sorted ids.
- ``pg_status`` counts collectives and point-to-point work in one field: ``last_enqueued_collective`` is the
  sequence number of the last enqueued work of *either* kind (``collective_seq_id`` or ``p2p_seq_id``).
- ``ranks`` in ``pg_config`` is a string (``"[12, 13]"``); send/recv names use group-local ranks
  (``nccl:send 3->0``).

One module per idea: :mod:`.unpickle` (a file -> plain objects; loading never imports anything),
:mod:`.records` (the records: entries, group status, one rank's dump), :mod:`.dump` (the format versions:
plain objects -> one rank's dump) and :mod:`.load` (a directory or list of dump files -> a
:class:`~.load.DumpSet`, and the cheap check that a directory holds dumps).
"""
