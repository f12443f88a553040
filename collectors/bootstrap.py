"""The bootstrap ``ddprof launch`` puts on the job's ``PYTHONPATH``: capture with no edit to the script.

``ddprof launch -o RUN -- CMD`` writes two files into the run dir and nowhere else::

    RUN/.bootstrap/sitecustomize.py   loaded by every Python process of the job at start-up
    RUN/.bootstrap/config.json        run dir, schedule, what to record, the step source

and runs ``CMD`` with ``RUN/.bootstrap`` first on ``PYTHONPATH`` and ``DDPROF_LAUNCH_CONFIG`` naming the
config. Python imports the first ``sitecustomize`` module on its path at start-up (the ``site``
module does, unless ``python -S`` or ``-I``); ours calls :func:`ddprof.collectors.autocapture.install`, then
runs the ``sitecustomize`` that would have been loaded without it (the next one on ``sys.path``), so a
site's own customisation keeps working. Environment variables pass to torchrun's ranks, to ``mp.spawn``
children and to anything else the job starts, so every rank gets capture. A failure to load is printed
on stderr with the reason and the job runs on, uncaptured.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ddprof.collectors.autocapture import CONFIG_ENV

from ddprof.store.atomic import write_json_atomic, write_text_atomic

BOOTSTRAP_DIR = ".bootstrap"

SITECUSTOMIZE = '''\
"""Written by ddprof launch: capture in every Python process of this job, then the site's own
sitecustomize (the next one on sys.path), if any."""

import os as _os
import sys as _sys

_here = _os.path.dirname(_os.path.abspath(__file__))
try:
    from ddprof.collectors.autocapture import install as _install

    _install()
except Exception as _exc:  # never stop the job
    _sys.stderr.write("ddprof: capture is not installed in this process (%s: %s); the job runs on\\n"
                      % (type(_exc).__name__, _exc))


def _chain():
    import importlib.machinery
    import importlib.util

    path = [p for p in _sys.path if _os.path.abspath(p or ".") != _here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    _sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_chain()
'''


def bootstrap_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / BOOTSTRAP_DIR


def write_bootstrap(run_dir: Path, *, profile: dict[str, Any], step_on: str | None,
                    step_on_loader: str | None = None) -> Path:
    """Write the bootstrap's two files; return its config path."""
    folder = bootstrap_dir(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    write_text_atomic(folder / "sitecustomize.py", SITECUSTOMIZE)
    config = folder / "config.json"
    write_json_atomic(config, {"run_dir": str(run_dir), "profile": profile, "step_on": step_on,
                               "step_on_loader": step_on_loader})
    return config


def bootstrap_env(run_dir: Path, config: Path, environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that load the bootstrap (ours first on ``PYTHONPATH``, the user's path kept)."""
    path = [str(bootstrap_dir(run_dir))] + [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {"PYTHONPATH": os.pathsep.join(path), CONFIG_ENV: str(config)}


def config_of(run_dir: Path) -> dict[str, Any]:
    return json.loads((bootstrap_dir(run_dir) / "config.json").read_text(encoding="utf-8"))
