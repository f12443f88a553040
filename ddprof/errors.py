"""One error hierarchy. Each class carries its exit code; the CLI's ``main`` is the one place that turns
an error into a message and that code (0 ok, 1 problem found, 2 bad input or usage, 3 partial)."""

from __future__ import annotations

from pathlib import Path


class DdprofError(Exception):
    """Base of every error ddprof raises on purpose."""

    exit_code = 2


class UsageError(DdprofError):
    """The command line or API call asks for something impossible."""


class OutputError(UsageError):
    """An output cannot be written: a directory the user may not write, a read-only mount, a full disk.
    One sentence naming the path (and, for a full disk, the space needed)."""

    def __init__(self, message: str, *, path: str | Path | None = None):
        self.path = str(path) if path is not None else None
        super().__init__(message)


class BadInputError(DdprofError):
    """A trace (or dump) cannot be read. Names the file, the rank when known, and the cause."""

    def __init__(self, message: str, *, path: str | Path | None = None, rank: int | None = None):
        self.path = str(path) if path is not None else None
        self.rank = rank
        self.cause = message
        where = []
        if self.path:
            where.append(self.path)
        if rank is not None:
            where.append(f"rank {rank}")
        super().__init__(f"{': '.join([', '.join(where)] if where else [])}{': ' if where else ''}{message}")


class RankError(BadInputError):
    """The rank of a trace is missing, ambiguous, or claimed twice."""


class SchemaError(DdprofError):
    """A store or table does not match the event schema."""


class PartialRunError(DdprofError):
    """Some ranks failed; the others were analysed. Carries the failures."""

    exit_code = 3

    def __init__(self, failures: list[BadInputError]):
        self.failures = failures
        lines = "\n".join(f"  - {f}" for f in failures)
        super().__init__(f"{len(failures)} input(s) failed and were left out:\n{lines}")


class ProblemFound(DdprofError):
    """An analysis or check found a problem in the run (regression, hang...)."""

    exit_code = 1



class InternalError(Exception):
    """A bug in ddprof met while handling one input, re-raised once the others are done. Not a
    :class:`DdprofError` on purpose: the CLI reports it as an internal error (exit 70), never as bad input."""
