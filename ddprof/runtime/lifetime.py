"""Worker processes end when the process that started them dies, however it dies.

A process pool's workers (``ddprof ingest``'s, :mod:`ddprof.ingestion.pipeline`) are told to stop by the
pool when the main process leaves normally or on an exception. A main process killed outright (SIGKILL,
the out-of-memory killer) tells them nothing: they were left parsing their batch, parented to init, and the
resource tracker multiprocessing starts beside them stayed too (it exits only when every process holding
its pipe has). :func:`bind_to_parent`, run first in each worker (the pool's ``initializer``), makes the
worker follow its parent:

* on Linux, the kernel sends the worker SIGKILL when its parent dies (``prctl(PR_SET_PDEATHSIG)``);
* everywhere, a daemon thread looks every :data:`WATCH_S` seconds whether the worker's parent is still
  the process that started it (a dead parent's children are re-parented) and ends the worker when not;
* a parent that died before the worker got this far ends it at once.

With the workers gone the resource tracker reads the end of its pipe and exits by itself.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
import time
from typing import Final

#: Seconds between two looks at the parent (the fallback where the kernel does not signal).
WATCH_S: Final = 0.25
#: ``PR_SET_PDEATHSIG`` of ``<linux/prctl.h>``.
PR_SET_PDEATHSIG: Final = 1


def bind_to_parent(parent: int) -> None:
    """End this process when ``parent`` (the pid of the process that started it) dies (module doc)."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):  # no libc to load, or no prctl in it: the watch alone
            pass
    if os.getppid() != parent:
        os._exit(1)
    threading.Thread(target=_watch, args=(parent,), name="ddprof-parent-watch", daemon=True).start()


def _watch(parent: int) -> None:
    while True:
        time.sleep(WATCH_S)
        if os.getppid() != parent:
            os._exit(1)
