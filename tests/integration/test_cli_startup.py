"""Start-up and end: ``ddprof --help`` and ``--version`` import no command module, hence neither Polars,
pyarrow nor torch; a command loads what it uses (ingesting a Kineto trace loads no other format's parser,
no report section); the group's table of lazy commands agrees with the commands it names; what a command
loaded is frozen in the program only; the program ends without tearing the interpreter down, its exit
handlers run and its output whole."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys

import click
import pytest

from ddprof.cli import COMMANDS, cli
from ddprof.cli import main as cli_main
from tests.support.paths import trace_set

HEAVY = ("polars", "pyarrow", "torch", "numpy", "sqlite3", "tomllib")
PROBE = """
import json, sys
sys.argv = ["ddprof", *json.loads(sys.argv[1])]
from ddprof.__main__ import main
rc = main()
loaded = sorted(m for m in sys.modules if m.split(".")[0] in {heavy!r} or m.startswith("ddprof.cli.")
                or m.startswith(("ddprof.collectors", "ddprof.analyses", "ddprof.ingestion", "ddprof.readers",
                                 "ddprof.render", "ddprof.report")))
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


def test_ingesting_a_kineto_trace_loads_no_other_formats_parser(tmp_path):
    trace = next(trace_set("dlrm-8xV100-nccl").glob("*.json.gz"))
    rc, loaded, out = start("ingest", str(trace), "-o", str(tmp_path / "run"))
    assert rc == 0 and "run: 1 rank(s)" in out
    assert "ddprof.ingestion.job" in loaded and "ddprof.render.run" in loaded
    unused = ("sqlite3", "ddprof.readers.nsys.export", "ddprof.readers.nsys.events",
              "ddprof.readers.flightrec.records", "ddprof.readers.flightrec.dump", "ddprof.render.text",
              "ddprof.analyses", "ddprof.report.display")
    assert not [m for m in loaded if m.startswith(unused)]


def test_the_program_freezes_what_a_command_loaded_a_caller_not(monkeypatch):
    frozen: list[bool] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(True))
    assert cli_main(["diff", "--help"], program=True) == 0
    assert frozen  # the command was loaded, then what it loaded frozen
    frozen.clear()
    assert cli_main(["diff", "--help"]) == 0
    assert not frozen


END = """
import atexit, os, pathlib, sys
atexit.register(lambda: pathlib.Path(os.environ["HANDLER_MARK"]).write_text("handler ran"))
sys.argv = ["ddprof", *sys.argv[1:]]
from ddprof.__main__ import run
run()
print("never reached")
"""


@pytest.mark.parametrize("args, code", [(["--version"], 0), (["diff"], 2)])
def test_the_program_ends_with_its_handlers_run_and_its_output_whole(tmp_path, args, code):
    mark = tmp_path / "handler"
    proc = subprocess.run([sys.executable, "-c", END, *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "HANDLER_MARK": str(mark)})
    assert proc.returncode == code, proc.stderr
    assert mark.read_text() == "handler ran"
    assert "never reached" not in proc.stdout
    assert ("ddprof, version" in proc.stdout) if code == 0 else ("Missing argument" in proc.stderr)
