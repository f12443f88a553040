"""Dump the Flight Recorder on request (a signal) or when the training loop stalls.

A Python signal handler only runs when the main thread returns to the interpreter, which a rank stuck
in a collective never does. So the handler is a no-op and ``signal.set_wakeup_fd`` makes the C-level
handler write the signal number to a pipe that a watcher thread reads: the dump happens even while the
main thread is blocked. The same thread dumps once per stall when no step was taken for
``stall_timeout_s``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

log = logging.getLogger("ddprof.collectors")

#: What ``signal.signal`` accepts and ``signal.getsignal`` returns (None: a handler not set from Python).
_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class DumpWatch:
    def __init__(self, dump: Callable[[str], None], last_step: Callable[[], float], *,
                 signum: int | None, stall_timeout_s: float | None, poll_s: float = 1.0):
        self._dump = dump
        self._last_step = last_step
        self._signum = signum
        self._stall = stall_timeout_s
        self._poll = poll_s if stall_timeout_s is None else min(poll_s, stall_timeout_s / 4)
        self._stop = threading.Event()
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._wfd, False)
        self._old_handler: _Handler = None
        self._old_wakeup: int | None = None
        self._thread = threading.Thread(target=self._run, name="ddprof-fr-watch", daemon=True)

    def start(self) -> None:
        if self._signum is not None:
            self._install_signal(self._signum)
        self._thread.start()

    def _install_signal(self, signum: int) -> None:
        try:
            if signal.getsignal(signum) not in (signal.SIG_DFL, None):
                log.warning("ddprof: signal %s already has a handler; Flight Recorder dumps on request are off",
                            signum)
                return
            wfd = self._wfd
            old_wakeup = signal.set_wakeup_fd(wfd)
            if old_wakeup != -1:  # someone (asyncio...) owns the wakeup fd: give it back, use a plain handler
                signal.set_wakeup_fd(old_wakeup)
                self._old_handler = signal.signal(signum, lambda s, f: os.write(wfd, bytes([s])))
            else:
                self._old_wakeup = old_wakeup
                self._old_handler = signal.signal(signum, lambda s, f: None)
        except (ValueError, OSError) as exc:  # not the main thread, or no such signal here
            log.warning("ddprof: cannot dump the Flight Recorder on signal %s: %s", signum, exc)
            self._signum = None

    def stop(self) -> None:
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wfd, b"\0")
        if self._thread.is_alive():
            self._thread.join(timeout=5)
        if self._signum is not None and self._old_handler is not None:
            try:
                signal.signal(self._signum, self._old_handler)
                if self._old_wakeup is not None:
                    signal.set_wakeup_fd(self._old_wakeup)
            except (ValueError, OSError) as exc:
                log.warning("ddprof: could not restore signal %s: %s", self._signum, exc)
        for fd in (self._rfd, self._wfd):
            with contextlib.suppress(OSError):
                os.close(fd)

    def _run(self) -> None:
        stalled_since: float | None = None
        while not self._stop.is_set():
            ready, _, _ = select.select([self._rfd], [], [], self._poll)
            if self._stop.is_set():
                return
            received = os.read(self._rfd, 512) if ready else b""
            if self._signum is not None and bytes([self._signum]) in received:
                self._dump(f"signal {signal.Signals(self._signum).name}")
            if self._stall is not None:
                last = self._last_step()
                if time.monotonic() - last > self._stall and stalled_since != last:
                    stalled_since = last
                    self._dump(f"no step for {self._stall:g} s")
