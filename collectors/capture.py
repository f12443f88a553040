"""``ddprof.profile``: capture one Kineto trace per rank and cycle, plus the Flight Recorder, then ingest.

>>> with ddprof.profile("runs/job-42") as prof:      # doctest: +SKIP
...     for batch in loader:
...         train_step(batch)
...         prof.step()

Nothing here may break training: after the entry checks (a bad argument, or a run dir that already
holds a capture, raise :class:`~ddprof.errors.UsageError` before training starts), every failure is
logged with its reason, recorded in the rank's meta file and in :attr:`Profile.failures`, and swallowed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any, Literal, TypedDict

from ddprof.collectors import finish, flight_recorder, layout, measures
from ddprof.collectors.ondemand import Moved, OnDemand
from ddprof.collectors.rankfiles import RankFiles, initialised_dist
from ddprof.collectors.rankinfo import RankInfo, detect_rank
from ddprof.collectors.status import ProcessStatus
from ddprof.collectors.watch import DumpWatch

from ddprof.errors import UsageError
from ddprof.store.rundir import Run

log = logging.getLogger("ddprof.collectors")


class _ProfilerOptions(TypedDict):
    """The ``torch.profiler.profile`` keyword options :class:`Profile` passes through."""

    record_shapes: bool
    with_stack: bool
    profile_memory: bool
    with_modules: bool



class Profile(contextlib.ContextDecorator):
    """Profile the ranks of a training job into ``run_dir`` (see :func:`profile` for the options).

    After exit: :attr:`run` is the ingested :class:`~ddprof.store.rundir.Run` when ``wait_ingest=True`` and
    this is rank 0; :attr:`ingest_process` the background ingest otherwise; :attr:`failures` what went
    wrong, each ``{"stage", "error"}``.
    """

    def __init__(self, run_dir: str | Path | None = None, *, wait: int = 1, warmup: int = 1, active: int = 3,
                 repeat: int = 1, skip_first: int = 0, record_shapes: bool = True, with_stack: bool = False,
                 profile_memory: bool = False, with_modules: bool = False, cuda: bool | None = None,
                 flight_recorder: bool = True, dump_signal: int | None = signal.SIGUSR1,
                 stall_timeout_s: float | None = 600.0, ingest: bool = True, wait_ingest: bool = False,
                 ingest_timeout_s: float = 120.0, on_demand: bool = False, step_measures: bool = True,
                 _first_step: int = 0,
                 _status: ProcessStatus | None = None):
        for name, value, low in (("wait", wait, 0), ("warmup", warmup, 0), ("active", active, 0 if on_demand else 1),
                                 ("repeat", repeat, 0), ("skip_first", skip_first, 0)):
            if not isinstance(value, int) or value < low:
                raise UsageError(f"ddprof.profile: {name}={value!r}; expected an integer >= {low}")
        if stall_timeout_s is not None and stall_timeout_s <= 0:
            raise UsageError(f"ddprof.profile: stall_timeout_s={stall_timeout_s!r}; expected > 0 or None")
        self._run_dir_arg = run_dir
        self.schedule = {"skip_first": skip_first, "wait": wait, "warmup": warmup, "active": active,
                         "repeat": repeat}
        self.options: _ProfilerOptions = {"record_shapes": record_shapes, "with_stack": with_stack,
                        "profile_memory": profile_memory, "with_modules": with_modules}
        self._cuda = cuda
        self._fr_wanted = flight_recorder
        self._dump_signal = dump_signal
        self._stall_timeout_s = stall_timeout_s
        self._ingest = ingest
        self._wait_ingest = wait_ingest
        self._ingest_timeout_s = ingest_timeout_s
        self._on_demand = on_demand
        self._step_measures = step_measures
        self._measures: measures.StepMeasures | None = None
        self._first_step = _first_step
        self._status = _status
        self._own_status = False
        self._ondemand: OnDemand | None = None
        self._static: Any = None  # torch's schedule function; None when only triggered windows are recorded
        self._ending_step = 0
        self.run_dir: Path | None = None
        self.rank_info: RankInfo | None = None
        self.run: Run | None = None
        self.ingest_process: subprocess.Popen | None = None
        self._files: RankFiles | None = None
        self._prof: Any = None
        self._watch: DumpWatch | None = None
        self._dist_info_pending = False
        self._discard = False  # the trace being stopped is dropped, not written
        self._last_step = time.monotonic()
        self._entered = False

    @property
    def failures(self) -> list[dict[str, str]]:
        return self._files.failures if self._files else []

    # -- entry -------------------------------------------------------------------------------------------
    def __enter__(self) -> Profile:
        if self._entered:
            raise UsageError("ddprof.profile: this profile is already running")
        path = layout.resolve_run_dir(self._run_dir_arg)
        info = detect_rank()
        layout.claim(path, info.rank, "profile")  # the one deliberate raise: a reused run dir
        self.run_dir, self.rank_info, self._entered = path, info, True
        self._files = files = RankFiles(path, info)
        cuda = False
        try:
            import torch

            cuda = torch.cuda.is_available() if self._cuda is None else self._cuda
        except Exception as exc:
            files.fail("setup", exc)
        if not files.failures and files.open(self._enabled(cuda)):
            if self._step_measures:
                self._measures = measures.start(path, info.rank, info.world_size, self._first_step)
            self._start_flight_recorder(files)
            self._start_on_demand(files)
            self._start_profiler(files, cuda)
        else:
            log.error("ddprof: capture is off for rank %d: %s cannot be written", info.rank, path)
        return self

    def _enabled(self, cuda: bool) -> dict[str, Any]:
        return {"activities": ["cpu", "cuda"] if cuda else ["cpu"], "schedule": dict(self.schedule),
                **self.options, "flight_recorder": self._fr_wanted,
                "dump_signal": signal.Signals(self._dump_signal).name if self._dump_signal else None,
                "stall_timeout_s": self._stall_timeout_s,
                "ingest": "off" if not self._ingest else "sync" if self._wait_ingest else "background",
                "on_demand": self._on_demand, "step_measures": self._step_measures}

    def _start_on_demand(self, files: RankFiles) -> None:
        if not self._on_demand:
            return
        try:
            if self._status is None:
                self._status, self._own_status = ProcessStatus(files.run_dir, step_source="prof.step()"), True
            self._ondemand = OnDemand(files.run_dir, self._status, step=self._first_step)
            listening = self._ondemand.install_signal()
            self._status.update(rank=files.info.rank, world_size=files.info.world_size, listening=listening,
                                first_recorded_step=self._first_recorded(), active=self.schedule["active"],
                                force=True)
        except Exception as exc:
            files.fail("on-demand listener", exc)
            self._ondemand = None

    def _first_recorded(self) -> int | None:
        if self.schedule["active"] == 0:
            return None
        return self.schedule["skip_first"] + self.schedule["wait"] + self.schedule["warmup"]

    def _action(self, step: int) -> Any:
        """The profiler's action at ``step``: the schedule's, joined with the windows asked for on demand
        (a step either records is recorded; the trace is saved when no recording continues past it)."""
        from torch.profiler import ProfilerAction as A

        static = self._static(step) if self._static is not None else A.NONE
        od = self._ondemand
        if od is None:
            return static

        def records(s: int) -> bool:
            st = self._static(s) if self._static is not None else A.NONE
            return st in (A.RECORD, A.RECORD_AND_SAVE) or od.covering(s) is not None

        if records(step):
            static_saves = static == A.RECORD_AND_SAVE and od.covering(step + 1) is None
            window = od.covering(step)
            continues = (od.covering(step + 1) is not None
                         or (records(step + 1) and static != A.RECORD_AND_SAVE and
                             (window is None or window.end > step)))
            return A.RECORD_AND_SAVE if static_saves or not continues else A.RECORD
        return A.WARMUP if static == A.WARMUP else A.NONE  # a window starts without warm-up (ondemand doc)

    def _trace_ready(self, prof: Any) -> None:
        """``on_trace_ready``: write the window that ended at the step just finished, named for what asked."""
        assert self._files is not None
        od, last = self._ondemand, self._ending_step
        if self._discard:  # the steps recorded before a window's start moved (ondemand doc): not a window
            self._discard = False
            if self._status is not None:
                self._status.update(recording=None, force=True)
            return
        window = None
        if od is not None:
            window = max((w for w in od.windows if w.start <= last), key=lambda w: w.end, default=None)
        path = self._files.write_trace(prof, window.label if window is not None else None)
        if self._status is not None:
            if path is not None:
                self._status.data["traces"].append(path.name)
            self._status.update(recording=None, force=True)
        if od is not None and path is not None:
            od.written(last, path.name)

    def _start_flight_recorder(self, files: RankFiles) -> None:
        if not self._fr_wanted:
            return
        try:
            if initialised_dist() is None:  # the process group does not exist yet: the settings arrive in time
                os.environ.update(flight_recorder.fr_env(files.run_dir, files.info.rank,
                                                         flight_recorder.DEFAULT_BUFFER, True, dict(os.environ)))
            elif not flight_recorder.buffer_enabled():
                files.meta["enabled"]["flight_recorder"] = False
                files.warn("Flight Recorder is off: its buffer size must be set before the process group is "
                           "created; call ddprof.init() before init_process_group (or use ddprof launch)")
                return
            if flight_recorder.dump_function(None) is None:
                files.meta["enabled"]["flight_recorder"] = False
                files.warn("this torch build has no Flight Recorder")
                return
            self._watch = DumpWatch(files.dump_flight_recorder, lambda: self._last_step,
                                    signum=self._dump_signal, stall_timeout_s=self._stall_timeout_s)
            self._watch.start()
        except Exception as exc:
            files.fail("flight_recorder", exc)

    def _start_profiler(self, files: RankFiles, cuda: bool) -> None:
        try:
            from torch.profiler import ProfilerActivity, schedule
            from torch.profiler import profile as torch_profile

            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            if self.schedule["active"] > 0:
                self._static = schedule(**self.schedule)
            prof = torch_profile(activities=activities, schedule=self._action,
                                 on_trace_ready=self._trace_ready, **self.options)
            if self._first_step:  # capture started late (ddprof launch): number the steps as the job does
                prof.step_num = self._first_step
                prof.current_action = prof._prev_schedule_action = self._action(self._first_step)
            self._ending_step = prof.step_num
            self._dist_info_pending = True
            self._preset_distributed_info(prof)
            prof.start()
            self._prof = prof
            self._note_step(prof)
        except Exception as exc:
            files.fail("profiler start", exc)

    def _preset_distributed_info(self, prof: Any) -> None:
        """Before the process group exists, tell the trace which rank it is (torch writes nothing then)."""
        assert self.rank_info is not None
        if initialised_dist() is not None:
            prof.preset_metadata.pop("distributedInfo", None)
            self._dist_info_pending = False
            return
        info = {"rank": self.rank_info.rank, "world_size": self.rank_info.world_size, "backend": None,
                "source": f"ddprof ({self.rank_info.source})"}
        prof.preset_metadata_json("distributedInfo", json.dumps(info))

    # -- during training ---------------------------------------------------------------------------------
    def step(self) -> None:
        """Mark the end of a training step (calls ``torch.profiler.profile.step``)."""
        if self._measures is not None:
            self._measures.boundary()
        self._last_step = time.monotonic()
        prof = self._prof
        if prof is None:
            return
        try:
            if self._dist_info_pending:
                self._preset_distributed_info(prof)
            self._ending_step = prof.step_num
            if self._ondemand is not None:
                moved = self._ondemand.boundary(prof.step_num + 1)
                if moved:
                    self._drop_moved(prof, moved)
            if _stops_here(prof):
                _settle(prof)
            prof.step()
            self._note_step(prof)
        except Exception as exc:
            assert self._files is not None
            self._files.fail("profiler step", exc)
            self._prof = None

    def _drop_moved(self, prof: Any, moved: list[Moved]) -> None:
        """A window's start moved while it was being recorded (ondemand doc): when nothing else asked for the
        steps recorded so far, stop the trace without writing it; the profiler starts anew at the new start."""
        from torch.profiler import ProfilerAction as A

        if prof.current_action not in (A.RECORD, A.RECORD_AND_SAVE):
            return
        od = self._ondemand
        assert od is not None
        for m in moved:
            for s in range(m.old_start, prof.step_num + 1):
                static = self._static(s) if self._static is not None else A.NONE
                if static in (A.RECORD, A.RECORD_AND_SAVE) or od.covering(s) is not None:
                    return  # recorded for another reason too: the trace goes on
        prof.current_action = A.RECORD_AND_SAVE  # stop_trace and on_trace_ready at this step(), then restart
        self._discard = True

    def _note_step(self, prof: Any) -> None:
        """After the profiler began step ``prof.step_num``: the status file's step, and the window begun."""
        from torch.profiler import ProfilerAction as A

        step, recording = prof.step_num, prof.current_action in (A.RECORD, A.RECORD_AND_SAVE)
        if self._ondemand is not None and recording:
            self._ondemand.began(step)
        status = self._status
        if status is None:
            return
        fields: dict[str, Any] = {"step": step, "steps_seen": step, "step_wall": time.time()}
        if recording and status.data.get("recording") is None:
            end = step
            while end < step + 100000 and self._action(end) != A.RECORD_AND_SAVE:
                end += 1
            fields["recording"] = {"start_step": step, "end_step": end}
            status.update(force=True, **fields)
        else:
            status.update(**fields)

    def dump_flight_recorder(self) -> None:
        """Dump this rank's Flight Recorder now (also done at exit, on the signal and on a stall)."""
        if self._watch is not None and self._files is not None:
            self._files.dump_flight_recorder("requested")

    # -- exit --------------------------------------------------------------------------------------------
    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Literal[False]:
        self._entered = False
        files = self._files
        if files is None or not files.writable:
            return False
        if self._prof is not None:
            try:
                self._ending_step = self._prof.step_num
                if _recording(self._prof):
                    _settle(self._prof)
                self._prof.stop()  # exports a cycle still being recorded
            except Exception as err:
                files.fail("profiler stop", err)
            self._prof = None
        if self._watch is not None:
            self._watch.stop()
            self._watch = None
            files.dump_flight_recorder("exit")
        if self._measures is not None:
            self._measures.close()
            self._measures = None
        self.rank_info = files.close(exc)
        if self._own_status and self._status is not None:
            self._status.update(exit={"how": "profile exited" if exc is None else f"raised {type(exc).__name__}",
                                      "wall": time.time()}, listening=False, force=True)
        if self.rank_info.rank == 0 and self._ingest:
            if files.closed:
                self._start_ingest(files)
            else:  # the finisher would wait its whole timeout for a status this rank could not write
                log.error("ddprof: rank 0 could not write its final meta file (logged above); no ingest now: "
                          "once there is room, run `ddprof finish %s`", self.run_dir)
        return False

    def _start_ingest(self, files: RankFiles) -> None:
        assert self.run_dir is not None and self.rank_info is not None
        try:
            if self._wait_ingest:
                self.run = finish.finish(self.run_dir, world_size=self.rank_info.world_size,
                                         timeout_s=self._ingest_timeout_s)
            else:
                self.ingest_process = finish.start_background(self.run_dir, world_size=self.rank_info.world_size,
                                                              timeout_s=self._ingest_timeout_s)
        except Exception as exc:
            files.fail("ingest", exc)


def profile(run_dir: str | Path | None = None, **options: Any) -> Profile:
    """Profile this rank into ``run_dir`` (default ``$DDPROF_RUN_DIR``). A context manager and a decorator.

    Options (defaults): schedule ``wait=1, warmup=1, active=3, repeat=1, skip_first=0`` (steps, counted by
    :meth:`Profile.step`; ``repeat=0`` repeats until exit, one trace file per cycle); ``record_shapes=True``
    (collective sizes come from the recorded input shapes), ``with_stack=False``, ``profile_memory=False``,
    ``with_modules=False``; ``cuda=None`` (CUDA activities when a GPU is visible); ``flight_recorder=True``,
    dumped at exit, on ``dump_signal=SIGUSR1`` and after ``stall_timeout_s=600`` without a step;
    ``ingest=True`` (rank 0 ingests at exit, in a background process, or before returning with
    ``wait_ingest=True``), waiting at most ``ingest_timeout_s=120`` for the other ranks' files;
    ``on_demand=False``: with True, also record the windows ``ddprof trigger`` asks for while the job runs
    (:mod:`ddprof.collectors.ondemand`), and ``active=0`` records nothing else; ``step_measures=True``:
    every step's wall time, collectives, data-loader wait, CPU and memory, always on, appended to
    ``RUN/measures/rank-NNNNN.steps.jsonl`` (:mod:`ddprof.collectors.measures`; read by ``ddprof top``).
    """
    return Profile(run_dir, **options)


#: How long the profiler waits, at the end of a recorded window, before it stops (:func:`_settle`).
SETTLE_S = 0.02


def _recording(prof: Any) -> bool:
    from torch.profiler import ProfilerAction as A

    return prof.current_action in (A.RECORD, A.RECORD_AND_SAVE)


def _stops_here(prof: Any) -> bool:
    """Whether the next ``prof.step()`` stops the trace (every transition out of RECORD_AND_SAVE does)."""
    from torch.profiler import ProfilerAction as A

    return bool(prof.current_action == A.RECORD_AND_SAVE)


def _settle(prof: Any) -> None:
    """Close the step's annotation, then let collectives finishing on other threads leave the profiler
    before it stops.

    Gloo completes a collective's future before its worker thread ends the operation's record (c10d's
    ``finishWorkGloo``: the future, then ``Work::finish``, which runs the record's end callback), so a rank
    whose step returns on that future can stop the profiler while the worker still writes the end of its
    record into the event list the stop is collecting and freeing: a heap corruption, seen as a rank
    aborting with ``malloc(): unsorted double linked list corrupted`` just after ``profiler_stop``. The
    window is microseconds unless the worker is preempted: :data:`SETTLE_S` once per recorded window,
    after the step's annotation is closed so that no step is measured longer.
    """
    if getattr(prof, "record_steps", False) and getattr(prof, "step_rec_fn", None) is not None:
        prof.step_rec_fn.__exit__(None, None, None)
        prof.step_rec_fn = None  # step() and stop() exit it only when set
    time.sleep(SETTLE_S)
