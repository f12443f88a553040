"""The report's panels, declared once: each is an id, a figure function (a report in, a plotly Figure out) and
what a click on it names. The Dash app (:mod:`.app.layout`, :mod:`.app.callbacks`) and the self-contained HTML
report (:mod:`.html_report`) both draw every panel of :data:`PANELS`, in its order, so a new panel is one
figure function under :mod:`.figures` and one line here.

``click``: ``"rank"`` when a point's ``customdata`` is a rank (the timeline focuses that rank), ``"step"``
when it is a step (the timeline shows that step), ``"instance"`` when it is a collective instance's position
in the report (the timeline shows that instance and the instance panel draws it), None when a click names
nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import plotly.graph_objects as go
from ddprof.dashboards.figures.alltoall import alltoall_figure
from ddprof.dashboards.figures.collectives import (
    bandwidth_figure,
    instance_figure,
    pipeline_figure,
    skew_figure,
)
from ddprof.dashboards.figures.critical import critical_path_figure
from ddprof.dashboards.figures.hang import hang_figure
from ddprof.dashboards.figures.job import job_figure
from ddprof.dashboards.figures.ranks import (
    breakdown_figure,
    overlap_figure,
    step_time_figure,
    stragglers_figure,
)


@dataclass(frozen=True)
class Panel:
    id: str
    figure: Callable[[dict[str, Any]], go.Figure]
    click: Literal["rank", "step", "instance"] | None = None


PANELS: tuple[Panel, ...] = (
    Panel("breakdown", breakdown_figure, click="rank"),
    Panel("overlap", overlap_figure, click="rank"),
    Panel("stragglers", stragglers_figure, click="rank"),
    Panel("critical_path", critical_path_figure, click="rank"),
    Panel("steps", step_time_figure, click="step"),
    Panel("job", job_figure),
    Panel("skew", skew_figure, click="instance"),
    Panel("instance", instance_figure, click="rank"),
    Panel("bandwidth", bandwidth_figure),
    Panel("alltoall", alltoall_figure, click="rank"),
    Panel("pipeline", pipeline_figure, click="rank"),
    Panel("hang", hang_figure, click="rank"),
)


def panel_ids() -> tuple[str, ...]:
    """The panels' ids, in :data:`PANELS` order (read when a page is built, so a declaration is all it takes)."""
    return tuple(p.id for p in PANELS)


def panel_figures(report: dict[str, Any]) -> dict[str, go.Figure]:
    """Every panel's figure of ``report``, by id, in :data:`PANELS` order."""
    return {p.id: p.figure(report) for p in PANELS}


def clickable(kind: str) -> tuple[str, ...]:
    """The ids of the panels whose clicks name a ``kind`` (``"rank"``, ``"step"``, ``"instance"``)."""
    return tuple(p.id for p in PANELS if p.click == kind)
