"""What a user names, opened: raw traces (ingested into a cache, :mod:`.cache`), a run dir or Flight Recorder
dumps (:mod:`.sources`); opened and analysed into a report (:mod:`.analyze`: ``ddprof.analyze(path)``); a saved
report or a source to compare (:mod:`.reports`, for ``check`` and ``diff``). The file I/O in front of the
analyses, which are pure: the CLI, the pytest helper and the public face call it."""
