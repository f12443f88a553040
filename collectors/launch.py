"""``ddprof launch -o RUN_DIR -- torchrun ... train.py``: run a job with ddprof's settings on every rank.

The launcher sets, for the whole job, what must exist before the process groups do: the Flight Recorder
buffer (``TORCH_FR_BUFFER_SIZE``), NCCL's dump on timeout, the dump file prefix (``RUN_DIR/raw/
fr_trace_rank_``; a rank that calls ``ddprof.init``/``ddprof.profile`` narrows it to its own
``raw/rank-NNNNN/``) and ``DDPROF_RUN_DIR``, so that ``ddprof.profile()`` needs no argument. It refuses
a run dir that already holds a capture (see :mod:`ddprof.collectors.layout`) and exits with the
command's exit status. Its command line is ``ddprof launch`` (:mod:`ddprof.cli.launch_cmd`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

from ddprof.collectors import layout
from ddprof.collectors.flight_recorder import DEFAULT_BUFFER, fr_env

from ddprof.errors import UsageError
from ddprof.rundir import MANIFEST


def launch_env(run_dir: Path, environ: Mapping[str, str], *, fr_buffer: int) -> dict[str, str]:
    """The job's environment: a copy of ``environ`` plus ddprof's settings (user settings win)."""
    env = dict(environ)
    env[layout.RUN_DIR_ENV] = str(run_dir)
    if fr_buffer > 0:
        env.update(fr_env(run_dir, None, fr_buffer, True, env))
    return env


def launch(run_dir: str | Path, command: list[str], *, fr_buffer: int = DEFAULT_BUFFER,
           environ: Mapping[str, str] | None = None) -> int:
    """Run ``command`` with :func:`launch_env`; return its exit status."""
    run_dir = Path(run_dir).absolute()
    if not command:
        raise UsageError("nothing to run: ddprof launch -o RUN_DIR -- torchrun --nproc-per-node N train.py")
    used = sorted(layout.raw_dir(run_dir).glob("rank-*/rank-*.meta.json"))
    if (run_dir / MANIFEST).exists() or used:
        raise UsageError(f"{run_dir} already holds a capture ({(run_dir / MANIFEST) if not used else used[0]}); "
                         "ddprof never mixes two runs in one run dir: choose a new directory or delete this one")
    layout.raw_dir(run_dir).mkdir(parents=True, exist_ok=True)
    try:
        return subprocess.call(command, env=launch_env(run_dir, os.environ if environ is None else environ,
                                                       fr_buffer=fr_buffer))
    except FileNotFoundError:
        raise UsageError(f"{command[0]}: command not found") from None

