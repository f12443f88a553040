"""``ddprof check RUN --baseline BASE [--baseline BASE2 ...] [--rules rules.toml] [--rank FILE=N] [--environment fail|warn] [--format text|json|junit]
[-o FILE]``: a run against a baseline (each a run dir, raw traces, or a saved ``ddprof analyze --format json``
report; repeated: several runs of the same job, and a rule fails only against all of them). The first line names the verdict and the cause class (environment, code, communication, one rank,
workload). Exit 0 within tolerance (or a change whose cause is the environment, with ``--environment warn``),
1 on a regression, a changed environment (the default: the cause is the machine, and the first line says
so) or a changed workload, 2 on bad input or another job. ``--environment`` defaults to the
rules file's ``environment``, else the project file's ``check_environment`` (:mod:`ddprof.cli.config`), else
fail."""

from __future__ import annotations

import click

from ddprof.cli.common import emit, parse_rank_map, rank_option


@click.command()
@click.argument("run", type=click.Path(exists=True))
@click.option("--baseline", "baselines", required=True, multiple=True, type=click.Path(exists=True),
              help="The run to compare with: a run dir, traces, or a saved `ddprof analyze --format json` report. "
                   "Repeat it for several runs of the same job: a rule fails only when the run is worse than "
                   "every one (their spread is the run-to-run noise one baseline cannot show).")
@click.option("--rules", type=click.Path(exists=True, dir_okay=False),
              help="TOML file of tolerances and absolute rules (defaults: see the README, 'Use in CI').")
@click.option("--environment", type=click.Choice(["fail", "warn"]), default=None,
              help="Whether a change whose cause is the environment (the machine slower, not the code) fails the "
                   "check: fail (the default; it says so) or warn (exit 0). Also `environment` in the rules file "
                   "and `check_environment` in the project file.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "junit"]), default="text", show_default=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the result here (atomically).")
@click.option("--allow-different-job", is_flag=True,
              help="Compare even when the baseline has another world size, ranks or collective pattern.")
@click.option("--cache", type=click.Path(file_okay=False), help="Where to ingest raw traces (as for analyze).")
@rank_option
def check(run: str, baselines: tuple[str, ...], rules: str | None, environment: str | None, fmt: str,
          output: str | None, allow_different_job: bool, cache: str | None, ranks: tuple[str, ...] = ()) -> int:
    """Check a run against a baseline: exit 1 when it regressed beyond tolerance and noise."""
    from ddprof.analyses.compare.check import check as run_check
    from ddprof.analyses.compare.rules import load_rules
    from ddprof.cli.config import load_config
    from ddprof.inputs.reports import load_report
    from ddprof.render.compare import cause_lines, check_text, headline, junit_xml
    from ddprof.store.atomic import json_text

    cfg = load_rules(rules, environment=load_config().check_environment)
    rank_map = parse_rank_map(ranks)  # one map for both sides: a trace's name says which side it is on
    baseline, *more = baselines
    result = run_check(load_report(run, cache=cache, rank_map=rank_map),
                       load_report(baseline, cache=cache, rank_map=rank_map), cfg,
                       allow_different_job=allow_different_job, run_source=run, base_source=baseline,
                       environment=environment,
                       more_baselines=[(load_report(b, cache=cache, rank_map=rank_map), b) for b in more])
    emit({"json": json_text, "junit": junit_xml, "text": check_text}[fmt](result), output)
    told = output or fmt != "text"
    if result["status"] == "ok":
        if told and result["cause"] is not None:
            click.echo("\n".join([headline(result), *cause_lines(result["cause"])]), err=True)
        return 0
    if told:
        click.echo("\n".join([headline(result), *cause_lines(result["cause"]), *result["summary"]]), err=True)
    return 1

