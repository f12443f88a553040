"""What one dashboard serves: the run it was started on (or Flight Recorder dumps alone), its timeline
data, and its report. The timeline is loaded before the first view; the report (every analysis, slower on
a large run) is built on a thread meanwhile and the panels appear when it is ready."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ddprof.analyses.report import build_report
from ddprof.dashboards.timeline.data import TimelineData, load

from ddprof.readers.flightrec.load import DumpSet
from ddprof.store.rundir import Run


@dataclass
class DashboardState:
    run: Run | None
    dumps: DumpSet | None
    title: str
    data: TimelineData | None = None
    report: dict[str, Any] | None = None
    error: str | None = None
    _done: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def open(cls, run: Run | None, dumps: DumpSet | None, title: str, *, background: bool = True) -> DashboardState:
        """Load the timeline now and build the report on a thread (``background``) or now."""
        state = cls(run=run, dumps=dumps, title=title)
        state.data = load(run) if run is not None and run.ranks else None
        if background:
            threading.Thread(target=state._build, name="ddprof-report", daemon=True).start()
        else:
            state._build()
        return state

    def _build(self) -> None:
        try:
            self.report = build_report(self.run, dumps=self.dumps)
        except Exception as exc:  # shown in the page's header; the timeline stays usable
            self.error = f"the report could not be built: {exc}"
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the report is built (or failed)."""
        return self._done.wait(timeout)

    @property
    def ready(self) -> bool:
        return self._done.is_set()
