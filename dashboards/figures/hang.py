"""Flight Recorder hang panels from the report's ``hang`` section: the per-group table (plain rows) and a
grid of each stuck collective's ranks by state, the ranks the hang started at marked."""

from __future__ import annotations

from typing import Any

import msgspec
import plotly.graph_objects as go
from ddprof.dashboards.figures.style import STRAGGLER, empty, finish

from ddprof.report.schema import Hang


def _hang(report: dict[str, Any]) -> Hang:
    """The report's ``hang`` section as its record (``{collectives: []}`` without dumps)."""
    return msgspec.convert(report.get("hang") or {}, Hang)


STATE_COLOURS = {"not_entered": STRAGGLER, "scheduled": "#F2B447", "started": "#F58518", "completed": "#54A24B"}


def hang_rows(report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per process group with a stuck collective: group, op and index, and its ranks by state."""
    out = []
    for c in _hang(report).collectives:
        out.append({"pg": f"{c.pg}" + (f" ({c.pg_desc})" if c.pg_desc else ""),
                    "collective": f"{c.op_name or c.op} #{c.index}",
                    "status": c.status,
                    "missing": ", ".join(map(str, c.missing_ranks)),
                    "not completed": ", ".join(map(str, c.not_completed_ranks)),
                    "group ranks": ", ".join(map(str, c.pg_ranks))})
    return out


def hang_figure(report: dict[str, Any], limit: int = 40) -> go.Figure:
    """Each stuck collective (y) by rank (x), coloured by the rank's state in it; the suspect ranks (where
    the hang started) get a red column band. At most ``limit`` groups."""
    hang = _hang(report)
    colls = hang.collectives[:limit]
    if not colls:
        return empty("Hang", "no hang: nothing recorded in the dumps is left unfinished")
    fig = go.Figure()
    labels = [f"pg {c.pg} {c.op} #{c.index}" for c in colls]
    for state, colour in STATE_COLOURS.items():
        xs, ys = [], []
        for c, label in zip(colls, labels):
            for pr in c.per_rank:
                if pr.state == state:
                    xs.append(pr.rank)
                    ys.append(label)
        if xs:
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="markers", name=state.replace("_", " "),
                                     marker={"color": colour, "size": 11, "symbol": "square"},
                                     customdata=[[x] for x in xs],
                                     hovertemplate="rank %{x}: " + state.replace("_", " ") + "<br>%{y}<extra></extra>"))
    suspects = hang.suspect_ranks
    for r in suspects:
        fig.add_vrect(x0=r - 0.5, x1=r + 0.5, fillcolor=STRAGGLER, opacity=0.12, line_width=0)
    ranks = hang.ranks
    fig.update_xaxes(title="rank", tickvals=ranks if len(ranks) <= 64 else None, range=[-0.5, max(ranks + [0]) + 0.5])
    fig.update_yaxes(type="category", autorange="reversed")
    title = "Hang started at " + (", ".join(f"rank {r}" for r in suspects) if suspects else "no single rank")
    return finish(fig, title, height=max(280, 18 * len(colls) + 140))
