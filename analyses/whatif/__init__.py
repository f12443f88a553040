"""What-if analysis: a cross-rank dependency model of a run (:mod:`.model`), its replay (:mod:`.replay`),
a run in the store as its input (:mod:`.store`), edits to the recorded durations, delays and transfers
(:mod:`.edits`), their projections on a run (:mod:`.projections`, ``ddprof whatif``), the report's
``whatif`` section (:mod:`.section`), and the OSDI'25 straggler study's traces and metrics (:mod:`.osdi`)."""
