"""Create the app over one opened source and serve it, safely by default: bound to 127.0.0.1, Dash's debug
mode off, the data fixed at start (the browser can name no file), scripts served by the app itself (no CDN:
works with no network).

Bound to anything but loopback, the dashboard requires a token (as Jupyter does): a random one is made at
start and printed in the URL (``http://HOST:PORT/?token=...``), or the one given. A request carrying it
(``?token=`` in the URL, the cookie the first such page sets, or an ``Authorization: token ...`` header) is
served; any other gets 403 and a one-line page that holds no trace data. ``--no-token`` serves without one,
with a warning.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import secrets
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


TOKEN_COOKIE = "ddprof_token"


def exposure_warning(host: str, token: str | None = None) -> str | None:
    """What to warn about when serving on ``host`` (None: nothing): anything but loopback without a token."""
    if is_loopback(host) or token:
        return None
    return (f"serving on {host} without a token (--no-token): anyone who can reach this address can read the run's "
            "traces (names, sizes, timings); drop --no-token (a token is then required), or use the default "
            "127.0.0.1 and an SSH tunnel")


def choose_token(host: str, token: str | None, no_token: bool) -> str | None:
    """The token the server requires: the one given, else a new random one when ``host`` is not loopback
    (None with ``no_token``, or on loopback without one given)."""
    if no_token:
        return None
    if token:
        return token
    return None if is_loopback(host) else secrets.token_urlsafe(24)


def require_token(server: Any, token: str) -> None:
    """Refuse (403, no data) every request of the Flask ``server`` that does not carry ``token`` (module doc)."""
    import flask

    expected = token.encode()

    def given() -> str | None:
        req = flask.request
        auth = req.headers.get("Authorization", "")
        return (req.args.get("token") or req.cookies.get(TOKEN_COOKIE)
                or (auth[len("token "):] if auth.lower().startswith("token ") else None))

    @server.before_request
    def check() -> Any:
        got = given()
        if got is None or not hmac.compare_digest(got.encode(), expected):
            return flask.Response("403 Forbidden: this ddprof dashboard needs its token: open the URL it printed "
                                  "at start (…/?token=…)\n", status=403, mimetype="text/plain")
        return None

    @server.after_request
    def remember(response: Any) -> Any:
        if flask.request.args.get("token") and flask.request.cookies.get(TOKEN_COOKIE) != token:
            response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="Strict")
        return response


def create_app(state: DashboardState, token: str | None = None) -> dash.Dash:
    """The Dash app over ``state``; with ``token``, every request must carry it (module doc)."""
    app = dash.Dash(__name__, title=f"ddprof · {state.title}", serve_locally=True, update_title=None,
                    suppress_callback_exceptions=False)
    if token:
        require_token(app.server, token)
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


def url_of(host: str, port: int, token: str | None = None) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/" + (f"?token={token}" if token else "")


def describe(state: DashboardState) -> dict[str, Any]:
    return {"title": state.title, "ranks": state.data.ranks if state.data else []}
