"""Every command-line option the documentation shows exists: each ``ddprof COMMAND ... --option`` written in
the README and the capture guide (code blocks, and inline code) is an option of that command, as its
``--help`` lists it. An option the docs name but the command lacks (``analyze --raw-clocks``, a renamed
flag) fails here, not in a newcomer's terminal."""

from __future__ import annotations

import re
import shlex

import click
import pytest

from ddprof.cli import COMMANDS, cli
from tests.support.paths import REPO

DOCS = ("README.md", "collectors/PROFILE_YOUR_JOB.md")
#: ``ddprof COMMAND`` at the start of a command line or an inline code span (not ``ddprof.analyze(...)``).
CALL = re.compile(r"(?<![\w.])ddprof (" + "|".join(sorted(COMMANDS)) + r")\b([^`\n]*)")


def commands_in(text: str) -> list[tuple[str, str]]:
    """(command, the rest of its line) for each ``ddprof COMMAND ...`` of ``text``: code lines continued
    with a backslash joined, a ``# comment`` cut off, and what follows ``--`` (the job's own command of
    ``ddprof launch ... -- torchrun ...``) left out."""
    text = re.sub(r"\\\n\s*", " ", text)
    out = []
    for match in CALL.finditer(text):
        rest = re.split(r"\s#\s", match[2])[0]
        rest = re.split(r"(?:^|\s)--(?:\s|$)", rest)[0]
        out.append((match[1], rest))
    return out


def options_of(rest: str) -> list[str]:
    """The option names written in ``rest``: ``--a/--b`` is two, ``--x=1`` is ``--x``, ``[--port 8050]``
    is ``--port``; quoted values are values."""
    try:
        words = shlex.split(rest.replace("[", " ").replace("]", " "))
    except ValueError:  # an unbalanced quote in prose: plain words
        words = rest.replace("[", " ").replace("]", " ").split()
    return [name.split("=")[0] for word in words if word.startswith("-") and word != "-"
            for name in word.split("/") if name.startswith("-")]


def accepted(name: str) -> set[str]:
    cmd = cli.get_command(click.Context(cli), name)
    assert cmd is not None, name
    return {opt for p in cmd.params for opt in (*p.opts, *p.secondary_opts)} | {"-h", "--help"}


def documented() -> list[tuple[str, str, str]]:
    """(doc, command, option) for every option the docs write after ``ddprof COMMAND``."""
    return sorted({(doc, cmd, opt) for doc in DOCS for cmd, rest in commands_in((REPO / doc).read_text(encoding="utf-8"))
                   for opt in options_of(rest)})


def test_the_scan_finds_the_options_written_in_the_docs():
    found = documented()
    assert ("README.md", "analyze", "--format") in found
    assert ("README.md", "synth", "--clock-offset") in found  # on a line continued with a backslash
    assert ("README.md", "export", "--raw-clocks") in found  # an inline code span
    assert not any(opt == "--nproc-per-node" for _, _, opt in found)  # the job's command after --
    assert commands_in("`ddprof analyze --raw-clocks` and `ddprof.analyze(x)`") == [("analyze", " --raw-clocks")]


@pytest.mark.parametrize("doc,command,option", documented())
def test_every_option_the_docs_show_exists(doc, command, option):
    assert option in accepted(command), f"{doc} shows `ddprof {command} ... {option}`, which `ddprof {command} --help` does not list"


#: Options of other programs the docs show: ``torchrun``'s, ``ray start``'s and ``nsys export``'s.
OTHER_PROGRAMS = {"--nproc-per-node": "torchrun", "--head": "ray start", "--address": "ray start",
                  "--type": "nsys export"}


def test_every_option_named_in_the_prose_belongs_to_a_command_or_a_script():
    """An option written alone (``--fr-buffer``, ``--comm-kernel``, ``--allow-different-job``) is an option
    of some ddprof command, of a benchmark script under benchmarks/ (its argument parser names it), or of
    the other program the docs run beside (torchrun, ray, Nsight Systems' nsys)."""
    ours = set().union(*(accepted(name) for name in COMMANDS))
    scripts = "\n".join(p.read_text(encoding="utf-8") for p in (REPO / "benchmarks").glob("*.py"))
    unknown = []
    for doc in DOCS:
        for opt in sorted(set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", (REPO / doc).read_text(encoding="utf-8")))):
            if opt not in ours and opt not in OTHER_PROGRAMS and f'"{opt}"' not in scripts:
                unknown.append(f"{doc}: {opt}")
    assert unknown == []
