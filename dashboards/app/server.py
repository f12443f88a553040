"""Create the app over one opened source and serve it, safely by default: bound to 127.0.0.1 (a warning
when told otherwise and the address is not loopback), Dash's debug mode off, the data fixed at start (the
browser can name no file), scripts served by the app itself (no CDN: works with no network)."""

from __future__ import annotations

import ipaddress
import logging
import socket
import threading
from typing import Any

import dash
from ddprof.dashboards.app.callbacks import register
from ddprof.dashboards.app.layout import page
from ddprof.dashboards.app.state import DashboardState
from werkzeug.serving import BaseWSGIServer, make_server

DEFAULT_HOST = "127.0.0.1"


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``; False for 0.0.0.0, other addresses and names."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def exposure_warning(host: str) -> str | None:
    if is_loopback(host):
        return None
    return (f"serving on {host}: anyone who can reach this address can read the run's traces (names, sizes, "
            "timings); use the default 127.0.0.1 and an SSH tunnel to share it safely")


def create_app(state: DashboardState) -> dash.Dash:
    app = dash.Dash(__name__, title=f"ddprof · {state.title}", serve_locally=True, update_title=None,
                    suppress_callback_exceptions=False)
    app.layout = page(state)
    register(app, state)
    return app


def make(app: dash.Dash, host: str = DEFAULT_HOST, port: int = 8050) -> BaseWSGIServer:
    """A threaded WSGI server for the app, bound now (port 0: a free one); run it with ``serve_forever``."""
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    return make_server(host, port, app.server, threaded=True)


def start_in_thread(app: dash.Dash, host: str = DEFAULT_HOST, port: int = 0) -> tuple[BaseWSGIServer, str]:
    """Serve on a thread; returns the server (``shutdown()`` stops it) and its URL."""
    server = make(app, host, port)
    threading.Thread(target=server.serve_forever, name="ddprof-dashboard", daemon=True).start()
    return server, f"http://{host}:{server.server_port}/"


def free_port(host: str = DEFAULT_HOST) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def url_of(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def describe(state: DashboardState) -> dict[str, Any]:
    return {"title": state.title, "ranks": state.data.ranks if state.data else []}
