"""Command line: thin commands, one module each; errors map to exit codes here and only here.

Exit codes: 0 ok, 1 an analysis or check found a problem, 2 bad input or usage, 3 partial (some
ranks failed; the rest were analysed and the failures named), 70 internal error (a bug in ddprof).
Commands raise; only :func:`main` turns errors into messages and codes.
"""

from __future__ import annotations

import gc
import traceback
from importlib import import_module
from typing import Any

import click

from ddprof.errors import DdprofError
from ddprof.version import __version__

INTERNAL_ERROR = 70  # EX_SOFTWARE

#: Every command: name -> ("module:attribute", the first sentence of its help). The group lists and
#: describes its commands from this table alone and imports a command's module (and what that loads:
#: Polars, pyarrow, the collectors) only when the command runs, so ``ddprof --help`` and ``--version``
#: start in the time of Python and click. tests/integration/test_cli_startup.py checks the table against the commands.
COMMANDS: dict[str, tuple[str, str]] = {
    "analyze": ("ddprof.cli.analyze_cmd:analyze",
                "Analyse a run: raw traces, a run dir, or a directory of NCCL Flight Recorder dumps."),
    "dashboard": ("ddprof.cli.dashboard_cmd:dashboard",
                  "Serve an interactive dashboard of a run: per-rank timelines and the report's panels."),
    "check": ("ddprof.cli.check_cmd:check",
              "Check a run against a baseline: exit 1 when it regressed beyond tolerance and noise."),
    "diff": ("ddprof.cli.diff_cmd:diff",
             "Compare two runs side by side: per kernel and collective, count, total and per-step time."),
    "export": ("ddprof.cli.export_cmd:export",
               "Export a run's ranks merged into one Chrome trace / Perfetto JSON file (open it in ui.perfetto.dev)."),
    "finish": ("ddprof.cli.finish_cmd:finish",
               "Wait for a capture's ranks to write their files, then ingest them into RUN_DIR."),
    "ingest": ("ddprof.cli.ingest_cmd:ingest",
               "Ingest Kineto traces (files, directories, .json or .json.gz) into a run dir."),
    "launch": ("ddprof.cli.launch_cmd:launch",
               "Run COMMAND (e.g. torchrun ... train.py) with ddprof's capture settings on every rank."),
    "synth": ("ddprof.cli.synth_cmd:synth",
              "Write a generated run: OUT_DIR/traces (Kineto JSON per rank, or one Nsight Systems SQLite export with "
              "--format nsys) and OUT_DIR/truth.json (its true metrics)."),
    "top": ("ddprof.cli.top_cmd:top",
            "Show a running job's steps per rank, live: step time, own time, wait caused, the straggler, the trend."),
    "trigger": ("ddprof.cli.trigger_cmd:trigger",
                "Ask a running capture (ddprof launch, or ddprof.profile(on_demand=True)) to record the next steps."),
    "whatif": ("ddprof.cli.whatif_cmd:whatif",
               "Project a run's step time under edits (straggler removed, faster communication...) by replaying its "
               "cross-rank dependency model."),
}


class LazyGroup(click.Group):
    """A group whose commands are imported on first use (click's documented lazy-loading pattern).

    In the ``ddprof`` program (:func:`main` with ``program=True``), what importing a command made (the
    modules of Polars, NumPy, pyarrow and ddprof: a few hundred thousand objects) lives until the process
    exits, so it is frozen once loaded (:func:`gc.freeze`): the cyclic collector's full passes then walk only
    what the command makes. Measured on the 54 MB trace's ingest: one full pass of 21 ms, set off by the
    first piece decoded, found nothing to free. A library caller's or a test's process is left as it is."""

    freeze_loaded = False

    def __init__(self, *args: Any, lazy_commands: dict[str, tuple[str, str]], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = lazy_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            return self.load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def load(self, cmd_name: str) -> click.Command:
        module, _, attr = self.lazy_commands[cmd_name][0].partition(":")
        cmd = getattr(import_module(module), attr)
        if not isinstance(cmd, click.Command):
            raise TypeError(f"{module}:{attr} is not a click command")
        if self.freeze_loaded:
            gc.freeze()
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Click's listing, with each lazy command described by its table entry: listing imports none."""
        cmds = [(name, self.commands.get(name) or click.Command(name, help=self.lazy_commands[name][1]))
                for name in self.list_commands(ctx)]
        cmds = [(name, cmd) for name, cmd in cmds if not cmd.hidden]
        if cmds:
            limit = formatter.width - 6 - max(len(name) for name, _ in cmds)
            with formatter.section("Commands"):
                formatter.write_dl([(name, cmd.get_short_help_str(limit)) for name, cmd in cmds])


@click.group(cls=LazyGroup, lazy_commands=COMMANDS,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ddprof")
def cli() -> None:
    """Where the time went in a distributed training job: ingest Kineto traces, analyse them."""


def main(argv: list[str] | None = None, program: bool = False) -> int:
    """Console entry point: runs the CLI and turns ddprof errors into messages and exit codes. ``program``:
    this process is the ``ddprof`` program, and ends with the command (:class:`LazyGroup`)."""
    LazyGroup.freeze_loaded = program
    try:
        rv = cli.main(args=argv, prog_name="ddprof", standalone_mode=False)
    except DdprofError as exc:
        click.echo(f"ddprof: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("ddprof: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except Exception:  # a bug: say so, keep the evidence, and never look like "problem found" (1)
        click.echo("ddprof: internal error (a bug in ddprof; please report it with the command and the "
                   "traces):\n" + traceback.format_exc(), err=True)
        return INTERNAL_ERROR
    return rv if isinstance(rv, int) else 0

