"""Command line: thin commands, one module each; errors map to exit codes here and only here.

Exit codes: 0 ok, 1 an analysis or check found a problem, 2 bad input or usage, 3 partial (some
ranks failed; the rest were analysed and the failures named), 70 internal error (a bug in ddprof).
Commands raise; only :func:`main` turns errors into messages and codes.
"""

from __future__ import annotations

import traceback

import click

from ddprof import __version__
from ddprof.cli.analyze_cmd import analyze
from ddprof.cli.ingest_cmd import ingest
from ddprof.collectors.launch import launch_command
from ddprof.errors import DdprofError

INTERNAL_ERROR = 70  # EX_SOFTWARE


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="ddprof")
def cli() -> None:
    """Where the time went in a distributed training job: ingest Kineto traces, analyse them."""


cli.add_command(ingest)
cli.add_command(analyze)
cli.add_command(launch_command)  # `ddprof launch -o RUN -- torchrun ...` (never imports torch itself)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: runs the CLI and turns ddprof errors into messages and exit codes."""
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

