"""The dashboard's first view in a real browser: a generated run of 1,024 ranks, ``ddprof dashboard`` started
as a user starts it, and headless Chromium (selenium over Debian's chromium and chromium-driver) navigating
to it; the times a user waits and the bytes the page receives.

    python benchmarks/dashboard_browser.py [--ranks 1024] [--events 2000] [--reps 3] [--keep DIR]

* **server up**: from ``ddprof dashboard RUN`` started to its port answering;
* **timeline drawn**: from the navigation to the timeline's first figure in the page (the occupancy image
  of every rank drawn by plotly), as the browser's own clock reads it (``performance.now()``, 0 at the
  navigation's start); the median of ``--reps`` navigations (each a fresh page of the same server: the
  first one is a first visit, the others find the server's grid made);
* **bytes**: what the page received until then (the document, scripts and callbacks:
  ``performance.getEntries()``' transfer sizes), and of it the callbacks' answers (``_dash-update-component``).

The run is built as a captured one is (:func:`benchmarks.dashboard.write_run`: traces from
``ddprof.synth``, then ingest). The target: the timeline drawn 3 s after navigation at 1,024 ranks.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
from dashboard import write_run  # noqa: E402

from tests.support.browser import chromium, chromium_missing  # noqa: E402

#: True once the timeline's figure has data and plotly drew its image (the occupancy grid) or its bars.
DRAWN = """
const g = document.querySelector('#timeline .js-plotly-plot');
if (!g || !g._fullData || !g._fullData.length) return null;
const drawn = g.querySelector('g.layer-below image, g.imagelayer image, .heatmaplayer image, g.barlayer path');
return drawn ? performance.now() : null;
"""
BYTES = """
const entries = [...performance.getEntriesByType('navigation'), ...performance.getEntriesByType('resource')];
let total = 0, callbacks = 0;
for (const e of entries) { total += e.transferSize || e.encodedBodySize || 0;
  if (e.name.includes('_dash-update-component')) callbacks += e.transferSize || e.encodedBodySize || 0; }
return [total, callbacks];
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 120.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return time.monotonic() - t0
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"the dashboard did not answer on port {port} in {timeout:.0f} s")


def first_view(driver, url: str, timeout: float = 120.0) -> tuple[float, int, int]:  # noqa: ANN001
    driver.get("about:blank")
    driver.get(url)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        at = driver.execute_script(DRAWN)
        if at is not None:
            total, callbacks = driver.execute_script(BYTES)
            return float(at) / 1e3, int(total), int(callbacks)
        time.sleep(0.02)
    raise TimeoutError("the timeline was not drawn")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--events", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keep", type=Path, default=None, help="build the run here (kept; reused when it exists)")
    a = ap.parse_args()
    if (why := chromium_missing()) is not None:
        print(f"cannot drive a browser here: {why}")
        return 2
    root = a.keep or Path(tempfile.mkdtemp(prefix="ddprof-dash-browser-"))
    run = root / f"run-{a.ranks}x{a.events}"
    if not (run / "manifest.json").exists():
        gen, ing = write_run(run, a.ranks, a.events)
        print(f"{a.ranks} ranks x {a.events} events: generated in {gen:.1f} s, ingested in {ing:.1f} s")
    port = free_port()
    exe = Path(sys.executable).with_name("ddprof")
    t0 = time.monotonic()
    proc = subprocess.Popen([str(exe), "dashboard", str(run), "--port", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        up = wait_port(port)
        print(f"server up {up:.2f} s after ddprof dashboard started")
        drawn = []
        with chromium() as driver:
            for i in range(a.reps):
                s, total, callbacks = first_view(driver, f"http://127.0.0.1:{port}/")
                drawn.append(s)
                print(f"navigation {i + 1}: timeline drawn {s:.2f} s after navigation; {total / 1e6:.2f} MB "
                      f"received ({callbacks / 1e6:.2f} MB of callback answers)", flush=True)
        print(f"timeline drawn: median {statistics.median(drawn):.2f} s (first {drawn[0]:.2f} s; target 3 s); "
              f"{time.monotonic() - t0:.1f} s in all")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
