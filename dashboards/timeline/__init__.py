"""Per-rank timelines at the level of detail that fits: :mod:`.data` loads what a timeline draws from the
store once, :mod:`.lod` answers a time window with occupancy bins or real events, :mod:`.figure` draws
the answer."""
