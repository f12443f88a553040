"""Headless Chromium for the dashboard tests: a selenium driver over Debian's ``chromium`` and
``chromium-driver`` (``.ci/run`` installs them), and where screenshots go.

Screenshots land in ``$DDPROF_TEST_ARTIFACTS`` or ``test-artifacts/`` (git-ignored)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.paths import REPO

CHROMEDRIVER = "/usr/bin/chromedriver"


def chromium_missing() -> str | None:
    """Why the browser tests cannot run here, or None."""
    if not Path(CHROMEDRIVER).exists():
        return f"{CHROMEDRIVER} not found: install Debian's chromium and chromium-driver (.ci/run does)"
    if shutil.which("chromium") is None and not Path("/usr/bin/chromium").exists():
        return "chromium not found: install Debian's chromium (.ci/run does)"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium not installed (pip install 'ddprof[test]')"
    return None


def artifacts_dir() -> Path:
    d = Path(os.environ.get("DDPROF_TEST_ARTIFACTS") or REPO / "test-artifacts")
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def chromium(width: int = 1500, height: int = 1100) -> Iterator[Any]:
    """A headless Chromium driven by selenium, with a fresh profile, logging the console."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="ddprof-chromium-")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", f"--window-size={width},{height}"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(check: Callable[[], Any], timeout: float = 90, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # the page is still loading
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def graph_meta(driver: Any, graph_id: str = "timeline") -> dict[str, Any] | None:
    """The ``layout.meta.ddprof`` of a plotly graph in the page (what the server sent with the figure)."""
    raw = driver.execute_script(
        "const g = document.querySelector('#' + arguments[0] + ' .js-plotly-plot');"
        "return g && g.layout && g.layout.meta ? JSON.stringify(g.layout.meta.ddprof || null) : null;", graph_id)
    return json.loads(raw) if raw else None


def severe_console(driver: Any) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def screenshot(driver: Any, name: str) -> Path:
    """A full-page screenshot (the page's height, up to 6,000 px) under :func:`artifacts_dir`."""
    height = int(driver.execute_script("return Math.min(6000, document.body.scrollHeight)") or 1100)
    width = int(driver.execute_script("return window.innerWidth") or 1500)
    driver.set_window_size(max(width, 1500), height + 140)
    path = artifacts_dir() / f"{name}.png"
    driver.save_screenshot(str(path))
    return path
