"""Input formats: one reader per format behind one small interface (:mod:`.base`), listed in :mod:`.registry`.

* :mod:`.kineto`: PyTorch profiler (Kineto) traces -> the store's event table;
* :mod:`.nsys`: Nsight Systems SQLite exports (``nsys export --type sqlite``), several ranks a file -> the
  store's event table;
* :mod:`.flightrec`: NCCL Flight Recorder dumps -> the hang diagnosis' records;
* :mod:`.steps`: the ``step`` of every row, shared by the event readers;
* :mod:`.unread`: formats recognised only to be refused by name (an Nsight Systems report, Perfetto, ...);
* :mod:`.read_ahead`: one large trace decoded in a child process while the program loads (``ddprof ingest``).

The ingest pipeline (:mod:`ddprof.ingestion`), the discovery of files and :mod:`ddprof.inputs.sources` know
formats only through :mod:`.registry`; nothing outside this package imports a reader's folder.
"""
