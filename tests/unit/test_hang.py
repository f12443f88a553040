"""Hang diagnosis from NCCL Flight Recorder dumps: real dumps against their reference, generated cases with
known answers, and hostile or broken input."""

from __future__ import annotations

import io
import json
import os
import pickle
import re
from pathlib import Path

import pytest
from ddprof.analyses.hang.diagnose import diagnose
from ddprof.analyses.hang.views import op_names
from ddprof.analyses.hang.waits import terminal_components
from ddprof.analyses.report import EMPTY_SECTIONS, build_report

import ddprof
from ddprof.errors import BadInputError, RankError
from ddprof.readers.flightrec.load import is_flight_recorder_dir, load_dump, load_dump_dir
from ddprof.readers.flightrec.unpickle import SafeUnpickler
from ddprof.readers.ranks import rank_from_dump_name
from tests.support.paths import DLRM, FLIGHT_RECORDER, SAMPLES

FR = FLIGHT_RECORDER
SCENARIOS = ["gpu_error_1st", "gpu_error_2nd", "lock_gil_1st", "lock_gil_2nd"]


def diagnose_hang(folder: Path) -> dict:
    """The ``hang`` section for a directory of dumps."""
    return diagnose(load_dump_dir(folder))


# ------------------------------------------------------------------------------------------ reference files


def parse_expected(path: Path) -> list[dict]:
    """Rows of ``expected_missing_ranks.txt``: ``PGID | desc,window | op | size | dtype | ranks``."""
    rows = []
    for line in path.read_text().splitlines()[1:]:
        cells = [c.strip() for c in line.split("|")]
        if len(cells) < 6 or not cells[0]:
            continue
        rows.append(
            {
                "pg": cells[0],
                "desc": cells[1].split(",")[0],
                "op": cells[2],
                "size": cells[3],
                "dtype": cells[4],
                "missing": sorted(int(r) for r in cells[5].split(",") if r.strip()),
            }
        )
    return rows


def parse_faults(path: Path) -> dict[int, str]:
    """``Rank 12, fault_type: GPU_ERROR`` lines of ``fault_injection.log`` -> {12: "GPU_ERROR"}."""
    return {int(m[1]): m[2] for m in re.finditer(r"Rank (\d+), fault_type: (\w+)", path.read_text())}


def _size(sizes) -> str | None:
    return "x".join(map(str, sizes[0])) if sizes else None


#: The real dumps are in tests/data/traces/flight-recorder.
needs_fr = pytest.mark.usefixtures("traces")


@needs_fr
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_real_scenario_reproduces_reference(scenario):
    folder = FR / f"megatron-16rank-{scenario}"
    expected = parse_expected(folder / "expected_missing_ranks.txt")
    faults = parse_faults(folder / "fault_injection.log")
    assert expected and faults

    result = diagnose_hang(folder)
    json.dumps(result)  # the report is JSON

    assert result["ranks"] == list(range(16))
    assert result["world_size"] == 16
    assert result["failed"] == [] and result["missing_dumps"] == []
    assert sorted(result["skipped_files"]) == ["expected_missing_ranks.txt", "fault_injection.log"]
    for row in expected:
        matches = [
            c
            for c in result["collectives"]
            if c["kind"] == "collective" and c["pg"] == row["pg"] and c["missing_ranks"] == row["missing"]
        ]
        assert len(matches) == 1, f"{scenario}: no record for {row}"
        rec = matches[0]
        assert rec["pg_desc"] == row["desc"]
        assert rec["op_name"] == row["op"]  # the reference spells Flight Recorder's names
        assert rec["op"] == row["op"].removeprefix("nccl:")  # normalised as in the other sections
        assert rec["status"] == "missing"
        present = [p for p in rec["per_rank"] if p["state"] != "not_entered"]
        assert {_size(p["input_sizes"]) for p in present} >= {row["size"]}
        assert {p["input_dtypes"][0] for p in present} == {row["dtype"]}
        assert sorted(p["rank"] for p in rec["per_rank"] if p["state"] == "not_entered") == row["missing"]

    # The ranks the hang started from are exactly the reference's missing ranks, all of them injected faults.
    reference_ranks = sorted({r for row in expected for r in row["missing"]})
    assert result["suspect_ranks"] == reference_ranks
    assert set(result["suspect_ranks"]) <= set(faults)
    assert result["unaccounted_ranks"] == []
    assert result["deadlock_cycles"] == []
    # The leading record is one the reference reports.
    assert result["collectives"][0]["pg"] in {row["pg"] for row in expected}
    assert result["verdict"].startswith("hang started at rank")
    # A GPU error freezes completion tracking on the faulty ranks; a GIL lock does not.
    gpu_faults = sorted(r for r, kind in faults.items() if kind == "GPU_ERROR")
    assert result["lagging_completion_ranks"] == gpu_faults


@needs_fr
def test_real_dump_rank_comes_from_content():
    dump = load_dump(FR / "megatron-16rank-gpu_error_1st" / "_dump_12")
    assert dump.rank == 12 and dump.rank_source == "content"
    assert dump.version == "2.9"
    assert dump.pg_ranks["74"] == (12, 13, 14, 15)
    # pg_status (keyed by local pg_id 11) is mapped to the group name "74".
    assert dump.pg_status["74"].last_enqueued == 20536
    assert dump.pg_status["74"].last_completed == 20529
    assert len(dump.entries) == 27 and all(e.state == "scheduled" for e in dump.entries)


@needs_fr
def test_real_dump_copied_under_another_rank_name_is_refused(tmp_path):
    (tmp_path / "_dump_3").write_bytes((FR / "megatron-16rank-gpu_error_1st" / "_dump_12").read_bytes())
    with pytest.raises(RankError) as err:
        load_dump(tmp_path / "_dump_3")
    assert err.value.rank == 3 and "rank 12" in str(err.value) and "_dump_3" in str(err.value)


@needs_fr
def test_truncated_real_dump_fails_alone(tmp_path):
    src = FR / "megatron-16rank-lock_gil_2nd"
    for f in src.glob("_dump_*"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    data = (src / "_dump_12").read_bytes()
    (tmp_path / "_dump_12").write_bytes(data[: len(data) // 2])

    with pytest.raises(BadInputError) as err:
        load_dump(tmp_path / "_dump_12")
    assert err.value.rank == 12 and err.value.path.endswith("_dump_12")

    result = diagnose_hang(tmp_path)
    assert result["ranks"] == [r for r in range(16) if r != 12]
    assert [(f["rank"], Path(f["path"]).name) for f in result["failed"]] == [(12, "_dump_12")]
    assert "truncated" in result["failed"][0]["reason"]
    # The faulty ranks are still found; rank 12 is reported as unreadable, not as missing.
    assert result["suspect_ranks"] == [10, 15]
    # Rank 0 waits on a send/recv with rank 12 in its pipeline group: rank 12 cannot be cleared.
    assert result["unaccounted_ranks"] == [12]
    assert all(12 not in c["missing_ranks"] for c in result["collectives"])
    ep = next(c for c in result["collectives"] if c["pg"] == "74" and c["kind"] == "collective")
    assert ep["missing_ranks"] == [15] and ep["unknown_ranks"] == [12]
    assert {p["rank"]: p["state"] for p in ep["per_rank"]}[12] == "failed_dump"


@needs_fr
def test_sniffing_routes_dump_dirs_only(tmp_path):
    assert all(is_flight_recorder_dir(FR / f"megatron-16rank-{s}") for s in SCENARIOS)
    assert not is_flight_recorder_dir(FR / "megatron-16rank-gpu_error_1st" / "_dump_0")  # a file
    assert not is_flight_recorder_dir(tmp_path)  # empty
    assert not is_flight_recorder_dir(tmp_path / "nope")
    (tmp_path / "rank0.json").write_text(json.dumps({"traceEvents": [], "distributedInfo": {"rank": 0}}))
    assert not is_flight_recorder_dir(tmp_path)
    assert not is_flight_recorder_dir(DLRM)


def kineto_with_many_groups(rank: int, world: int = 64, groups: int = 800) -> dict:
    """An uncompressed Kineto trace whose ``distributedInfo.pg_config`` (one entry per process group, as
    torch writes it) comes before ``traceEvents`` and fills more than the 64 KiB the sniffer reads."""
    pg_config = [{"pg_name": str(g), "pg_desc": f"GROUP_{g}", "backend_config": "cuda:nccl", "pg_size": 8,
                  "ranks": [(g * 8 + i) % world for i in range(8)]} for g in range(groups)]
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "totalGlobalMem": 85_000_000_000}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world, "pg_count": groups,
                            "pg_config": pg_config, "nccl_version": "2.21.5"},
        "traceEvents": [{"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 1, "dur": 2,
                         "args": {"stream": 7, "device": 0}}],
    }


def test_kineto_trace_with_many_process_groups_is_not_a_dump_dir(tmp_path):
    for rank in range(2):
        (tmp_path / f"rank{rank}.pt.trace.json").write_text(json.dumps(kineto_with_many_groups(rank)))
    head = (tmp_path / "rank0.pt.trace.json").read_bytes()[:65536].decode()
    assert '"pg_config"' in head and '"traceEvents"' not in head  # the case the old sniffer got wrong
    assert not is_flight_recorder_dir(tmp_path)
    # A Flight Recorder JSON dump beside it is still recognised by its own content.
    (tmp_path / "rank0.json").write_text(json.dumps(dump({DEFAULT: WORLD}, [], {0: (1, 1)})))
    assert is_flight_recorder_dir(tmp_path)


# ------------------------------------------------------------------------------------------ generated dumps


def entry(group, seq, *, record_id, state="scheduled", op="nccl:all_reduce", p2p_seq=0, t=0):
    """An FR 2.9 entry, as the real dumps spell it."""
    name, desc, pg_id = group
    is_p2p = op.startswith(("nccl:send", "nccl:recv"))
    return {
        "collective_seq_id": seq,
        "input_dtypes": ["Float"],
        "input_sizes": [[1024]],
        "is_p2p": is_p2p,
        "op_id": seq,
        "output_dtypes": ["Float"],
        "output_sizes": [[1024]],
        "p2p_seq_id": p2p_seq,
        "pg_id": pg_id,
        "process_group": (name, desc),
        "profiling_name": op,
        "record_id": record_id,
        "retired": state == "completed",
        "state": state,
        "thread_id": "1",
        "thread_name": "python3",
        "time_created_ns": 1_000_000 + t,
        "time_discovered_completed_ns": None,
        "time_discovered_started_ns": None,
        "timeout_ms": 600000,
    }


WORLD = (0, 1, 2, 3)
DEFAULT = ("0", "default_pg", 0)
TP = ("5", "TENSOR_MODEL_PARALLEL_GROUP", 1)


def dump(groups, entries, status=None, *, version="2.9"):
    """A dump dict. ``groups``: {(name, desc, pg_id): ranks}; ``status``: {pg_id: (enqueued, completed)}."""
    out = {
        "version": version,
        "pg_config": {g[0]: {"name": g[0], "desc": g[1], "ranks": str(list(r))} for g, r in groups.items()},
        "entries": entries,
        "nccl_version": "2.27.3",
    }
    if status is not None:
        out["pg_status"] = {
            str(pid): {
                "last_enqueued_collective": e,
                "last_completed_collective": c,
                "last_started_collective": -1,
            }
            for pid, (e, c) in status.items()
        }
    return out


def write(folder: Path, dumps: dict[int, dict], fmt="pickle") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for rank, d in dumps.items():
        if fmt == "pickle":
            (folder / f"_dump_{rank}").write_bytes(pickle.dumps(d, protocol=2))
        else:
            (folder / f"rank_{rank}.json").write_text(json.dumps(d))
    return folder


def tp_world(per_rank):
    """Ranks 0..3 in default_pg and TP group "5"; per_rank: {rank: (tp entries, (enqueued, completed))}."""
    groups = {DEFAULT: WORLD, TP: WORLD}
    return {r: dump(groups, es, {0: (3, 3), 1: st}) for r, (es, st) in per_rank.items()}


def test_one_rank_never_enters_collective(tmp_path):
    waiting = lambda r: ([entry(TP, 10, record_id=100, t=r)], (10, 9))  # noqa: E731
    folder = write(tmp_path / "d", tp_world({0: waiting(0), 1: waiting(1), 2: waiting(2), 3: ([], (9, 9))}))
    result = diagnose_hang(folder)
    assert len(result["collectives"]) == 1
    rec = result["collectives"][0]
    assert (rec["pg"], rec["pg_desc"], rec["op"], rec["op_name"], rec["index"]) == (
        "5",
        "TENSOR_MODEL_PARALLEL_GROUP",
        "all_reduce",
        "nccl:all_reduce",
        10,
    )
    assert rec["missing_ranks"] == [3]
    assert rec["not_completed_ranks"] == [0, 1, 2]
    assert rec["status"] == "missing"
    assert [p["state"] for p in rec["per_rank"]] == ["scheduled", "scheduled", "scheduled", "not_entered"]
    assert rec["waiting_since_ns"] == 1_000_000
    assert result["suspect_ranks"] == [3]
    assert "rank 3" in result["verdict"] and "#10" in result["verdict"]


def test_one_rank_enters_but_never_completes(tmp_path):
    done = ([entry(TP, 10, record_id=100, state="completed")], (10, 10))
    stuck = ([entry(TP, 10, record_id=100, state="started")], (10, 9))
    folder = write(tmp_path / "d", tp_world({0: done, 1: done, 2: done, 3: stuck}))
    result = diagnose_hang(folder)
    [rec] = result["collectives"]
    assert (rec["pg"], rec["index"], rec["status"]) == ("5", 10, "not_completed")
    assert rec["missing_ranks"] == []
    assert rec["not_completed_ranks"] == [3]
    assert rec["completed_ranks"] == [0, 1, 2]
    assert {p["rank"]: p["state"] for p in rec["per_rank"]} == {
        0: "completed",
        1: "completed",
        2: "completed",
        3: "started",
    }
    assert result["lagging_completion_ranks"] == [3]
    assert result["suspect_ranks"] == []


def test_no_hang_gives_empty_list(tmp_path):
    done = ([entry(TP, k, record_id=k, state="completed") for k in (8, 9, 10)], (10, 10))
    folder = write(tmp_path / "d", tp_world({r: done for r in WORLD}))
    result = diagnose_hang(folder)
    assert result["collectives"] == []
    assert result["suspect_ranks"] == [] and result["lagging_completion_ranks"] == []
    assert result["verdict"].startswith("no hang found")


def test_missing_dump_is_unknown_not_missing(tmp_path):
    waiting = lambda r: ([entry(TP, 10, record_id=100, t=r)], (10, 9))  # noqa: E731
    folder = write(tmp_path / "d", tp_world({0: waiting(0), 1: waiting(1), 2: waiting(2)}))
    result = diagnose_hang(folder)
    assert result["missing_dumps"] == [3]
    assert result["world_size"] == 4 and result["ranks"] == [0, 1, 2]
    [rec] = result["collectives"]
    assert (rec["index"], rec["missing_ranks"], rec["unknown_ranks"]) == (10, [], [3])
    assert rec["not_completed_ranks"] == [0, 1, 2]
    assert {p["rank"]: p["state"] for p in rec["per_rank"]}[3] == "no_dump"
    # Everyone present waits and only rank 3 is unaccounted for.
    assert result["suspect_ranks"] == [] and result["unaccounted_ranks"] == [3]
    assert result["verdict"].startswith("peers wait for rank 3, whose dump is missing")
    assert "no usable dump from rank 3" in result["verdict"]


def test_evicted_entries_are_not_missing(tmp_path):
    # Full dumps (completed entries kept) without pg_status. Rank 0 is busy: its ring buffer evicted 3..7.
    groups = {DEFAULT: WORLD[:3], TP: WORLD[:3]}

    def es(seqs, pending=()):
        return [entry(TP, k, record_id=k, state="scheduled" if k in pending else "completed") for k in seqs]

    dumps = {
        0: dump(groups, es(range(8, 11), pending={10})),
        1: dump(groups, es(range(3, 11), pending={10})),
        2: dump(groups, es(range(3, 10))),
    }
    result = diagnose_hang(write(tmp_path / "d", dumps))
    [rec] = result["collectives"]
    assert (rec["index"], rec["missing_ranks"], rec["not_completed_ranks"]) == (10, [2], [0, 1])
    assert result["suspect_ranks"] == [2]


def test_evicted_pending_entry_counts_as_entered(tmp_path):
    # Rank 1's buffer lost its record of collective 10 but its status shows it enqueued up to 11.
    waiting0 = ([entry(TP, 10, record_id=1), entry(TP, 11, record_id=2)], (11, 9))
    waiting1 = ([entry(TP, 11, record_id=2)], (11, 9))
    folder = write(tmp_path / "d", tp_world({0: waiting0, 1: waiting1, 2: waiting0, 3: ([], (9, 9))}))
    [rec] = diagnose_hang(folder)["collectives"]
    assert rec["index"] == 10 and rec["missing_ranks"] == [3]
    assert {p["rank"]: p["state"] for p in rec["per_rank"]} == {
        0: "scheduled",
        1: "entered",
        2: "scheduled",
        3: "not_entered",
    }


def test_collective_completed_by_a_peer_is_never_missing(tmp_path):
    # Rank 3 (GPU fault) still shows 10 scheduled though ranks 0-2 completed it; rank 3 never entered 11.
    ahead = ([entry(TP, 11, record_id=2, t=5)], (11, 10))
    faulty = ([entry(TP, 10, record_id=1)], (10, 9))
    folder = write(tmp_path / "d", tp_world({0: ahead, 1: ahead, 2: ahead, 3: faulty}))
    result = diagnose_hang(folder)
    [rec] = result["collectives"]
    assert (rec["index"], rec["missing_ranks"]) == (11, [3])
    assert rec["first_incomplete"] == {
        "index": 10,
        "op": "all_reduce",
        "op_name": "nccl:all_reduce",
        "not_completed_ranks": [3],
        "completed_ranks": [0, 1, 2],
    }
    assert result["lagging_completion_ranks"] == [3]
    assert result["suspect_ranks"] == [3]


def test_unmatched_send_names_the_peer(tmp_path):
    pp = ("3", "PIPELINE_MODEL_PARALLEL_GROUP", 1)
    groups = {DEFAULT: (0, 1), pp: (0, 1)}
    send = entry(pp, 2, record_id=7, op="nccl:send 0->1", p2p_seq=5)
    dumps = {0: dump(groups, [send], {0: (1, 1), 1: (5, 4)}), 1: dump(groups, [], {0: (1, 1), 1: (4, 4)})}
    result = diagnose_hang(write(tmp_path / "d", dumps))
    [rec] = result["collectives"]
    assert (rec["kind"], rec["pg"], rec["op"], rec["op_name"], rec["index"]) == ("p2p", "3", "send", "nccl:send 0->1", 5)
    assert rec["missing_ranks"] == [1] and rec["waiting_ranks"] == [0]
    assert rec["channels"] == [{"src": 0, "dst": 1, "pending_sends": 1, "pending_recvs": 0}]
    assert result["suspect_ranks"] == [1]


def test_matched_send_recv_is_not_a_finding(tmp_path):
    pp = ("3", "PIPELINE_MODEL_PARALLEL_GROUP", 1)
    groups = {DEFAULT: (0, 1), pp: (0, 1)}
    d0 = dump(
        groups,
        [entry(pp, 2, record_id=7, op="nccl:send 0->1", p2p_seq=5, state="completed")],
        {0: (1, 1), 1: (5, 5)},
    )
    d1 = dump(
        groups,
        [entry(pp, 2, record_id=7, op="nccl:recv 1<-0", p2p_seq=5, state="completed")],
        {0: (1, 1), 1: (5, 5)},
    )
    assert diagnose_hang(write(tmp_path / "d", {0: d0, 1: d1}))["collectives"] == []


def test_crossed_collectives_are_a_deadlock(tmp_path):
    a, b = ("5", "A", 1), ("6", "B", 2)
    groups = {DEFAULT: (0, 1), a: (0, 1), b: (0, 1)}
    d0 = dump(groups, [entry(a, 5, record_id=1)], {0: (1, 1), 1: (5, 4), 2: (6, 6)})
    d1 = dump(groups, [entry(b, 7, record_id=1)], {0: (1, 1), 1: (4, 4), 2: (7, 6)})
    result = diagnose_hang(write(tmp_path / "d", {0: d0, 1: d1}))
    got = {(c["pg"], c["index"]): c["missing_ranks"] for c in result["collectives"]}
    assert got == {("5", 5): [1], ("6", 7): [0]}
    assert result["deadlock_cycles"] == [[0, 1]] and result["suspect_ranks"] == []
    assert "wait for each other" in result["verdict"]


@pytest.mark.parametrize("raw,op", [("nccl:all_to_all", "all_to_all"), ("nccl:send 1->2", "send"),
                                    ("nccl:recv 1<-0", "recv"), ("nccl:_all_gather_base", "all_gather"),
                                    ("nccl:_reduce_scatter_base", "reduce_scatter"),
                                    ("nccl:allreduce_coalesced", "all_reduce"), ("nccl:coalesced", "coalesced")])
def test_op_is_normalised_and_the_raw_name_kept(raw, op):
    assert op_names(raw) == {"op": op, "op_name": raw}


def test_hang_report_is_a_whole_report(tmp_path):
    from ddprof.render.text import render_text

    waiting = lambda r: ([entry(TP, 10, record_id=100, t=r)], (10, 9))  # noqa: E731
    folder = write(tmp_path / "d", tp_world({0: waiting(0), 1: waiting(1), 2: waiting(2), 3: ([], (9, 9))}))
    (folder / "_dump_7").write_bytes(b"\x80\x02 truncated")
    report = build_report(None, dumps=load_dump_dir(folder))
    hang = report["hang"]
    json.dumps(report, allow_nan=False)
    assert set(EMPTY_SECTIONS) | {"run", "verdicts"} <= set(report)
    assert {k: report[k] for k in EMPTY_SECTIONS if k != "hang"} == {k: v for k, v in EMPTY_SECTIONS.items()
                                                                     if k != "hang"}
    assert hang == diagnose_hang(folder) and report["verdicts"][0] == hang["verdict"]
    assert report["verdicts"][1:] == [f"{len(report['run']['warnings'])} warning(s) about the input: see the warnings below"]
    run = report["run"]
    assert (run["world_size"], run["ranks"], run["backend"], run["device"], run["steps"], run["per_rank"]) == (
        hang["world_size"], [0, 1, 2, 3], "nccl", "gpu", [], [])
    [bad] = [w for w in run["warnings"] if "_dump_7" in w]
    assert bad.startswith(str(folder / "_dump_7") + ", rank 7: ")
    assert [(f["path"], f["rank"], f["error"]) for f in run["failed"]] == [(str(folder / "_dump_7"), 7, bad)]
    assert report["status"] == "problem"  # a hang found outranks the unreadable dump
    empty = json.loads(json.dumps(EMPTY_SECTIONS["stragglers"]))
    report["stragglers"]["ranks"].append(1)  # the sections are the report's own, not shared
    assert EMPTY_SECTIONS["stragglers"] == empty and empty["ranks"] == []
    lines = render_text(report).splitlines()
    assert lines[2].startswith("* hang started at rank 3")
    assert "suspect ranks (the hang started there): 3" in lines


def test_hang_report_without_a_hang_says_so_last(tmp_path):
    done = ([entry(TP, 10, record_id=1, state="completed")], (10, 10))
    report = build_report(None, dumps=load_dump_dir(write(tmp_path / "d", tp_world({r: done for r in WORLD}))))
    assert report["verdicts"] == [report["hang"]["verdict"]] and report["hang"]["collectives"] == []
    assert report["verdicts"][0].startswith("no hang found")
    assert report["run"]["warnings"] == [] and report["status"] == "ok"


def test_json_flavour_gives_the_same_answer(tmp_path):
    waiting = lambda r: ([entry(TP, 10, record_id=100, t=r)], (10, 9))  # noqa: E731
    dumps = tp_world({0: waiting(0), 1: waiting(1), 2: waiting(2), 3: ([], (9, 9))})
    from_pickle = diagnose_hang(write(tmp_path / "p", dumps))
    from_json = diagnose_hang(write(tmp_path / "j", dumps, fmt="json"))
    assert is_flight_recorder_dir(tmp_path / "j")
    strip = lambda r: {k: v for k, v in r.items() if k != "source"}  # noqa: E731
    assert strip(from_json) == strip(from_pickle)
    assert from_json["collectives"][0]["missing_ranks"] == [3]


def test_logs_beside_dumps_are_skipped(tmp_path):
    done = ([entry(TP, 10, record_id=1, state="completed")], (10, 10))
    folder = write(tmp_path / "d", tp_world({r: done for r in WORLD}))
    (folder / "fault_injection.log").write_text("Rank 3, fault_type: GPU_ERROR\n")
    (folder / "notes.txt").write_text("hello")
    result = diagnose_hang(folder)
    assert result["failed"] == [] and sorted(result["skipped_files"]) == ["fault_injection.log", "notes.txt"]


# ------------------------------------------------------------------------------------------ rank resolution


def test_rank_from_file_name():
    assert rank_from_dump_name("/x/_dump_12") == 12
    assert rank_from_dump_name("rank_3.json") == 3
    assert rank_from_dump_name("dump") is None


def test_rank_from_content_when_the_name_has_none(tmp_path):
    solo = ("9", "EXPERT_DATA_PARALLEL_GROUP", 2)
    d = dump({DEFAULT: WORLD, TP: WORLD, solo: (2,)}, [], {0: (1, 1), 1: (1, 1), 2: (1, 1)})
    (tmp_path / "trace").write_bytes(pickle.dumps(d, protocol=2))
    loaded = load_dump(tmp_path / "trace")
    assert (loaded.rank, loaded.rank_source) == (2, "content")


def test_rank_never_defaults_to_zero(tmp_path):
    d = dump({DEFAULT: WORLD}, [], {0: (1, 1)})
    (tmp_path / "trace").write_bytes(pickle.dumps(d, protocol=2))
    with pytest.raises(RankError, match="cannot tell which rank"):
        load_dump(tmp_path / "trace")


def test_two_files_claiming_one_rank_both_fail(tmp_path):
    d = pickle.dumps(dump({DEFAULT: WORLD}, [], {0: (1, 1)}), protocol=2)
    (tmp_path / "_dump_1").write_bytes(d)
    (tmp_path / "copy_dump_1").write_bytes(d)
    (tmp_path / "_dump_2").write_bytes(d)
    ds = load_dump_dir(tmp_path)
    assert sorted(ds.dumps) == [2]
    assert sorted((f.rank, Path(f.path).name) for f in ds.failures) == [(1, "_dump_1"), (1, "copy_dump_1")]
    assert all(isinstance(f, RankError) for f in ds.failures)


# ------------------------------------------------------------------------------------------ hostile / broken input


class _Exploit:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_calling_os_system_is_refused_and_not_run(tmp_path):
    marker = tmp_path / "pwned"
    payload = {"version": "2.9", "pg_config": {}, "entries": [_Exploit(marker)]}
    (tmp_path / "_dump_1").write_bytes(pickle.dumps(payload, protocol=2))
    with pytest.raises(BadInputError) as err:
        load_dump(tmp_path / "_dump_1")
    assert "system" in str(err.value) and "_dump_1" in str(err.value)
    assert err.value.rank == 1
    assert not marker.exists()


def test_even_harmless_globals_are_refused(tmp_path):
    from collections import OrderedDict

    (tmp_path / "_dump_0").write_bytes(pickle.dumps(OrderedDict(version="2.9"), protocol=4))
    with pytest.raises(BadInputError, match=r"collections\.OrderedDict"):
        load_dump(tmp_path / "_dump_0")
    with pytest.raises(BadInputError):
        SafeUnpickler(io.BytesIO(b""), path="x", rank=None).find_class("builtins", "eval")


def test_hostile_file_fails_alone_in_a_directory(tmp_path):
    marker = tmp_path / "pwned"
    waiting = lambda r: ([entry(TP, 10, record_id=100, t=r)], (10, 9))  # noqa: E731
    folder = write(tmp_path / "d", tp_world({0: waiting(0), 1: waiting(1), 2: waiting(2)}))
    (folder / "_dump_3").write_bytes(pickle.dumps(_Exploit(marker), protocol=2))
    result = diagnose_hang(folder)
    assert not marker.exists()
    assert [(f["rank"], Path(f["path"]).name) for f in result["failed"]] == [(3, "_dump_3")]
    assert "posix.system" in result["failed"][0]["reason"] or "os.system" in result["failed"][0]["reason"]
    assert result["missing_dumps"] == []
    [rec] = result["collectives"]
    assert rec["unknown_ranks"] == [3] and rec["missing_ranks"] == []
    assert result["unaccounted_ranks"] == [3]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"hello, this is not a dump", "no pickle header, and it is not JSON"),
        (pickle.dumps("x", protocol=0), "no pickle header, and it is not JSON"),  # protocol 0: not taken for a pickle
        (pickle.dumps([1, 2, 3], protocol=2), "top level is a list"),
        (pickle.dumps({"entries": []}, protocol=2), "no version, pg_config"),
        (pickle.dumps({"version": "1.0", "pg_config": {}}, protocol=2), "version 1.0 is not supported"),
        (pickle.dumps({"version": "2.9", "pg_config": {"0": {"ranks": "[0, 1"}}}, protocol=2), "malformed"),
        (
            pickle.dumps(
                {"version": "2.9", "pg_config": {}, "entries": [{"state": "scheduled"}]}, protocol=2
            ),
            "lacks the field",
        ),
        (pickle.dumps({"version": "2.9", "pg_config": {}}, protocol=2)[:-5], "truncated"),
        (b"\x80\x02", "truncated"),
    ],
)
def test_bad_input_names_file_and_rank(tmp_path, content, message):
    (tmp_path / "_dump_7").write_bytes(content)
    with pytest.raises(BadInputError) as err:
        load_dump(tmp_path / "_dump_7")
    assert message in str(err.value)
    assert err.value.rank == 7 and err.value.path == str(tmp_path / "_dump_7")


def _json_dump(**change) -> dict:
    """A small valid JSON dump (format 2.9, one group of ranks 0 and 1, one completed all-reduce), changed."""
    dump = {"version": "2.9", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}},
            "pg_status": {"0": {"last_enqueued_collective": 1, "last_started_collective": 1,
                                "last_completed_collective": 1}},
            "entries": [{"record_id": 0, "pg_id": 0, "process_group": ["0", "default_pg"], "collective_seq_id": 1,
                         "p2p_seq_id": 0, "profiling_name": "nccl:all_reduce", "state": "completed",
                         "time_created_ns": 1, "input_sizes": [[4]], "input_dtypes": ["Float"],
                         "output_sizes": [[4]]}]}
    for where, value in change.items():
        *path, last = where.split("__")
        node = dump
        for key in path:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if isinstance(node, list):
            node[int(last)] = value
        elif value is None:
            del node[last]
        else:
            node[last] = value
    return dump


#: Python's own words, which a refusal of a dump never ends with.
PYTHON_WORDS = re.compile(r"object has no attribute|Expecting|delimiter|Error:|Error\b|char \d+|KeyError|'\w+'$")


@pytest.mark.parametrize("name, content, sentence", [
    ("entry-a-string", json.dumps(_json_dump(entries__0="nccl:all_reduce")).encode(),
     "entry 0 is a str ('nccl:all_reduce'), expected an object with the collective's fields"),
    ("group-a-string", json.dumps(_json_dump(pg_config__0="default_pg")).encode(),
     "pg_config['0'] is a str ('default_pg'), expected an object with the group's ranks and desc"),
    ("ranks-broken-text", json.dumps(_json_dump(pg_config__0__ranks="[0, 1")).encode(),
     "pg_config['0'].ranks is the text '[0, 1', expected a list of integers"),
    ("status-without-counter", json.dumps(_json_dump(pg_status__0__last_enqueued_collective=None)).encode(),
     "pg_status['0'] lacks the field last_enqueued_collective"),
    ("truncated-json", json.dumps(_json_dump()).encode()[:150],
     "no pickle header, and its JSON stops after 150 bytes, inside the document (the file is truncated)"),
    ("broken-json", json.dumps(_json_dump()).encode().replace(b'"state"', b'"state" "', 1),
     "its JSON is broken at line 1, column"),
    ("not-utf8", b'{"version": "2.9", "pg_config": {}, "x": "\xff"}', "byte 42 is not UTF-8 text"),
    # BINBYTES8 declaring 2**45 bytes: the unpickler asks for 32 TiB at once (MemoryError)
    ("pickle-past-memory", b"\x80\x05\x8e" + (2**45).to_bytes(8, "little") + b"x.",
     "not a readable Flight Recorder pickle: it declares an object larger than memory can hold (a damaged length"),
    ("pickle-truncated", pickle.dumps(_json_dump(), protocol=4)[:100],
     "not a readable Flight Recorder pickle: its 100 bytes end before the objects they begin"),
    ("pickle-memo-miss", b"\x80\x04h\x07.", "it refers back to an object it never stored"),
])
def test_a_refused_dump_is_told_in_a_sentence_about_the_dump(tmp_path, name, content, sentence):
    """Every refusal of a dump says which field or byte is wrong and what was expected, never the
    parser's own words ("'str' object has no attribute 'get'", "Expecting value: line 1 ...", "MemoryError:")."""
    f = tmp_path / ("_dump_3" if content[:1] == b"\x80" else "_dump_3.json")
    f.write_bytes(content)
    with pytest.raises(BadInputError) as err:
        load_dump(f)
    message = str(err.value)
    assert sentence in message, message
    assert not PYTHON_WORDS.search(message.split(": ", 1)[1]), message
    assert err.value.rank == 3 and err.value.path == str(f)


def test_directory_without_dumps_raises(tmp_path):
    (tmp_path / "_dump_0").write_bytes(b"junk")
    with pytest.raises(BadInputError, match="no readable Flight Recorder dump"):
        ddprof.analyze(tmp_path)
    with pytest.raises(BadInputError, match="expected a directory"):
        load_dump_dir(tmp_path / "_dump_0")


# ------------------------------------------------------------------------------------------ graph rule


def test_terminal_components():
    assert terminal_components({(0, 2), (1, 2), (2, 3)}) == [[3]]
    assert terminal_components({(0, 1), (1, 0), (2, 0)}) == [[0, 1]]
    assert terminal_components({(0, 1), (2, 3)}) == [[1], [3]]
    assert terminal_components(set()) == []


def test_deeply_nested_json_is_bad_input(tmp_path):
    (tmp_path / "rank_4.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(BadInputError) as err:
        load_dump(tmp_path / "rank_4.json")
    assert err.value.rank == 4


def test_a_report_on_dumps_alone_takes_backend_and_device_from_them():
    """gloo's Flight Recorder names its ops ``gloo:*``: a CPU job, not NCCL on a GPU."""
    from ddprof.readers.flightrec.load import find_dump_files, load_dump_files

    raw = SAMPLES / "gloo-ddp-4rank-slow-rank" / "raw"
    report = build_report(None, dumps=load_dump_files(find_dump_files(raw), source=str(raw)))
    assert (report["run"]["backend"], report["run"]["device"], report["run"]["ranks"]) == ("gloo", "cpu", [0, 1, 2, 3])
    assert report["status"] == "ok" and report["verdicts"][-1].startswith("no hang found")


def test_a_json_file_without_a_dump_s_keys_is_refused_without_building_its_values(tmp_path, monkeypatch):
    """A JSON object with no ``version`` is no dump: refused naming the keys it has, its values (entries of
    hundreds of MB in a damaged or foreign file) never built; one with the keys is read in full."""
    from ddprof.readers.flightrec import unpickle

    entries = [{"profiling_name": "nccl:all_reduce", "frames": [{"name": "f", "line": i}]} for i in range(1000)]
    foreign = tmp_path / "fr_trace_rank_0"
    foreign.write_text(json.dumps({"pg_config": {"0": {"ranks": "[0, 1]"}}, "pg_status": {}, "entries": entries}))

    def no_full_parse(*_a, **_k):
        raise AssertionError("the whole document was built")

    monkeypatch.setattr(unpickle.json, "loads", no_full_parse)
    with pytest.raises(BadInputError, match=r"no version key \(found 'pg_config', 'pg_status', 'entries'\)"):
        load_dump(foreign)
    monkeypatch.undo()
    dump = tmp_path / "_dump_1"
    dump.write_text(json.dumps({"version": "2.9", "pg_config": {"0": {"name": "0", "desc": "default_pg",
                                                                          "ranks": "[0, 1]"}},
                                "pg_status": {}, "entries": []}))
    assert load_dump(dump).rank == 1


def test_entries_written_out_again_are_read_once(tmp_path, monkeypatch):
    """A Flight Recorder numbers its entries once each: entries that repeat an earlier ``record_id`` (the same
    entries written out again) are read once, with a warning, in a pickle and in JSON alike; in JSON their
    other fields are never built (600 MB of such copies took 20 s to build)."""
    from ddprof.readers.flightrec import unpickle

    entries = [entry(TP, k + 1, record_id=k) for k in range(3)]
    body = {"version": "2.9", "pg_config": {TP[0]: {"name": TP[0], "desc": TP[1], "ranks": "[0, 1]"}},
            "pg_status": {}, "entries": entries + [dict(e) for _ in range(1000) for e in entries]}
    (tmp_path / "_dump_0").write_bytes(pickle.dumps(body, protocol=4))
    once = load_dump(tmp_path / "_dump_0")
    assert [e.record_id for e in once.entries] == [0, 1, 2]
    assert "3000 entries repeat an earlier entry's record_id: each entry read once" in once.warnings
    (tmp_path / "_dump_1").write_text(json.dumps(body))
    real_loads = unpickle.json.loads
    monkeypatch.setattr(unpickle.json, "loads", lambda s, *a, **k: real_loads(s, *a, **k) if len(s) < 10_000
                        else pytest.fail("the whole document was built"))
    from_json = load_dump(tmp_path / "_dump_1")
    assert from_json.entries == once.entries and from_json.warnings == once.warnings
