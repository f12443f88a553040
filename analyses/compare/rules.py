"""The rules a check applies: default tolerances, overridden per metric by a TOML file.

A relative rule fails only when both hold (noise-aware, :mod:`.stats`):

1. the change is beyond the run-to-run noise the data shows: its interval at ``confidence`` (default 99 %)
   lies wholly on the worse side of zero;
2. the change is at least the rule's tolerance: the practical minimum effect that is worth a failed job.

Default tolerances (``DEFAULTS``; every key can be overridden in the TOML file)::

    confidence = 0.99
    environment = "fail"   a change whose cause is the environment (:mod:`.cause`) fails the check, saying
                           so; "warn": it is told, marked warn, and does not fail (``--environment`` overrides)
    [step_time]        median step time, whole run (all ranks' steps) and per rank
    tolerance_pct = 5      and at least min_change_us = 20 µs
    [step_time_p90]    90th percentile of the step time, whole run and per rank (bootstrap interval)
    tolerance_pct = 10     and at least min_change_us = 20 µs
    [exposed_comm]     exposed communication per step, as % of the step time
    tolerance_pts = 5      percentage points
    [overlap]          % of communication overlapped with compute, per step (lower is worse); overlap
    tolerance_pts = 10     that fell while the step time fell passes, saying so (less compute beside it)
    [idle]             idle share of each step; with exposed_comm, a share that rose while the step time
    tolerance_pts = 5      fell passes, saying so (the same time in a shorter step)
    [bubble]           pipeline bubble per stage (pipeline runs only); a stage whose bubble rose because
    tolerance_pts = 5      its compute fell while its step held passes, saying so (it got faster)
    [busbw]            bus bandwidth per collective op and message size, per instance (lower is worse);
                       point-to-point ops also per link (src → dst rank)
    tolerance_pct = 10
    min_bytes = 1048576    messages under 1 MiB are not compared: their time is mostly the collective's fixed
                           cost (launch, handshake, a peer's scheduling), not bandwidth; on real clean gloo
                           runs a 128 KiB send's busbw moved 1-6 GB/s from run to run. Their time still
                           counts in the step time and the [kernels] rule's communication ops
    [kernels]          time per rank and step of each top kernel (CPU op on a CPU run)
    tolerance_pct = 10     and at least min_share_pct = 1 % of the median step time
    [data_loading]     host time per rank and step in the data loader's spans (runs that have them)
    tolerance_pct = 10     and at least min_share_pct = 5 % of the median step time (the step time's own
                           tolerance: a loader's few ms move with the host's load from run to run)
    [straggler]        a rank named a straggler that was not one in the baseline, or one that was whose
                       wait per step grew by more than the [step_time] tolerance
    enabled = true
    [workload]         counts per step that mean a different workload, not a slower one
    collectives_per_step = 0   allowed change in the median count of collectives per step and rank
    kernels_per_step_pct = 2   allowed change in the median count of kernels per step and rank, in %
    message_sizes = true       the (op, size) pairs must be the same
    op_shapes = true           the top CPU ops must run on the same input shapes, where recorded (a batch
                               size changes no message of a data-parallel job, only the shapes)

Every section takes ``enabled = false``. Absolute rules, any number of them, compare the run alone::

    [[absolute]]
    metric = "busbw_gbps"          # per op and size: give op = "all_reduce" and bytes = "64MiB" (or 67108864)
    op = "all_reduce"
    bytes = "64MiB"
    min = 150
    [[absolute]]
    metric = "exposed_comm_pct"    # or step_time_us, step_time_p90_us, overlap_pct, idle_pct, bubble_pct
    max = 20

An absolute rule reads the run's median over its steps and ranks (over its instances for busbw; the p90
for step_time_p90_us) with its order-statistic interval at ``confidence``: it fails when the whole interval
is beyond the bound, passes when the whole interval is within it, and when the bound lies inside the
interval (the noise cannot tell) passes, or fails with ``strict = true``.
"""

from __future__ import annotations

import copy
import re
import sys
from pathlib import Path
from typing import Any

from ddprof.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DEFAULTS: dict[str, Any] = {
    "confidence": 0.99,
    "environment": "fail",
    "step_time": {"enabled": True, "tolerance_pct": 5.0, "min_change_us": 20.0},
    "step_time_p90": {"enabled": True, "tolerance_pct": 10.0, "min_change_us": 20.0},
    "exposed_comm": {"enabled": True, "tolerance_pts": 5.0},
    "overlap": {"enabled": True, "tolerance_pts": 10.0},
    "idle": {"enabled": True, "tolerance_pts": 5.0},
    "bubble": {"enabled": True, "tolerance_pts": 5.0},
    "busbw": {"enabled": True, "tolerance_pct": 10.0, "min_bytes": 1 << 20},
    "kernels": {"enabled": True, "tolerance_pct": 10.0, "min_share_pct": 1.0},
    "data_loading": {"enabled": True, "tolerance_pct": 10.0, "min_share_pct": 5.0},
    "straggler": {"enabled": True},
    "workload": {"enabled": True, "collectives_per_step": 0.0, "kernels_per_step_pct": 2.0, "message_sizes": True,
                 "op_shapes": True},
    "absolute": [],
}

ABSOLUTE_METRICS = ("busbw_gbps", "step_time_us", "step_time_p90_us", "exposed_comm_pct", "overlap_pct",
                    "idle_pct", "bubble_pct")
_UNITS = {"": 1, "b": 1, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "kb": 10**3, "mb": 10**6, "gb": 10**9}


def parse_bytes(value: object) -> int:
    """``"64MiB"`` -> 67108864; ``"1 GB"`` -> 10**9; an int as is."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise UsageError(f"cannot read a message size from {value!r} (write e.g. 67108864 or \"64MiB\")")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _check_absolute(rule: Any, where: str) -> dict[str, Any]:
    if not isinstance(rule, dict):
        raise UsageError(f"{where}: each [[absolute]] entry is a table")
    unknown = set(rule) - {"metric", "op", "bytes", "min", "max", "name", "strict"}
    if unknown:
        raise UsageError(f"{where}: [[absolute]] has unknown key(s) {sorted(unknown)}")
    if rule.get("metric") not in ABSOLUTE_METRICS:
        raise UsageError(f"{where}: [[absolute]] metric {rule.get('metric')!r} is not one of {list(ABSOLUTE_METRICS)}")
    if "min" not in rule and "max" not in rule:
        raise UsageError(f"{where}: [[absolute]] {rule['metric']} needs min or max")
    if not isinstance(rule.get("strict", False), bool):
        raise UsageError(f"{where}: [[absolute]] strict must be true or false, got {rule['strict']!r}")
    out = dict(rule)
    if rule["metric"] == "busbw_gbps":
        if "op" not in rule or "bytes" not in rule:
            raise UsageError(f"{where}: [[absolute]] busbw_gbps needs op and bytes")
        out["bytes"] = parse_bytes(rule["bytes"])
    return out


def merge_rules(overrides: dict[str, Any], where: str = "rules") -> dict[str, Any]:
    """DEFAULTS with ``overrides`` applied key by key; an unknown section or key is a UsageError."""
    rules = copy.deepcopy(DEFAULTS)
    for key, value in overrides.items():
        if key not in DEFAULTS:
            raise UsageError(f"{where}: unknown rule {key!r} (known: {', '.join(DEFAULTS)})")
        if key == "confidence":
            if not isinstance(value, (int, float)) or not 0.5 <= value < 1:
                raise UsageError(f"{where}: confidence must be a number in [0.5, 1), got {value!r}")
            rules[key] = float(value)
        elif key == "environment":
            if value not in ("fail", "warn"):
                raise UsageError(f"{where}: environment must be \"fail\" or \"warn\", got {value!r}")
            rules[key] = value
        elif key == "absolute":
            if not isinstance(value, list):
                raise UsageError(f"{where}: absolute rules are written [[absolute]]")
            rules[key] = [_check_absolute(r, where) for r in value]
        else:
            if not isinstance(value, dict):
                raise UsageError(f"{where}: [{key}] must be a table")
            for k, v in value.items():
                if k not in DEFAULTS[key]:
                    raise UsageError(f"{where}: [{key}] has no setting {k!r} (known: {', '.join(DEFAULTS[key])})")
                want = type(DEFAULTS[key][k])
                if want is float and isinstance(v, int) and not isinstance(v, bool):
                    v = float(v)
                if not isinstance(v, want):
                    raise UsageError(f"{where}: [{key}] {k} must be {want.__name__}, got {v!r}")
                rules[key][k] = v
    return rules


def load_rules(path: str | Path | None, *, environment: str | None = None) -> dict[str, Any]:
    """The rules of a TOML file (None: the defaults). A file that cannot be read or parsed is a UsageError
    naming it. ``environment``: the project's default for ``environment`` (the file's own wins)."""
    base = {"environment": environment} if environment is not None else {}
    if path is None:
        return merge_rules(base, "the project file")
    try:
        data = tomllib.loads(Path(path).read_text())
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the rules file ({exc.strerror or exc})") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML ({exc})") from exc
    return merge_rules({**base, **data}, str(path))
