"""A :class:`~.lod.View` drawn as a plotly figure: rows top to bottom, time in ms since the run's start.

Bins mode draws one image: a pixel per row and bin whose colour mixes the class colours by their share of
the bin, the rest (idle) light grey. Shares are busy ns / bin ns per class, scaled down together when the
lanes of a rank add up to more than the bin. Example: a bin 50 % compute, 20 % comm -> 0.5·blue + 0.2·red
+ 0.3·grey. Up to :data:`PNG_ABOVE` pixels each one says its row, time and class shares on hover; a larger
image travels as a PNG, with its row and time on hover. Events mode draws each event as a bar, one trace per class, with its name, duration, step and
collective metadata on hover. Steps are dashed lines labelled at the top; the focused rank is boxed. A
rank that failed to ingest is a hatched red row, its label red, its error on hover.
``layout.meta`` carries the view's mode and shape counts (the browser tests read them).
"""

from __future__ import annotations

import base64
import struct
import textwrap
import zlib
from typing import Any

import numpy as np
import plotly.graph_objects as go
from ddprof.dashboards.timeline.data import CLASSES
from ddprof.dashboards.timeline.lod import View, to_json


def rgb_css(c: tuple[int, int, int]) -> str:
    return f"rgb({c[0]},{c[1]},{c[2]})"


COLOURS = {"compute": (76, 120, 168), "comm": (228, 87, 86), "memcpy": (84, 162, 75), "other": (178, 121, 162)}
IDLE = (238, 238, 238)
#: Above this many pixels the image travels as a PNG (a few bytes a pixel) instead of a JSON array with a
#: hover text per pixel: ~10 µs and ~150 bytes a pixel, so 57,000 pixels (1,024 ranks × 56 cells) took
#: 0.6 s and 8 MB; 20,000 keep a callback near 0.2 s.
PNG_ABOVE = 20_000
MS = 1e6


def _rgb(busy: np.ndarray, bin_ns: float) -> np.ndarray:
    share = busy.astype(np.float32) / np.float32(bin_ns)  # rows, classes, bins
    total = share.sum(axis=1)
    scale = 1 / np.maximum(total, 1)  # lanes adding up to more than the bin: scaled down together
    colours = np.array([COLOURS[c] for c in CLASSES], dtype=np.float32)  # classes, 3
    rgb = np.einsum("rcb,ck->rbk", share, colours) * scale[:, :, None]
    rgb += (1 - total * scale)[:, :, None] * np.array(IDLE, dtype=np.float32)
    return np.clip(np.rint(rgb), 0, 255).astype(np.uint8)


def png_data_uri(rgb: np.ndarray) -> str:
    """An RGB array (rows, cols, 3) as a ``data:image/png;base64,`` URI (stdlib zlib, no imaging library)."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _bins_traces(v: View) -> list[Any]:
    assert v.busy is not None
    rgb = _rgb(v.busy, v.bin_ns)
    x0, dx = (v.bin_t0 + v.bin_ns / 2) / MS, v.bin_ns / MS
    rows, bins = rgb.shape[:2]
    if rows * bins > PNG_ABOVE:
        return [go.Image(source=png_data_uri(rgb), x0=x0, dx=dx, y0=0, dy=1, hoverinfo="x+y", name="occupancy")]
    share = 100 * v.busy / v.bin_ns
    text = [[f"{v.rows[r].label.strip()}<br>{(v.bin_t0 + b * v.bin_ns) / MS:.3f} ms +{dx:.3g} ms<br>"
             + "<br>".join(f"{c} {share[r, i, b]:.0f} %" for i, c in enumerate(CLASSES) if share[r, i, b] >= 0.5)
             for b in range(bins)] for r in range(rows)]
    return [go.Image(z=rgb, x0=x0, dx=dx, y0=0, dy=1, hovertext=text, hoverinfo="text", name="occupancy")]


def _fmt_detail(d: dict[str, Any], dur_ns: float) -> str:
    parts = [str(d.get("name", ""))[:90], f"{dur_ns / 1e3:.1f} µs"]
    if d.get("step") is not None:
        parts.append(f"step {d['step']}")
    if d.get("coll_op"):
        meta = [d["coll_op"]]
        meta += [f"{d['bytes']:,} B"] if d.get("bytes") is not None else []
        meta += [f"pg {d['pg']}"] if d.get("pg") is not None else []
        meta += [f"peer {d['peer']}"] if d.get("peer") is not None else []
        parts.append(" · ".join(str(m) for m in meta))
    return "<br>".join(parts)


def _event_traces(v: View) -> list[Any]:
    assert v.events is not None
    ev = v.events
    traces = []
    has_detail = len(ev["detail"]) == ev["row"].size
    for i, cls in enumerate(CLASSES):
        sel = np.flatnonzero(ev["cls"] == i)
        dur = ev["end"][sel] - ev["start"][sel]
        text = [_fmt_detail(ev["detail"][j], float(d)) for j, d in zip(sel.tolist(), dur.tolist())] if has_detail \
            else [f"{d / 1e3:.1f} µs" for d in dur.tolist()]
        traces.append(go.Bar(orientation="h", y=ev["row"][sel], base=ev["start"][sel] / MS, x=dur / MS,
                             width=0.8, name=cls, marker={"color": rgb_css(COLOURS[cls]), "line": {"width": 0}},
                             hovertext=text, hoverinfo="text", showlegend=True))
    return traces


FAILED = (198, 40, 40)


def _failed_traces(v: View) -> list[Any]:
    rows = [(i, r) for i, r in enumerate(v.rows) if r.failed is not None]
    if not rows:
        return []
    return [go.Bar(orientation="h", y=[i for i, _ in rows], base=[v.t0 / MS] * len(rows),
                   x=[(v.t1 - v.t0) / MS] * len(rows), width=0.8, name="failed rank",
                   marker={"color": "rgba(198,40,40,0.18)", "line": {"width": 1, "color": rgb_css(FAILED)},
                           "pattern": {"shape": "/", "fgcolor": rgb_css(FAILED), "size": 8}},
                   hovertext=[f"{r.label}: failed to ingest<br>{_wrap(r.failed or '')}" for _, r in rows],
                   hoverinfo="text", showlegend=True)]


def _wrap(text: str, width: int = 100) -> str:
    return "<br>".join(textwrap.wrap(text[:600], width, break_long_words=True))


def timeline_figure(v: View, *, focus: int | None = None, title: str | None = None) -> go.Figure:
    """The view as a figure (module doc). ``focus``: a rank to box."""
    fig = go.Figure([*(_bins_traces(v) if v.mode == "bins" else _event_traces(v)), *_failed_traces(v)])
    if v.mode == "bins":  # a legend for the image's colours
        for name, colour in [*COLOURS.items(), ("idle", IDLE)]:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                     marker={"color": rgb_css(colour), "size": 10, "symbol": "square"}))
    n = len(v.rows)
    every = max(1, n // 48)
    ticks = [i for i in range(n) if i % every == 0 or v.rows[i].lane is not None]
    shapes: list[dict[str, Any]] = []
    for step, t in v.steps or []:
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": t / MS, "x1": t / MS, "y0": 0, "y1": 1,
                       "line": {"color": "#555", "width": 1, "dash": "dot"}})
        fig.add_annotation(x=t / MS, y=1, yref="paper", text=f"step {step}", showarrow=False, yanchor="bottom",
                           font={"size": 10, "color": "#555"})
    if n <= 128:
        shapes += [{"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": i + 0.5, "y1": i + 0.5,
                    "line": {"color": "white", "width": 2}} for i in range(n - 1)]
    if focus is not None:
        rows = [i for i, r in enumerate(v.rows) if r.rank == focus]
        if rows:
            shapes.append({"type": "rect", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": min(rows) - 0.5,
                           "y1": max(rows) + 0.5, "line": {"color": "#111", "width": 2}})
    fig.update_layout(
        title=title, shapes=shapes, barmode="overlay", bargap=0, plot_bgcolor=rgb_css(IDLE) if v.mode ==
        "events" else "white", height=int(min(900, max(260, 22 * n + 110))), margin={"l": 90, "r": 20, "t": 40, "b": 40},
        legend={"orientation": "h", "y": -0.08, "x": 0}, uirevision="timeline", hovermode="closest",
        meta={"ddprof": to_json(v)}, dragmode="zoom")
    fig.update_xaxes(title="time since the run's first event (ms)", range=[v.t0 / MS, v.t1 / MS], showgrid=False,
                     zeroline=False)
    ticks = sorted({*ticks, *(i for i, r in enumerate(v.rows) if r.failed is not None)})
    labels = [v.rows[i].label if v.rows[i].failed is None else f"<span style='color:{rgb_css(FAILED)}'>"
              f"{v.rows[i].label}</span>" for i in ticks]
    fig.update_yaxes(tickvals=ticks, ticktext=labels, range=[n - 0.5, -0.5],
                     showgrid=False, zeroline=False, fixedrange=True,
                     scaleanchor=False)  # an image would otherwise force square pixels
    return fig
