"""``ddprof check RUN --baseline BASE [--rules rules.toml] [--format text|json|junit] [-o FILE]``: a run
against a baseline (each a run dir, raw traces, or a saved ``ddprof analyze --format json`` report).
Exit 0 within tolerance, 1 on a regression or a changed workload, 2 on bad input or another job."""

from __future__ import annotations

import click

from ddprof.cli.common import emit


@click.command()
@click.argument("run", type=click.Path(exists=True))
@click.option("--baseline", required=True, type=click.Path(exists=True),
              help="The run to compare with: a run dir, traces, or a saved `ddprof analyze --format json` report.")
@click.option("--rules", type=click.Path(exists=True, dir_okay=False),
              help="TOML file of tolerances and absolute rules (defaults: see the README, 'Use in CI').")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "junit"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the result here (atomically).")
@click.option("--allow-different-job", is_flag=True,
              help="Compare even when the baseline has another world size, ranks or collective pattern.")
@click.option("--cache", type=click.Path(file_okay=False), help="Where to ingest raw traces (as for analyze).")
def check(run: str, baseline: str, rules: str | None, fmt: str, output: str | None, allow_different_job: bool,
          cache: str | None) -> int:
    """Check a run against a baseline: exit 1 when it regressed beyond tolerance and noise."""
    from ddprof.analyses.compare.check import check as run_check
    from ddprof.analyses.compare.rules import load_rules
    from ddprof.inputs.reports import load_report
    from ddprof.render.compare import check_text, junit_xml
    from ddprof.store.atomic import json_text

    cfg = load_rules(rules)
    result = run_check(load_report(run, cache=cache), load_report(baseline, cache=cache), cfg,
                       allow_different_job=allow_different_job, run_source=run, base_source=baseline)
    emit({"json": json_text, "junit": junit_xml, "text": check_text}[fmt](result), output)
    if result["status"] == "ok":
        return 0
    if output or fmt != "text":
        click.echo("ddprof check: " + "\n".join(result["summary"]), err=True)
    return 1
