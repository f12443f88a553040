"""The Flight Recorder reader's old import path: the reader is :mod:`ddprof.readers.flightrec`.

The hang analysis (``analyses/hang``), the report and the dashboard import the dump set and records from
here (:mod:`.load`: ``DumpSet``; :mod:`.records`: ``FRDump``, ``FREntry``); new code imports them from
:mod:`ddprof.readers.flightrec`.
"""
