"""The compiled scanner (``ddprof/readers/kineto/_scan.c``, through :class:`~ddprof.readers.kineto.plain.TextScanner`)
against the typed decoders it stands in for.

The contract: for any run of text, the scanner either gives exactly the :class:`~ddprof.readers.kineto.plain.Run`
that the typed decoders and :func:`~ddprof.readers.kineto.plain._columns` make of it (strict decoder first,
lenient second, as :func:`~ddprof.readers.kineto.plain._consumer` tries them), or declines it, its tables of
names and categories then unchanged. It must never take a run the decoders refuse (a bad cut, a malformed
event), and it must take the runs real traces are made of (else it would save nothing). Whole files, cut
anywhere, are compared in ``test_ingest_stream.py``; every real trace in the repository here.
"""

from __future__ import annotations

import copy
import json
import math
import shutil
import sys
import sysconfig
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

from ddprof.readers.kineto import decode as kineto
from ddprof.readers.kineto import plain
from ddprof.readers.kineto.structs import Complete, StrictComplete
from tests.support.paths import SAMPLES, TRACES

needs_scanner = pytest.mark.skipif(plain._CScanner is None, reason="the compiled scanner is not built here")


def _compiler() -> str | None:
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(cc)


def test_the_scanner_is_built_wherever_a_c_compiler_is():
    """An install with a C compiler builds the scanner (it is optional: a build that fails goes on without it,
    silently slower); ``DDPROF_SCANNER=off`` is the only other way to be without it."""
    if _compiler() is None:
        pytest.skip("no C compiler here: the install goes on without the scanner")
    assert plain._CScanner is not None
    assert plain.SCANNER, "the scanner is built but switched off (DDPROF_SCANNER=off in this environment?)"


# ---------------------------------------------------------------- the reference: the typed decoders


class Reference:
    """What :func:`plain._consumer` makes of runs without the scanner: its tables kept between runs."""

    def __init__(self) -> None:
        self.tables = plain._Tables()
        self.kinded: dict[str | None, bool] = {}

    def run(self, text: bytes) -> plain.Run | None | str:
        """The run, None where ``_columns`` leaves it to the ordinary path, "refused" where neither decoder
        takes it. The tables change only where the scanner also took the run (:meth:`commit`)."""
        self._trial = copy.deepcopy(self.tables), dict(self.kinded)
        for decoder, complete in ((plain._strict, StrictComplete), (plain._lenient, Complete)):
            try:
                events = decoder.decode(text)
            except msgspec.ValidationError:
                continue
            except msgspec.DecodeError:
                return "refused"
            return plain._columns(events, complete, *self._trial)
        return "refused"

    def commit(self) -> None:
        self.tables, self.kinded = self._trial


def compare(texts: list[bytes]) -> list[str]:
    """Each run through the scanner and the reference, one after the other (tables kept): how each went."""
    scanner, ref, how = plain.TextScanner(), Reference(), []
    for text in texts:
        mark = scanner._scanner.mark()
        got, want = scanner.run(memoryview(text)), ref.run(text)
        if got is None:
            assert scanner._scanner.mark() == mark, "a declined run changed the scanner's tables"
            how.append("declined")
            continue
        assert want != "refused", f"the scanner took a run the typed decoders refuse: {text[:300]!r}"
        assert want is not None, f"the scanner took a run the ordinary path must read: {text[:300]!r}"
        assert got == want, f"different columns for {text[:300]!r}"
        ref.commit()
        how.append("taken")
    return how


# ---------------------------------------------------------------- generated runs


def _spell(value: Any, style: int) -> str:
    """JSON of ``value`` in one of a few layouts (compact, spaced, indented)."""
    if style == 0:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if style == 1:
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, indent=2, ensure_ascii=True)


TEXT = st.text(st.one_of(st.sampled_from(list('ab_:#é中😀"\\/\n\t ') + ["\u2028", "\x01"]),
                         st.characters(codec="utf-8", exclude_categories=["Cs"])), max_size=10)
NAMES = st.one_of(st.sampled_from(["aten::mm", "nccl:all_reduce", "record_param_comms", "ProfilerStep#3",
                                   "ncclDevKernel_AllReduce_Sum_f32_RING_LL", "", "c10d::allreduce_"]), TEXT)
NUMBERS = st.one_of(st.integers(-2**63, 2**64), st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0, -0.0, 1e-320, 5e-324, 1.7e18, 9007199254740993, 1e22, 1e23, 123456.789,
                                     1700000000123456.789, 86400e6, 86400e6 + 1, -1.5, 2**53 + 1]))
INTS = st.one_of(st.integers(-10, 2**40), st.integers(-2**63, 2**64), st.none(),
                 st.sampled_from(["0x1f", "7", "Spans", "", "-9223372036854775808", 3.0, 2.5, True, [1], {"a": 1}]))
LEAVES = st.one_of(st.none(), st.booleans(), st.integers(-10**20, 10**20), st.floats(allow_nan=False,
                   allow_infinity=False), TEXT)
NESTED = st.recursive(LEAVES, lambda c: st.lists(c, max_size=3) | st.dictionaries(TEXT, c, max_size=3),
                      max_leaves=10)
ARGS = st.fixed_dictionaries({}, optional={
    "External id": INTS, "correlation": INTS, "stream": INTS, "device": INTS,
    "Collective name": st.one_of(st.sampled_from(["allreduce", "send"]), st.none(), INTS),
    "In msg nelems": INTS, "Out msg nelems": INTS, "Group size": INTS, "dtype": st.one_of(TEXT, st.none(), INTS),
    "Process Group Name": st.one_of(TEXT, INTS), "Process Group ID": st.one_of(TEXT, INTS), "Seq": INTS,
    "Src Rank": INTS, "Dst Rank": INTS, "Input Dims": NESTED, "Input type": NESTED, "Concrete Inputs": NESTED,
    "In split size": NESTED, "Out split size": NESTED, "other key": NESTED})
KINDS = ["cpu_op", "kernel", "cuda_runtime", "user_annotation", "cpu_instant_event", "Kernel", "python_function"]
EVENT = st.fixed_dictionaries(
    {"ph": st.sampled_from(["X"] * 6 + ["i", "I", "B", "E", "s", "f", "M", "C", "Z", "XX"])},
    optional={"name": st.one_of(NAMES, st.none(), INTS), "cat": st.one_of(st.sampled_from(KINDS), TEXT, st.none()),
              "pid": INTS, "tid": INTS, "ts": st.one_of(NUMBERS, st.none(), st.just("1")),
              "dur": st.one_of(NUMBERS, st.none()), "args": st.one_of(ARGS, st.none(), st.just(5)),
              "s": st.just("t")})


def _typical(e: dict[str, Any]) -> dict[str, Any]:
    """An event as the profiler writes it: a complete one, its fields of the expected types."""
    return {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1.5, "dur": 2.25,
            **{k: v for k, v in e.items() if k in ("name", "cat") and isinstance(v, str)}}


@needs_scanner
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(st.lists(st.one_of(EVENT, EVENT.map(_typical)), max_size=8), min_size=1, max_size=4),
       style=st.integers(0, 2), data=st.data())
def test_property_a_run_is_taken_as_the_typed_decoders_read_it_or_declined(runs, style, data):
    texts = []
    for events in runs:
        text = _spell(events, style).encode()
        edit = data.draw(st.sampled_from(["as is"] * 6 + ["duplicate key", "cut", "escape", "bad byte"]))
        if edit == "duplicate key" and b'"name"' in text:
            text = text.replace(b'"name"', b'"name": "first", "name"', 1)
        elif edit == "cut" and len(text) > 2:
            at = data.draw(st.integers(1, len(text) - 1))
            text = text[:at] + b"]"
        elif edit == "escape":
            text = text.replace(b'"ts"', b'"t\\u0073"', 1)
        elif edit == "bad byte" and len(text) > 2:
            at = data.draw(st.integers(1, len(text) - 2))
            text = text[:at] + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\x00", b"\xed\xa0\x80"])) + text[at:]
        texts.append(text)
    compare(texts)


@needs_scanner
@settings(max_examples=300, deadline=None)
@given(values=st.lists(st.one_of(st.floats(0, 1e17, allow_nan=False), st.integers(0, 10**20),
                                 st.decimals(0, 10**16, places=3), st.decimals(0, 10**3, places=25)),
                      min_size=1, max_size=20))
def test_property_timestamps_are_the_doubles_the_typed_decoder_reads(values):
    """The scanner parses decimals itself where that is exact; any number must come out as the typed decoder's double."""
    events = ",".join(f'{{"ph":"X","name":"a","ts":{v},"dur":{v}}}' for v in values)
    text = f"[{events}]".encode()
    got = plain.TextScanner().run(memoryview(text))
    want = [e.ts for e in plain._strict.decode(text)]
    if got is None:  # a duration past a day (dropped and counted), or a value the scanner leaves: below normal doubles
        assert not all(0 <= w <= plain.MAX_DUR_NS / 1000 and (w == 0 or w >= sys.float_info.min) for w in want)
        return
    ts = list(memoryview(got.ts).cast("d"))
    assert [math.copysign(1, t) * abs(t) for t in ts] == want


@needs_scanner
def test_the_runs_of_profiler_traces_are_taken():
    """Typical events, the profiler's own span (``"pid": "Spans"``), instants of a category with no kind
    (memory events: passed over in C) and with one, flow events and metadata: all taken."""
    run = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 1700000000123456.789,
         "dur": 12.5, "args": {"External id": 7, "Input Dims": [[2, 3], [3, 4]], "Input type": ["float", "float"]}},
        {"ph": "X", "cat": "kernel", "name": "sgemm", "pid": 0, "tid": 7, "ts": 1365627863588.761, "dur": 3,
         "args": {"stream": 7, "device": 0, "correlation": 42, "External id": 7}},
        {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 2, "ts": 5, "dur": 1,
         "args": {"Collective name": "allreduce", "In msg nelems": 10, "Process Group Name": "0", "dtype": "Float"}},
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 1, "dur": 100},
        {"ph": "i", "cat": "cpu_instant_event", "s": "t", "name": "[memory]", "pid": 1, "tid": 2, "ts": 3,
         "args": {"Bytes": 512}},
        {"ph": "i", "cat": "cpu_op", "s": "t", "name": "marker", "pid": 1, "tid": 2, "ts": 4},
        {"ph": "s", "id": 1, "pid": 1, "tid": 2, "ts": 5, "cat": "ac2g", "name": "flow"},
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
    ]
    assert compare([_spell(run, style).encode() for style in range(3)]) == ["taken"] * 3
    scanned = plain.TextScanner().run(memoryview(_spell(run, 1).encode()))
    assert scanned is not None and scanned.n == 4 and len(scanned.timed) == 1 and "pid" in scanned.nulls


@needs_scanner
@pytest.mark.parametrize("text, why", [
    (b'[{"ph":"X","name":"a\\"b","ts":1,"dur":2}]', "an escaped name (decoded by the ordinary path)"),
    (b'[{"ph":"X","name":"a","ts":1,"dur":2,"pid":1.0}]', "a float where an integer is typed"),
    (b'[{"ph":"X","name":"a","ts":1,"dur":2,"pid":"-9223372036854775808"}]', "an integer equal to the null mark"),
    (b'[{"ph":"X","name":"a","ts":1,"dur":2,"pid":9223372036854775808}]', "an integer past int64"),
    (b'[{"ph":"X","name":"a","ts":1,"dur":-2}]', "a negative duration (dropped and counted)"),
    (b'[{"ph":"X","ts":1,"dur":2}]', "no name"),
    (b'[{"ph":"X","name":"a","ts":1,"dur":2}', "a bad cut"),
    (b'[{"ph":"X","name":"a","ts":1,"dur":2},]', "a trailing comma"),
    (b'[{"ph":"Z","name":"a","ts":1,"dur":2}]', "an unknown phase"),
    (b'[{"name":"a","ts":1,"dur":2}]', "no phase"),
    (b'[{"ph":"X","name":"a","ts":1e400,"dur":2}]', "a number out of range"),
    (b'[{"ph":"X","name":"a\xff","ts":1,"dur":2}]', "invalid UTF-8"),
    (b'[{"ph":"X","name":"a","ts":1,"dur":2,"args":' + b"[" * 100 + b"]" * 100 + b"}]", "nesting past the limit"),
])
def test_what_the_scanner_leaves_to_the_typed_decoders(text, why):
    scanner = plain.TextScanner()
    scanner.run(memoryview(b'[{"ph":"X","name":"kept","cat":"c","ts":1,"dur":2}]'))
    mark = scanner._scanner.mark()
    assert scanner.run(memoryview(text)) is None, why
    assert scanner._scanner.mark() == mark, "a declined run changed the tables"
    compare([text])  # and the reference agrees that it is not the scanner's to take


@needs_scanner
def test_a_run_given_up_after_the_scan_leaves_the_tables_as_they_were():
    """A string integer that reads as the null mark is only seen once the run is scanned: its new names go."""
    scanner = plain.TextScanner()
    before = scanner._scanner.mark()
    text = b'[{"ph":"X","name":"new","cat":"new cat","ts":1,"dur":2,"pid":"-9223372036854775808"}]'
    assert scanner.run(memoryview(text)) is None
    assert scanner._scanner.mark() == before
    again = scanner.run(memoryview(b'[{"ph":"X","name":"other","ts":1,"dur":2}]'))
    assert again is not None and again.names == ["other"] and again.cats == [None]


REAL = sorted(p for p in [*TRACES.rglob("*.json*"), *SAMPLES.rglob("*.json*")]
              if p.name.endswith((".json", ".json.gz")) and not p.name.endswith(".meta.json"))


@needs_scanner
@pytest.mark.parametrize("path", REAL, ids=lambda p: str(p.relative_to(p.parents[2])))
def test_every_real_trace_decodes_the_same_with_and_without_the_scanner(path, monkeypatch):
    """The frame, metadata, counts and categories of each real trace in the repository, both ways; and the
    scanner takes most of its runs."""
    taken: list[bool] = []
    run = plain.TextScanner.run
    monkeypatch.setattr(plain.TextScanner, "run", lambda self, text: _counted(run, self, text, taken))
    try:
        with_scanner = kineto.decode(path)
    except Exception as exc:  # a file the reader refuses must be refused the same way
        monkeypatch.setattr(plain, "SCANNER", False)
        with pytest.raises(type(exc)):
            kineto.decode(path)
        return
    monkeypatch.setattr(plain, "SCANNER", False)
    without = kineto.decode(path)
    assert_frame_equal(with_scanner.frame, without.frame)
    assert_frame_equal(with_scanner.meta, without.meta)
    for field in ("raw_complete", "dropped", "categories", "notices", "sha1", "distributed_info"):
        assert getattr(with_scanner, field) == getattr(without, field), field
    assert taken and sum(taken) >= len(taken) - 1, f"the scanner took {sum(taken)} of {len(taken)} runs"


def _counted(run: Any, self: Any, text: memoryview, taken: list[bool]) -> Any:
    """``run``, noting whether it took a whole run (a bad cut, which it must decline, is not counted)."""
    got = run(self, text)
    try:
        plain._whole.decode(text)
    except msgspec.DecodeError:
        return got
    taken.append(got is not None)
    return got


def test_real_traces_are_found():
    assert len(REAL) >= 10
    assert any(Path(p).stat().st_size > 1 << 20 for p in REAL)


@needs_scanner
def test_a_run_given_up_after_the_scan_forgets_its_instants_categories_too():
    """The instants' categories a given-up run added are forgotten with its names: a later instant of another
    category takes the same code and must be judged by its own category (kept here: ``cpu_op`` has a kind)."""
    given_up = (b'[{"ph":"i","cat":"cpu_instant_event","name":"[memory]","ts":1},'
                b'{"ph":"X","name":"a","ts":1,"dur":2,"pid":"-9223372036854775808"}]')
    later = b'[{"ph":"i","cat":"cpu_op","name":"mark","pid":1,"tid":2,"ts":3},{"ph":"X","name":"a","ts":1,"dur":2}]'
    assert compare([given_up, later]) == ["declined", "taken"]
