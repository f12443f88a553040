"""The dashboard bound to a non-loopback address requires its token: served on 0.0.0.0 and requested at
the machine's own non-loopback address (loopback where it has none), a request without the token, or with
a wrong one, gets 403 and no trace data; with it, the page, its layout and its callbacks are served, in
plain HTTP and in real headless Chromium (the token in the URL, then the cookie it sets, carries the
page's requests). ``ddprof dashboard --host 0.0.0.0`` prints the URL with the token; ``--no-token`` warns."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.support.browser import chromium, chromium_missing, wait_for
from tests.support.paths import REPO

pytest.importorskip("dash")

from ddprof.dashboards.app.server import choose_token, create_app, exposure_warning, make  # noqa: E402
from ddprof.dashboards.app.state import DashboardState  # noqa: E402

from ddprof.inputs.sources import open_source  # noqa: E402

SAMPLE = REPO / "sample_traces/dlrm-8xV100-nccl"


def own_address() -> str:
    """This machine's address on its default route (no packet is sent), else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return str(s.getsockname()[0])
    except OSError:
        return "127.0.0.1"


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, str, dict[str, str]]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return resp.status, resp.read().decode(errors="replace"), dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(errors="replace"), dict(err.headers)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with open_source([SAMPLE], cache=tmp_path_factory.mktemp("dlrm")) as src:
        state = DashboardState.open(src.run, src.dumps, "dlrm")
        assert state.wait(300)
        token = choose_token("0.0.0.0", None, False)
        assert token and len(token) >= 24
        server = make(create_app(state, token), "0.0.0.0", 0)
        import threading

        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://{own_address()}:{server.server_port}", token
        finally:
            server.shutdown()


def test_requests_without_the_token_get_403_and_no_data(served):
    base, token = served
    for path in ("/", "/_dash-layout", "/_dash-dependencies", "/?token=wrong" + token[:4]):
        status, body, _ = get(base + path)
        assert status == 403, (path, status)
        assert "token" in body and "ncclKernel" not in body and "rank" not in body.lower()
    status, body, _ = get(base + "/_dash-layout", {"Authorization": "token nope"})
    assert status == 403


def test_requests_with_the_token_are_served(served):
    base, token = served
    status, body, headers = get(f"{base}/?token={token}")
    assert status == 200 and "_dash-" in body
    assert "ddprof_token=" in headers.get("Set-Cookie", "") and "HttpOnly" in headers["Set-Cookie"]
    status, body, _ = get(base + "/_dash-layout", {"Cookie": f"ddprof_token={token}"})
    assert status == 200 and json.loads(body)
    status, _, _ = get(base + "/_dash-layout", {"Authorization": f"token {token}"})
    assert status == 200


@pytest.mark.skipif(chromium_missing() is not None, reason=chromium_missing() or "")
def test_browser_with_the_token_url_renders_and_without_is_refused(served):
    base, token = served
    with chromium() as driver:
        driver.get(base + "/")
        assert "403" in driver.page_source and "status" not in {e.get_attribute("id") for e in
                                                               driver.find_elements("css selector", "[id]")}
        driver.get(f"{base}/?token={token}")
        wait_for(lambda: driver.find_elements("id", "status"), what="the report's header, with the token")


def test_cli_prints_the_token_url_and_warns_with_no_token(tmp_path):
    assert exposure_warning("0.0.0.0", "t") is None and "--no-token" in (exposure_warning("0.0.0.0") or "")
    assert choose_token("127.0.0.1", None, False) is None and choose_token("0.0.0.0", "given", False) == "given"
    assert choose_token("0.0.0.0", None, True) is None
    port = str(_free_port())
    proc = subprocess.Popen([sys.executable, "-m", "ddprof", "dashboard", str(SAMPLE), "--host", "0.0.0.0",
                             "--port", port, "--cache", str(tmp_path / "c")], stderr=subprocess.PIPE, text=True)
    try:
        line = _line_with(proc, "ddprof dashboard of")
        assert f":{port}/?token=" in line and "warning" not in line
        token = line.split("?token=")[1].split()[0]
        assert get(f"http://{own_address()}:{port}/")[0] == 403
        assert get(f"http://{own_address()}:{port}/?token={token}")[0] == 200
    finally:
        proc.terminate()
        proc.wait(30)
    proc = subprocess.Popen([sys.executable, "-m", "ddprof", "dashboard", str(SAMPLE), "--host", "0.0.0.0",
                             "--port", str(_free_port()), "--no-token", "--cache", str(tmp_path / "c")],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert "without a token (--no-token)" in _line_with(proc, "warning")
    finally:
        proc.terminate()
        proc.wait(30)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def _line_with(proc: subprocess.Popen, text: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if text in line:
            return line
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no line with {text!r} from the dashboard")
