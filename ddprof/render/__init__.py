"""Renderers: a report (or a comparison of two) in, text out. The terminal report (:mod:`.text`), the
check and diff outputs as text and JUnit XML (:mod:`.compare`), and the Perfetto trace export
(:mod:`.perfetto`). The self-contained HTML report draws the dashboard's panels, so it lives with them
(:mod:`ddprof.dashboards.html_report`); the JSON text is the store's own writer's
(:func:`ddprof.store.atomic.json_text`). Renderers may import the core and the analyses, never the CLI."""
