"""The fuzzers' shared fixture: a case stuck past its limits shows every thread's stack on the terminal."""

from __future__ import annotations

import pytest

from tests.support.fuzz_contract import Contract


@pytest.fixture(scope="module", autouse=True)
def _hard_stop_to_the_terminal(terminal_stderr):
    Contract.stacks = terminal_stderr
