"""``ddprof launch -o RUN_DIR -- torchrun ... train.py``: capture a job whose script was not edited.

The launcher

* puts the bootstrap on the job's ``PYTHONPATH`` (:mod:`ddprof.collectors.bootstrap`): every rank
  captures without ``ddprof.profile`` in the script, counting steps by optimizer step, by
  ``--step-on MODULE:FUNCTION`` or by ``--step-on-loader MODULE:NAME`` (the items drawn from a DataLoader;
  :mod:`ddprof.collectors.autocapture`), recording the schedule's window
  and any window ``ddprof trigger RUN_DIR`` asks for while it runs (:mod:`ddprof.collectors.ondemand`);
* sets, for the whole job, what must exist before the process groups do: the Flight Recorder buffer
  (``TORCH_FR_BUFFER_SIZE``), NCCL's dump on timeout, the dump file prefix (``RUN_DIR/raw/
  fr_trace_rank_``; a capturing rank narrows it to its own ``raw/rank-NNNNN/``) and ``DDPROF_RUN_DIR``, so
  that a script that does call ``ddprof.profile()``/``ddprof.init()`` needs no argument (with
  ``capture=False`` the launcher does only this);
* refuses a run dir that already holds a capture (see :mod:`ddprof.collectors.layout`), runs the command
  and returns its exit status, then prints one line: what to run next, or why nothing was captured.

Its command line is ``ddprof launch`` (:mod:`ddprof.cli.launch_cmd`).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ddprof.collectors import layout
from ddprof.collectors.bootstrap import bootstrap_env, write_bootstrap
from ddprof.collectors.flight_recorder import DEFAULT_BUFFER, fr_env

from ddprof.errors import UsageError
from ddprof.store.capture_status import never_asked, read_statuses
from ddprof.store.rundir import MANIFEST


def launch_env(run_dir: Path, environ: Mapping[str, str], *, fr_buffer: int) -> dict[str, str]:
    """The job's environment: a copy of ``environ`` plus ddprof's settings (user settings win)."""
    env = dict(environ)
    env[layout.RUN_DIR_ENV] = str(run_dir)
    if fr_buffer > 0:
        env.update(fr_env(run_dir, None, fr_buffer, True, env))
    return env


def launch(run_dir: str | Path, command: list[str], *, fr_buffer: int = DEFAULT_BUFFER,
           environ: Mapping[str, str] | None = None, capture: bool = True, profile: dict[str, Any] | None = None,
           step_on: str | None = None, step_on_loader: str | None = None,
           say: Callable[[str], None] | None = None) -> int:
    """Run ``command`` with :func:`launch_env` (and, with ``capture``, the bootstrap); return its exit status.

    ``profile``: options of ``ddprof.profile`` for every rank (``wait``, ``warmup``, ``active``, ``repeat``,
    ``record_shapes``, ``profile_memory``, ``with_stack``, ``ingest_timeout_s``...; ``active=0``: record only
    the windows ``ddprof trigger`` asks for). ``say`` receives the closing line (e.g. ``click.echo``).
    """
    run_dir = Path(run_dir).absolute()
    if not command:
        raise UsageError("nothing to run: ddprof launch -o RUN_DIR -- torchrun --nproc-per-node N train.py")
    if step_on is not None and step_on_loader is not None:
        raise UsageError("--step-on and --step-on-loader: choose one step source")
    if step_on is not None:
        module, _, function = step_on.partition(":")
        if not module or not function or module == "__main__":
            raise UsageError(f"--step-on {step_on!r}: expected MODULE:FUNCTION of a module the script imports "
                             "(e.g. mytrain.steps:train_step); the script run as __main__ cannot be hooked")
    if step_on_loader is not None:
        module, _, name = step_on_loader.partition(":")
        if not module or not name or module == "__main__":
            raise UsageError(f"--step-on-loader {step_on_loader!r}: expected MODULE:NAME, a loader class (e.g. "
                             "torch.utils.data:DataLoader) or a loader a module the script imports defines (e.g. "
                             "mytrain.data:train_loader); the script run as __main__ cannot be hooked")
    used = sorted(layout.raw_dir(run_dir).glob("rank-*/rank-*.meta.json"))
    if (run_dir / MANIFEST).exists() or used:
        raise UsageError(f"{run_dir} already holds a capture ({(run_dir / MANIFEST) if not used else used[0]}); "
                         "ddprof never mixes two runs in one run dir: choose a new directory or delete this one")
    layout.raw_dir(run_dir).mkdir(parents=True, exist_ok=True)
    base = os.environ if environ is None else environ
    env = launch_env(run_dir, base, fr_buffer=fr_buffer)
    if capture:
        config = write_bootstrap(run_dir, profile=dict(profile or {}), step_on=step_on, step_on_loader=step_on_loader)
        env.update(bootstrap_env(run_dir, config, base))
    try:
        rc = subprocess.call(command, env=env)
    except FileNotFoundError:
        raise UsageError(f"{command[0]}: command not found") from None
    if capture and say is not None:
        say(closing_line(run_dir))
    return rc


def closing_line(run_dir: Path) -> str:
    """What the user runs next, or why there is nothing to analyse."""
    statuses = read_statuses(run_dir)
    traces = sorted(layout.raw_dir(run_dir).glob("rank-*/*.pt.trace.json.gz"))
    if traces:
        return f"ddprof: captured {len(traces)} trace file(s); analyse with: ddprof analyze {run_dir}"
    if not statuses:
        return (f"ddprof: no process of the job loaded ddprof's bootstrap (is ddprof installed in the job's Python, "
                f"and is the job a Python program started without -S/-I?); nothing captured in {run_dir}")
    if never_asked(statuses):
        return (f"ddprof: no trace was written: --active 0 records only the windows `ddprof trigger {run_dir} "
                "--steps N` asks for while the job runs, and no trigger was sent")
    return f"ddprof: no trace was written; `ddprof analyze {run_dir}` says what each process saw"
