"""A project's ddprof settings, read from a file beside the code: the rules that name communication
kernels, and whether ``ddprof check`` fails on a change whose cause is the environment.

The file is the first found from the current directory up to the root:

* ``ddprof.toml``, with ``comm_kernels = ["REGEX[=op]", ...]`` at its top level, or
* ``pyproject.toml`` with a ``[tool.ddprof]`` table holding the same key (a ``pyproject.toml``
  without that table is passed over).

``check_environment = "warn"`` (or ``"fail"``, the default) is ``ddprof check --environment``'s default
when the rules file does not set ``environment``.

Each rule is what ``--comm-kernel`` takes (:func:`ddprof.vocabulary.collective_ops.parse_rule`); the command
line's rules come first, then the file's. A file that cannot be read, or a rule that is not one, is a
:class:`~ddprof.errors.UsageError` naming the file and the rule (exit 2). Example ``ddprof.toml``::

    comm_kernels = ["my_fused_allreduce=all_reduce", "ep_exchange_.*=all_to_all", "not_a_comm=none"]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ddprof.errors import UsageError
from ddprof.vocabulary.collective_ops import RuleError, parse_rule

CONFIG_NAME = "ddprof.toml"


@dataclass(frozen=True)
class Config:
    """The settings found (``path`` None when no file holds any)."""

    path: Path | None = None
    comm_kernels: tuple[str, ...] = ()
    check_environment: str | None = None


def _read(path: Path) -> dict[str, Any]:
    try:  # the parser loaded only where a file is found (most commands find none)
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the configuration ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from None


def _table(path: Path) -> dict[str, Any] | None:
    """The ddprof settings of one file, or None when it has none (a pyproject.toml without [tool.ddprof])."""
    data = _read(path)
    if path.name == CONFIG_NAME:
        return data
    tool = data.get("tool")
    table = tool.get("ddprof") if isinstance(tool, dict) else None
    if table is None:
        return None
    if not isinstance(table, dict):
        raise UsageError(f"{path}: [tool.ddprof] must be a table")
    return table


def find_config(start: Path | None = None) -> Path | None:
    """The first ``ddprof.toml``, or ``pyproject.toml`` with ``[tool.ddprof]``, from ``start`` (default:
    the current directory) up to the root."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        for name in (CONFIG_NAME, "pyproject.toml"):
            candidate = folder / name
            if candidate.is_file() and _table(candidate) is not None:
                return candidate
    return None


def load_config(start: Path | None = None) -> Config:
    """The settings of the project ``start`` is in (:func:`find_config`); every rule checked."""
    path = find_config(start)
    if path is None:
        return Config()
    table = _table(path) or {}
    rules = table.get("comm_kernels", [])
    if not isinstance(rules, list) or not all(isinstance(r, str) for r in rules):
        raise UsageError(f"{path}: comm_kernels must be a list of strings, each 'REGEX[=op]'")
    for rule in rules:
        try:
            parse_rule(rule)
        except RuleError as exc:
            raise UsageError(f"{path}: {exc}") from None
    env = table.get("check_environment")
    if env is not None and env not in ("fail", "warn"):
        raise UsageError(f"{path}: check_environment must be \"fail\" or \"warn\", got {env!r}")
    return Config(path=path, comm_kernels=tuple(rules), check_environment=env)


def comm_kernel_rules(cli: Sequence[str], start: Path | None = None) -> tuple[str, ...]:
    """The communication kernel rules in force: the command line's first, then the project file's;
    each checked (a bad one is a UsageError naming it)."""
    for rule in cli:
        try:
            parse_rule(rule)
        except RuleError as exc:
            raise UsageError(f"--comm-kernel: {exc}") from None
    return (*cli, *load_config(start).comm_kernels)
