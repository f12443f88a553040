"""Exports of a run's events to other tools' formats: :mod:`.perfetto` (Chrome trace / Perfetto JSON)."""
