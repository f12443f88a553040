"""``ddprof dashboard RUN_OR_TRACES [--host 127.0.0.1] [--port 8050] [--open]``: serve the Dash app over one
run. Dash and plotly (the ``dash`` extra) are imported only here, when the command runs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from ddprof.cli.common import comm_kernel_option, parse_rank_map, rank_option, rules_in_force


@click.command()
@click.argument("sources", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind. Anything but loopback requires a token (printed in the URL).")
@click.option("--token", default=None, help="The token to require (default: a random one when --host is not loopback).")
@click.option("--no-token", is_flag=True, help="Serve without a token on a non-loopback address (a warning says "
              "that anyone who reaches it can read the run).")
@click.option("--port", default=8050, show_default=True, type=click.IntRange(0, 65535))
@click.option("--live", is_flag=True, help="A running job's step measures (SOURCES: its run dir), refreshed every "
              "second: the straggler, the ranks' table and a ranks × steps heat map.")
@click.option("--open", "open_browser", is_flag=True, help="Open the page in the default browser.")
@click.option("--cache", type=click.Path(file_okay=False), help="Where to keep the ingested store of raw traces.")
@rank_option
@comm_kernel_option
def dashboard(sources: tuple[str, ...], host: str, port: int, token: str | None, no_token: bool, live: bool,
              open_browser: bool,
              cache: str | None,
              ranks: tuple[str, ...], comm_kernels: tuple[str, ...] = ()) -> int:
    """Serve an interactive dashboard of a run: per-rank timelines and the report's panels."""
    from ddprof.dashboards.extra import require

    require("dash", "plotly")
    if token and no_token:
        raise click.UsageError("--token and --no-token: choose one")
    if live:
        return _serve_live(sources, host, port, token, no_token, open_browser)
    from ddprof.cli.progress import ingest_progress
    from ddprof.dashboards.app.server import create_app
    from ddprof.dashboards.app.state import DashboardState
    from ddprof.inputs.sources import open_source

    with open_source(sources, cache=cache, rank_map=parse_rank_map(ranks), progress=ingest_progress(True),
                     comm_kernels=rules_in_force(comm_kernels)) as src:
        title = " ".join(sources)
        state = DashboardState.open(src.run, src.dumps, title)
        return _serve(lambda required: create_app(state, required), f"dashboard of {title}", host, port, token,
                      no_token, open_browser)


def _serve(app_for: Callable[[str | None], Any], what: str, host: str, port: int, token: str | None, no_token: bool,
           open_browser: bool) -> int:
    """Serve the app ``app_for(required token)`` until Ctrl+C: the token rule, its warning, the URL said."""
    from ddprof.dashboards.app.server import choose_token, exposure_warning, make, url_of

    required = choose_token(host, token, no_token)
    warning = exposure_warning(host, required)
    if warning:
        click.echo(f"ddprof: warning: {warning}", err=True)
    server = make(app_for(required), host, port)
    url = url_of(host, server.server_port, required)
    click.echo(f"ddprof {what} at {url} (Ctrl+C to stop)", err=True)
    if open_browser:
        import webbrowser

        webbrowser.open(url)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


def _serve_live(sources: tuple[str, ...], host: str, port: int, token: str | None, no_token: bool,
                open_browser: bool) -> int:
    from pathlib import Path

    from ddprof.dashboards.app.live import create_live_app

    if len(sources) != 1 or not Path(sources[0]).is_dir():
        raise click.UsageError("--live takes one run dir (the -o of ddprof launch, or ddprof.profile's run dir)")
    run_dir = Path(sources[0])
    return _serve(lambda required: create_live_app(run_dir, required), f"live dashboard of {run_dir}", host, port,
                  token, no_token, open_browser)
