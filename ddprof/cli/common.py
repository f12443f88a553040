"""Options and helpers shared by commands: the ``--rank`` option, writing an output, and the errors
(hence exit codes) a report's status and a run's failed inputs stand for."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import click
import msgspec

from ddprof.errors import BadInputError, PartialRunError, ProblemFound, UsageError
from ddprof.report.schema import FailedInput, Hang, rows
from ddprof.store.atomic import write_text_atomic

F = TypeVar("F", bound=Callable[..., Any])


def parse_rank_map(values: tuple[str, ...]) -> dict[str, int] | None:
    """``("a.json=0", "b.json=1")`` -> ``{"a.json": 0, "b.json": 1}``."""
    out: dict[str, int] = {}
    for v in values:
        name, sep, num = v.rpartition("=")
        if not sep or not name or not num.isdigit():
            raise UsageError(f"--rank expects FILE=N (e.g. --rank trace.json=3), got {v!r}")
        out[name] = int(num)
    return out or None


def rank_option(f: F) -> F:
    """The ``--rank FILE=N`` option, shared by the commands that ingest."""
    return click.option("--rank", "ranks", multiple=True, metavar="FILE=N",
                        help="Rank of a trace that does not say (repeatable).")(f)


def comm_kernel_option(f: F) -> F:
    """The ``--comm-kernel REGEX[=op]`` option (repeatable), shared by the commands that ingest."""
    return click.option("--comm-kernel", "comm_kernels", multiple=True, metavar="REGEX[=op]",
                        help="GPU kernels whose name matches REGEX are communication, with op OP (all_reduce, "
                             "all_gather, reduce_scatter, all_to_all, ...; none: not communication; default: "
                             "read from the name). Repeatable; tried in order, before the project's rules "
                             "(ddprof.toml, or [tool.ddprof] in pyproject.toml) and the built-in families.")(f)


def rules_in_force(cli: tuple[str, ...]) -> tuple[str, ...] | None:
    """The communication kernel rules for :func:`ddprof.inputs.sources.open_source`: the command line's and the
    project file's (each checked), or None when neither gives one, so a run dir ingested with rules is
    analysed as it stands instead of being refused for rules nobody asked to change."""
    from ddprof.cli.config import comm_kernel_rules

    return comm_kernel_rules(cli) or None


def executor_option(f: F) -> F:
    """``--executor local|ray`` and ``--address``: where the per-rank work runs (:mod:`ddprof.runtime.executors`)."""
    f = click.option("--address", metavar="ADDRESS", default=None,
                     help="Ray cluster to join (ray://HEAD:10001, HEAD:6379 or auto); default: start Ray here.")(f)
    return click.option("--executor", type=click.Choice(["local", "ray"]), default="local", show_default=True,
                        help="Where the per-rank work runs: here, or as Ray tasks (the ray extra) on machines "
                             "that mount the run dir at the same path.")(f)


def partial_failure(failed: Sequence[dict[str, Any]], rest: str) -> PartialRunError:
    """The error (exit 3) for inputs that failed (a run summary's ``failed``: :class:`FailedInput`, the
    error naming the file), naming each; ``rest`` says what became of the others."""
    err = PartialRunError([BadInputError(f.error or "failed") for f in rows(list(failed), FailedInput)])
    err.args = (f"{err}\n{rest}",)
    return err


def exit_for_status(report: Mapping[str, Any]) -> int:
    """Map a report's ``status`` to the exit code: ``ok`` 0; ``problem`` (a hang) raises ProblemFound
    (1) with the verdict; ``partial`` raises PartialRunError (3) naming each failed input."""
    status = report.get("status")
    if status == "problem":
        raise ProblemFound(msgspec.convert(report["hang"], Hang).verdict or "a hang was found (see the report)")
    if status == "partial":
        raise partial_failure(report["run"]["failed"], "the other ranks were analysed")
    return 0


def emit(text: str, output: str | None) -> None:
    """Print, or write atomically to ``output``."""
    if output and output != "-":
        write_text_atomic(output, text if text.endswith("\n") else text + "\n")
    else:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")


def parse_selection(text: str, what: str) -> list[int]:
    """``"0,2,4-7"`` -> ``[0, 2, 4, 5, 6, 7]``; anything else is a usage error naming ``what``."""
    out: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise UsageError(f"--{what} expects numbers and ranges such as 0,2,4-7; got {text!r}")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise UsageError(f"--{what}: the range {part!r} runs backwards")
        out.update(range(a, b + 1))
    return sorted(out)
