"""The live view's heat map: ranks × steps of a running job, from its step measures (``ddprof dashboard RUN
--live``). A plain function: a frame of step records in (:meth:`ddprof.store.step_measures.MeasureTail.frame`),
a plotly Figure out."""

from __future__ import annotations

import plotly.graph_objects as go
import polars as pl
from ddprof.dashboards.figures.style import empty, finish

#: What a cell can show: the column of the step records, or own time (the step minus its collectives).
MEASURES = {"own_ms": "own time (ms): the step minus its collectives", "wall_ms": "step time (ms)",
            "coll_ms": "time in collectives (ms)", "data_ms": "data-loader wait (ms)",
            "wait_ms": "CPU wait (ms): the training thread ready to run, waiting for a CPU"}


def heatmap_figure(frame: pl.DataFrame, measure: str = "own_ms") -> go.Figure:
    """One row per rank, one column per step, the cell the rank's ``measure`` at that step (a slow rank is a
    bright row from the step it slowed down; the others' collectives darken where they wait for it)."""
    title = f"Ranks × steps: {MEASURES.get(measure, measure)}"
    if not frame.height:
        return empty(title, "no step measured yet")
    values = (pl.col("wall_ms") - pl.col("coll_ms").fill_null(0.0)) if measure == "own_ms" else pl.col(measure)
    grid = (frame.select("rank", "step", values.alias("v")).unique(["rank", "step"], keep="last")
            .pivot(on="step", index="rank", values="v", sort_columns=True).sort("rank"))
    steps = [int(c) for c in grid.columns[1:]]
    ranks = grid.get_column("rank").to_list()
    z = grid.drop("rank").to_numpy()
    fig = go.Figure(go.Heatmap(z=z, x=steps, y=ranks, colorscale="Viridis", colorbar={"title": "ms"},
                               hovertemplate="rank %{y}, step %{x}: %{z:.2f} ms<extra></extra>"))
    fig.update_yaxes(title="rank", tickmode="array" if len(ranks) <= 32 else "auto",
                     tickvals=ranks if len(ranks) <= 32 else None, autorange="reversed")
    fig.update_xaxes(title="step")
    return finish(fig, title)
