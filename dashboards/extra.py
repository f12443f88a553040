"""The ``dash`` extra: the dashboard and the HTML report need plotly (and the app Dash); say how to get them."""

from __future__ import annotations

from importlib.util import find_spec

from ddprof.errors import UsageError


def require(*modules: str, what: str = "the dashboard") -> None:
    """Raise a UsageError naming the install command when one of ``modules`` is not installed."""
    missing = [m for m in modules if find_spec(m) is None]
    if missing:
        raise UsageError(f"{what} needs {', '.join(missing)}: install it with `pip install 'ddprof[dash]'`")
