"""Hang diagnosis from NCCL Flight Recorder dumps (docs/DESIGN.md §3 "Hang diagnosis", §4 ``hang``):
:func:`.diagnose.diagnose` turns the dumps of one job (:mod:`ddprof.readers.flightrec`) into the report's
``hang`` section."""
