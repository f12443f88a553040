"""How ddprof runs its work: where per-rank work runs, in this process or on a Ray cluster
(:mod:`.executors`), and how memory is held (:mod:`.memory`: one allocator arena, the cyclic collector
paused while frames are built)."""
