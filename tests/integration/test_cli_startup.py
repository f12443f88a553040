"""Start-up: ``ddprof --help`` and ``--version`` import no command module, hence neither Polars, pyarrow
nor torch; the group's table of lazy commands agrees with the commands it names."""

from __future__ import annotations

import json
import subprocess
import sys

import click
import pytest

from ddprof.cli import COMMANDS, cli

HEAVY = ("polars", "pyarrow", "torch", "numpy")
PROBE = """
import json, sys
sys.argv = ["ddprof", *json.loads(sys.argv[1])]
from ddprof.__main__ import main
rc = main()
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r} or m.startswith("ddprof.cli.")
                or m.startswith(("ddprof.collectors", "ddprof.analyses", "ddprof.ingestion", "ddprof.readers")))
print("\\n" + json.dumps({{"rc": rc, "loaded": loaded}}))
"""


def start(*args: str) -> tuple[int, list[str], str]:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY), json.dumps(args)],
                          capture_output=True, text=True, timeout=60, check=True)
    *out, last = proc.stdout.rstrip("\n").split("\n")
    res = json.loads(last)
    return res["rc"], res["loaded"], "\n".join(out)


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"]])
def test_help_and_version_load_nothing_heavy(args):
    rc, loaded, out = start(*args)
    assert rc == 0
    assert loaded == []
    assert "version" in out if args == ["--version"] else all(f"  {name}  " in out for name in COMMANDS)


def test_a_commands_help_loads_only_that_command():
    rc, loaded, out = start("launch", "--help")
    assert rc == 0 and "Usage: ddprof launch" in out
    assert "ddprof.cli.launch_cmd" in loaded
    assert not [m for m in loaded if m.startswith(("ddprof.cli.analyze_cmd", "ddprof.cli.ingest_cmd", "torch"))]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_the_lazy_table_matches_each_command(name):
    ctx = click.Context(cli)
    cmd = cli.get_command(ctx, name)
    assert isinstance(cmd, click.Command) and cmd.name == name
    # the group's listing shows the table's text: it must be the command's own first sentence
    assert cmd.get_short_help_str(limit=1000) == COMMANDS[name][1]


def test_the_listing_is_clicks_own_for_these_texts():
    ctx = click.Context(cli, info_name="ddprof")
    listing = cli.get_help(ctx).split("Commands:")[1]
    limit = ctx.make_formatter().width - 6 - max(map(len, COMMANDS))
    for name, (_, text) in COMMANDS.items():
        assert f"{name}  " in listing
        assert click.Command(name, help=text).get_short_help_str(limit) in listing
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    assert cli.get_command(ctx, "no-such-command") is None
