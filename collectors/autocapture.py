"""Capture in a process whose script never imports ddprof: what ``ddprof launch``'s bootstrap installs.

:func:`install` runs at interpreter start-up in every Python process of the job (the bootstrap
``sitecustomize`` of :mod:`ddprof.collectors.bootstrap`). It is cheap and lazy: it imports neither torch
nor Polars, and only arranges, through an import hook, that

* when ``torch.optim.optimizer`` is imported, a global optimizer step hook is registered
  (``torch.optim.optimizer.register_optimizer_step_post_hook``), or
* with ``--step-on MODULE:FUNCTION``, when ``MODULE`` is imported, ``FUNCTION`` (a dotted name such as
  ``Trainer.train_step`` also works) is wrapped; each return from it ends a step, or
* with ``--step-on-loader MODULE:NAME``, when ``MODULE`` is imported, one step is counted per item drawn
  from a loader: ``NAME`` is a class (``torch.utils.data:DataLoader``, or your subclass: every instance
  counts) or an object the module defines (``mydata:train_loader``: that loader alone). The class's
  ``__iter__`` is wrapped; the iterator it returns is handed back in a thin wrapper (attributes and
  ``len()`` pass through) that ends a step at each ``next()`` after the first, before the next batch is
  fetched (loading a batch belongs to the step that uses it), and at the end of the loader (the last
  batch's step), so ``for batch in loader`` counts one step per batch, with gradient accumulation too.

Capture starts at the end of the first step: ``ddprof.profile`` is entered then (the rank is known by
then, even in ``mp.spawn`` children that name it only to ``init_process_group``), numbering steps as the
job does (the first step is step 0, so the default schedule wait=1, warmup=1, active=3 records steps 2-4,
as the context manager does), with the on-demand listener of ``ddprof trigger`` on. At exit it is left
like the context manager: traces, meta file and Flight Recorder dump in ``RUN/raw/``, rank 0 ingesting in
the background. A process that never ends a step records nothing but its status file, which says so.

**Steps with several optimizers.** A step ends when the optimizer that appeared last finishes its step.
With one optimizer that is every optimizer step. With two (a GAN's generator and discriminator,
separate optimizers for parts of a model), stepping ``A`` then ``B`` each iteration: the first ``A``
step ends step 0 (``B`` is not known yet); ``B`` appears, and from then on each ``B`` step ends a step, so
step 1 holds ``B``'s first step and iteration 1, and every step from 2 on is exactly one iteration
(steps counted once per iteration, not twice). Optimizers stepping at different rates are counted at the
rate of the last to appear; name the training step with ``--step-on`` when that is not what you want.

Processes left alone: torchrun's own agent (``torchrun``, ``python -m torch.distributed.run``) and
ddprof's background ingest. Nothing here may break the job: every failure is logged and capture turns off.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import json
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

log = logging.getLogger("ddprof.collectors")

CONFIG_ENV = "DDPROF_LAUNCH_CONFIG"  # the bootstrap's config.json (run dir, schedule, step source)
OFF_ENV = "DDPROF_BOOTSTRAP_OFF"  # set in processes ddprof starts itself (the background ingest)
_LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_RANK_ENV = ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")

_agent: Agent | None = None
_shared_hooks: _AfterImport | None = None


class _AfterImport:
    """Runs ``callback(module)`` right after the named module is first executed (an import hook: a meta
    path finder that finds nothing itself and wraps the loader the others find)."""

    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callable[[ModuleType], None]]] = {}

    def add(self, name: str, callback: Callable[[ModuleType], None]) -> None:
        if name in sys.modules:
            callback(sys.modules[name])
        else:
            self.callbacks.setdefault(name, []).append(callback)

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        callbacks = self.callbacks.pop(fullname, None)
        if not callbacks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
                wrapped: Any = _ThenCall(spec.loader, callbacks)  # a loader by its methods
                spec.loader = wrapped
                return spec
            if spec is not None:
                return spec
        return None


def after_import(name: str, callback: Callable[[ModuleType], None]) -> None:
    """Run ``callback(module)`` now if ``name`` is imported, else right after it is first imported (errors in
    the callback are logged, never raised into the import)."""
    global _shared_hooks
    if name in sys.modules:
        callback(sys.modules[name])
        return
    if _shared_hooks is None:
        _shared_hooks = _AfterImport()
        sys.meta_path.insert(0, _shared_hooks)
    _shared_hooks.add(name, callback)


class _ThenCall:
    def __init__(self, loader: Any, callbacks: list[Callable[[ModuleType], None]]):
        self._loader, self._callbacks = loader, callbacks

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        for callback in self._callbacks:
            try:
                callback(module)
            except Exception as exc:
                log.error("ddprof: capture hook on %s failed: %s: %s (training continues)", module.__name__,
                          type(exc).__name__, exc)

    def __getattr__(self, name: str) -> Any:  # get_source, get_filename... of the real loader
        return getattr(self._loader, name)


class _CountedIterator:
    """A loader's iterator whose ``next()`` ends a step, except the first (module doc)."""

    __slots__ = ("_it", "_agent", "_started", "_ended")

    def __init__(self, it: Any, agent: Agent):
        self._it, self._agent, self._started, self._ended = it, agent, False, False

    def __iter__(self) -> _CountedIterator:
        return self

    def __next__(self) -> Any:
        if self._ended:  # asked again after the end: no step in between
            return next(self._it)
        if self._started:
            self._agent.boundary()  # never raises
        else:
            self._started = True
        try:
            return next(self._it)
        except StopIteration:
            self._ended = True
            raise

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name: str) -> Any:
        if name in _CountedIterator.__slots__:  # not set yet (a copy made without __init__)
            raise AttributeError(name)
        return getattr(self._it, name)


def _is_launcher_agent(argv: list[str]) -> bool:
    """torchrun's agent process (it starts the ranks; it is none of them)."""
    if len(argv) > 1 and Path(argv[1]).name in ("torchrun", "torchrun.exe"):
        return True
    return any(a in _LAUNCHER_MODULES for a in argv[1:3]) or any(a.endswith(("torch/distributed/run.py",
                                                                             "torch/distributed/launch.py"))
                                                                  for a in argv[1:3])


def _is_multiprocessing_child(argv: list[str]) -> bool:
    return "--multiprocessing-fork" in argv or any("from multiprocessing" in a for a in argv)


def install(environ: dict[str, str] | None = None) -> Agent | None:
    """Arm capture in this process (see the module doc); None where this process is left alone."""
    global _agent
    env = os.environ if environ is None else environ
    if _agent is not None or env.get(OFF_ENV) or not env.get(CONFIG_ENV):
        return _agent
    argv = list(getattr(sys, "orig_argv", sys.argv))
    if _is_launcher_agent(argv):
        return None
    config = json.loads(Path(env[CONFIG_ENV]).read_text(encoding="utf-8"))
    agent = Agent(config)
    agent.arm(eager_status=not _is_multiprocessing_child(argv))
    _agent = agent
    return agent


class Agent:
    """The capture of one process: counts steps, starts ``ddprof.profile`` at the first, ends it at exit."""

    def __init__(self, config: dict[str, Any]):
        from ddprof.collectors.status import ProcessStatus

        self.run_dir = Path(config["run_dir"])
        self.options: dict[str, Any] = dict(config.get("profile", {}))
        self.step_on: str | None = config.get("step_on")
        self.step_on_loader: str | None = config.get("step_on_loader")
        self.steps = 0
        self.profile: Any = None
        self.error: BaseException | None = None
        self._off = False
        self._announced = False
        self._lock = threading.Lock()
        self._optimizers: weakref.WeakSet[Any] = weakref.WeakSet()
        self._last_optimizer: weakref.ref[Any] | None = None
        source = self.step_on or (f"loader {self.step_on_loader}" if self.step_on_loader else "optimizer.step")
        self.status = ProcessStatus(self.run_dir, step_source=source)
        self._hooks = _AfterImport()

    # -- start-up ------------------------------------------------------------------------------------------
    def arm(self, *, eager_status: bool) -> None:
        rank = next((os.environ[v] for v in _RANK_ENV if os.environ.get(v, "").isdigit()), None)
        self.status.data.update(rank=int(rank) if rank is not None else None, listening=False)
        if eager_status:  # a rank or the job's main process: say it started even if it never steps
            self._announced = True
            self.status.write(force=True)
        sys.meta_path.insert(0, self._hooks)
        previous_hook = sys.excepthook

        def excepthook(kind: Any, value: BaseException, tb: Any) -> None:
            self.error = value
            previous_hook(kind, value, tb)

        sys.excepthook = excepthook
        atexit.register(self._at_exit_uncaptured)
        if self.step_on:
            module, _, qualname = self.step_on.partition(":")
            self._hooks.add(module, functools.partial(self._wrap_step_function, qualname))
        elif self.step_on_loader:
            module, _, qualname = self.step_on_loader.partition(":")
            self._hooks.add(module, functools.partial(self._wrap_loader, qualname))
        else:
            self._hooks.add("torch.optim.optimizer", self._register_optimizer_hook)

    def _register_optimizer_hook(self, module: ModuleType) -> None:
        module.register_optimizer_step_post_hook(self._optimizer_stepped)

    def _wrap_step_function(self, qualname: str, module: ModuleType) -> None:
        owner: Any = module
        *path, name = qualname.split(".")
        for part in path:
            owner = getattr(owner, part)
        fn = getattr(owner, name)
        agent = self

        @functools.wraps(fn)
        def step_function(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            finally:
                agent.boundary()

        setattr(owner, name, step_function)

    def _wrap_loader(self, qualname: str, module: ModuleType) -> None:
        """``--step-on-loader``: count the items drawn from the loader class or object ``qualname`` names."""
        try:
            target: Any = module
            for part in qualname.split("."):
                target = getattr(target, part)
            cls: Any = target if isinstance(target, type) else type(target)  # its __iter__ is replaced below
            only = None if isinstance(target, type) else weakref.ref(target)
            original = getattr(cls, "__iter__", None)
            if original is None:
                raise TypeError(f"{module.__name__}:{qualname} is not iterable (its class has no __iter__)")
        except Exception as exc:
            self.status.append("errors", f"--step-on-loader {module.__name__}:{qualname}: {type(exc).__name__}: {exc}")
            raise
        agent = self

        @functools.wraps(original)
        def __iter__(loader: Any, *args: Any, **kwargs: Any) -> Any:
            it = original(loader, *args, **kwargs)
            if only is not None and only() is not loader:
                return it
            return _CountedIterator(it, agent)

        cls.__iter__ = __iter__

    # -- steps ---------------------------------------------------------------------------------------------
    def _optimizer_stepped(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        """The several-optimizers rule of the module doc: a step ends after the last optimizer to appear."""
        if optimizer not in self._optimizers:
            self._optimizers.add(optimizer)
            first = self._last_optimizer is None
            self._last_optimizer = weakref.ref(optimizer)
            if not first:
                return
        if self._last_optimizer is not None and self._last_optimizer() is optimizer:
            self.boundary()

    def boundary(self) -> None:
        """A step ended. Never raises."""
        if self._off:
            return
        try:
            with self._lock:
                self.steps += 1
                if self.profile is None:
                    self._start()
                else:
                    self.profile.step()
        except Exception as exc:
            self._off = True
            self.status.append("errors", f"{type(exc).__name__}: {exc}")
            log.error("ddprof: capture failed and is off in this process: %s: %s (training continues)",
                      type(exc).__name__, exc)

    def _start(self) -> None:
        from ddprof.collectors import layout
        from ddprof.collectors.capture import Profile

        self._announced = True
        if layout.profiling_here():  # the script runs ddprof.profile itself: one capture per process
            self._off = True
            self.status.update(step_source="ddprof.profile in the script", force=True)
            return
        self.status.update(steps_seen=self.steps, step=self.steps, step_wall=time.time())
        profile = Profile(self.run_dir, on_demand=True, _first_step=self.steps, _status=self.status, **self.options)
        profile.__enter__()
        self.profile = profile
        atexit.register(self._at_exit)  # after torch's own handlers were registered: runs before them
        self._exit_on_sigterm()
        if profile.failures:
            self.status.update(errors=[f"{f['stage']}: {f['error']}" for f in profile.failures], force=True)

    # -- exit ----------------------------------------------------------------------------------------------
    def _exit_on_sigterm(self) -> None:
        """A launcher stops the other ranks with SIGTERM when one fails (torchrun does, then SIGKILL 30 s
        later). By default that kills the process on the spot and loses the window being recorded; while
        capturing, SIGTERM (when the job left it at its default) exits through ``SystemExit(143)`` instead,
        so the trace recorded so far and the meta file are written."""
        try:
            if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
                return

            def terminate(signum: int, frame: Any) -> None:
                if self.profile is None:  # already writing at exit: finish that (SIGKILL comes later anyway)
                    return
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM kills at once
                self.error = self.error or SystemExit("terminated by SIGTERM")
                raise SystemExit(128 + signum)

            signal.signal(signal.SIGTERM, terminate)
        except (ValueError, OSError) as exc:  # not the main thread
            log.info("ddprof: SIGTERM left alone (%s)", exc)

    def _at_exit(self) -> None:
        profile, self.profile, self._off = self.profile, None, True
        if profile is None:
            return
        with contextlib.suppress(ValueError, OSError):  # a SIGTERM now must not cut the export short
            if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            err = self.error
            profile.__exit__(type(err) if err else None, err, None)
            if profile.ingest_process is not None:
                self.status.update(ingest_pid=profile.ingest_process.pid)
        except Exception as exc:
            log.error("ddprof: capture could not finish: %s: %s", type(exc).__name__, exc)
            self.status.data["errors"].append(f"exit: {type(exc).__name__}: {exc}")
        self._write_exit()

    def _at_exit_uncaptured(self) -> None:
        if self._announced and self.status.data.get("exit") is None:
            self._write_exit()

    def _write_exit(self) -> None:
        err = self.error
        how = f"raised {type(err).__name__}: {err}" if err else "exited normally"
        self.status.update(exit={"how": how, "wall": time.time()}, listening=False, steps_seen=self.steps,
                           force=True)
