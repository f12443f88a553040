"""What-if analysis: a cross-rank dependency model of a run (:mod:`.model`), its replay (:mod:`.replay`),
edits to the recorded durations (:mod:`.edits`) and the OSDI'25 straggler study's traces and metrics
(:mod:`.osdi`)."""
