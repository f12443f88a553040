"""The Dash app over one run: :mod:`.state` (the run, its timeline data and its report, built once),
:mod:`.layout` (the page), :mod:`.callbacks` (zoom, clicks, the report's arrival) and :mod:`.server`
(create, bind safely, serve)."""
