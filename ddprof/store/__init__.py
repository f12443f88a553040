"""The store and the run dir: the event table's schema (:mod:`.schema`), the run dir and its reader
(:mod:`.rundir`), atomic writes (:mod:`.atomic`), and the other files a run dir holds: the collectors' meta
sidecars (:mod:`.sidecar`) and status files (:mod:`.capture_status`), each rank's profiling windows
(:mod:`.windows`) and the dashboard's timeline summaries (:mod:`.timeline_summary`). Importing this package
loads nothing (the collectors read the sidecar format from here without loading Polars)."""
