"""The compiled scanner's memory safety: built again with AddressSanitizer and UndefinedBehaviorSanitizer, then
made to read generated runs (``tests/unit/test_scanner.py``'s differential property tests) and every real
trace in the repository, in a child process that loads the sanitizers' runtimes first. Any out-of-bounds
read, use after free or undefined operation stops the child with the sanitizer's report, which this test
shows. Skipped where there is no C compiler or no sanitizer runtime (the scanner is then not built, or
not checkable here).

``DDPROF_SANITIZED_EXAMPLES`` sets the number of generated cases for each property (default 300, about
30 s on two cores with the sanitizers' overhead).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig

import pytest

from tests.support.paths import REPO

SOURCE = REPO / "ddprof" / "readers" / "kineto" / "_scan.c"
EXAMPLES = int(os.environ.get("DDPROF_SANITIZED_EXAMPLES", "300"))

CHILD = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("ddprof.readers.kineto._scan", sys.argv[1])
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules["ddprof.readers.kineto._scan"] = module  # the sanitized build, in place of the installed one

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ddprof.readers.kineto import decode, plain
import tests.unit.test_scanner as t
assert plain._CScanner is module.Scanner and plain.SCANNER

n = int(sys.argv[2])
runs = st.lists(st.lists(st.one_of(t.EVENT, t.EVENT.map(t._typical)), max_size=8), min_size=1, max_size=4)
settings(max_examples=n, deadline=None, suppress_health_check=list(HealthCheck))(given(
    runs=runs, style=st.integers(0, 2), data=st.data())(
    t.test_property_a_run_is_taken_as_the_typed_decoders_read_it_or_declined.hypothesis.inner_test))()
values = st.lists(st.one_of(st.floats(0, 1e17, allow_nan=False), st.integers(0, 10**20),
                            st.decimals(0, 10**16, places=3)), min_size=1, max_size=20)
settings(max_examples=n, deadline=None)(given(values=values)(
    t.test_property_timestamps_are_the_doubles_the_typed_decoder_reads.hypothesis.inner_test))()
for path in t.REAL:
    try:
        decode.decode(path)
    except Exception as exc:  # a file the reader refuses is refused with the scanner as without it
        print("refused:", path.name, type(exc).__name__)
print("SANITIZED-OK", len(t.REAL))
"""


def _runtime(cc: str, name: str) -> str | None:
    """The path of a sanitizer's runtime library, as the compiler knows it (None where it does not)."""
    out = subprocess.run([cc, f"-print-file-name={name}"], capture_output=True, text=True).stdout.strip()
    return out if os.path.isabs(out) and os.path.exists(out) else None


@pytest.mark.slow
def test_the_scanner_reads_generated_runs_and_real_traces_without_a_memory_error(tmp_path):
    cc = shutil.which((sysconfig.get_config_var("CC") or "cc").split()[0]) or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler here")
    runtimes = [_runtime(cc, "libasan.so"), _runtime(cc, "libubsan.so")]
    if None in runtimes:
        pytest.skip("the compiler has no sanitizer runtime here")
    built = tmp_path / f"_scan{sysconfig.get_config_var('EXT_SUFFIX')}"
    compiled = subprocess.run(
        [cc, "-O1", "-g", "-std=c99", "-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
         "-fno-omit-frame-pointer", "-shared", "-fPIC", f"-I{sysconfig.get_paths()['include']}", str(SOURCE),
         "-o", str(built)], capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    env = {**os.environ, "LD_PRELOAD": " ".join(runtimes), "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=0",
           "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1", "DDPROF_SCANNER": "on"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(built), str(EXAMPLES)], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=900)
    report = (proc.stdout + proc.stderr)[-6000:]
    assert proc.returncode == 0 and "SANITIZED-OK" in proc.stdout, report
    assert "runtime error" not in proc.stderr and "AddressSanitizer" not in proc.stderr, report
