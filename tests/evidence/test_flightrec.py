"""Flight Recorder parser, analysis and torchfrtrace copies on real gloo dumps (fixtures).

tests/fixtures/flight_recorder/gloo_divergent_barrier/ is a real 4-rank gloo hang (torch 2.13 CPU):
rank 1 skipped an all_reduce and called barrier(); ranks 0, 2, 3 wait in all_reduce.
"""
from testlib import TESTS
import io
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from hpc_hangkit.evidence.flightrec import analyse, read_dumps, section_from_dir, write_torchfrtrace
from hpc_hangkit.parse.flightrec import FRParseError, parse_flightrec, rank_from_name

HERE = TESTS
FR = os.path.join(HERE, "fixtures", "flight_recorder", "gloo_divergent_barrier")


def torchfrtrace_argv():
    exe = shutil.which("torchfrtrace")
    return [exe] if exe else [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace"]


def test_pickle_and_json_dumps_parse_alike():
    for r in range(4):
        with open(os.path.join(FR, "pickle_raw", "rank_%d" % r), "rb") as f:
            p = parse_flightrec(f.read(), "rank_%d" % r)
        with open(os.path.join(FR, "json", "rank_%d.json" % r), "rb") as f:
            j = parse_flightrec(f.read(), "rank_%d.json" % r)
        assert p.rank == j.rank == r
        assert [(e.pg, e.seq, e.op, e.input_sizes) for e in p.entries] == \
               [(e.pg, e.seq, e.op, e.input_sizes) for e in j.entries]
        assert p.entries[-1].frames and not j.entries[-1].frames  # torch's JSON carries no stacks
    assert p.pg_config == {"": {"desc": "", "name": "", "ranks": "[0, 1, 2, 3]"}}


def test_hostile_pickle_is_refused_without_running_it(tmp_path):
    evil = pickle.dumps(os.system)  # a global: never resolved
    with pytest.raises(FRParseError, match="refused"):
        parse_flightrec(evil, "rank_0")
    with open(os.path.join(FR, "pickle_raw", "rank_0"), "rb") as f:
        data = f.read()
    with pytest.raises(FRParseError, match="rank_0.*bytes"):
        parse_flightrec(data[: len(data) // 2], "rank_0")
    with pytest.raises(FRParseError):
        parse_flightrec(b"", "rank_0.json")


def test_rank_from_name():
    assert rank_from_name("rank_3.json") == 3
    assert rank_from_name("fr_dump_host-a_12") == 12   # torch's <prefix><host>_<rank> names
    assert rank_from_name("rank_7.pickle") == 7
    assert rank_from_name("notes.txt") is None


def test_divergent_barrier_is_split_between_all_reduce_and_barrier(tmp_path):
    d = tmp_path / "flight_recorder"
    d.mkdir()
    for r in range(4):
        shutil.copy(os.path.join(FR, "pickle_raw", "rank_%d" % r), d / ("rank_%d.pickle" % r))
    sec = section_from_dir(str(tmp_path))
    assert sec["verdict"] == "SPLIT"
    (pg,) = sec["pgs"]
    assert pg["kind"] == "type"
    by = {g["op"]: g for g in pg["groups"]}
    assert by["barrier"]["ranks"] == [1] and by["all_reduce"]["ranks"] == [0, 2, 3]
    assert by["barrier"]["where"].endswith("hang_gloo.py:69 (checkpoint_barrier)")
    assert by["all_reduce"]["where"].endswith("hang_gloo.py:61 (sync_grads)")
    assert by["all_reduce"]["seq"] == by["barrier"]["seq"] == 4


def test_dump_error_file_and_empty_buffer_are_reported(tmp_path):
    d = tmp_path / "flight_recorder"
    d.mkdir()
    shutil.copy(os.path.join(FR, "json", "rank_0.json"), d / "rank_0.json")
    (d / "rank_1.json").write_text('{"dump_error": "RuntimeError: boom"}')
    (d / "rank_2.json").write_text('{"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": []}')
    (d / "rank_3.json").write_text('{"version": "2.10", "entr')  # truncated
    sec = section_from_dir(str(tmp_path))
    txt = "\n".join(sec["text"])
    assert "rank 1: no dump: RuntimeError: boom" in txt
    assert "rank(s) 2: empty Flight Recorder buffer" in txt
    assert "rank_3.json" in txt and "warning" in txt


def test_torchfrtrace_crashes_on_raw_gloo_dumps_and_reads_ours(tmp_path):
    raw = tmp_path / "raw"
    shutil.copytree(os.path.join(FR, "pickle_raw"), raw)
    bad = subprocess.run(torchfrtrace_argv() + [str(raw), "-p", "rank_"], capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode != 0 and "KeyError" in bad.stderr
    dumps, warns = read_dumps(os.path.join(FR, "pickle_raw"))
    assert len(dumps) == 4 and not warns
    out = tmp_path / "fixed"
    write_torchfrtrace(dumps, str(out))
    ok = subprocess.run(torchfrtrace_argv() + [str(out), "-p", "rank_"], capture_output=True, text=True,
                        timeout=120)
    assert ok.returncode == 0, ok.stderr
    both = ok.stdout + ok.stderr  # torchfrtrace reports through its logger (stderr)
    assert "Culprit rank 1" in both and "COLLECTIVE_TYPE_MISMATCH" in both


def test_capture_hook_reports_one_line_per_reason_not_per_rank(tmp_path):
    """An MPI-only job: no rank registered a Flight Recorder trigger; one problem line."""
    from types import SimpleNamespace

    from hpc_hangkit.evidence import flightrec

    problems = []
    ctx = SimpleNamespace(settings=SimpleNamespace(flight_recorder_buffer=2000), scratch=str(tmp_path),
                          hd_dir=str(tmp_path / "hd"), ranks={0: None, 1: None, 2: None, 3: None},
                          problem=problems.append)
    flightrec.capture_hook(ctx)
    assert problems == ["Flight Recorder: not a torch.distributed job (ranks 0-3 registered no Flight Recorder "
                        "trigger: torch.distributed not initialised in an armed process, or TORCH_FR_BUFFER_SIZE=0)"]
    assert sorted(p.name for p in (tmp_path / "hd" / "flight_recorder").iterdir()) == [
        "rank_%d.json" % r for r in range(4)]  # each rank's file still says why
    # and the roll call's section is that one line too
    sec = section_from_dir(str(tmp_path / "hd"))
    assert sec["text"] == problems and sec["verdict"] is None and sec["suspect_ranks"] is None
    assert sec["summary"] == "Flight Recorder: not a torch.distributed job"


def test_same_dump_error_on_many_ranks_is_one_line(tmp_path):
    d = tmp_path / "flight_recorder"
    d.mkdir()
    shutil.copy(os.path.join(FR, "json", "rank_0.json"), d / "rank_0.json")
    for r in (1, 2, 3):
        (d / ("rank_%d.json" % r)).write_text('{"dump_error": "rank %d (pid %d) wrote no dump within 5 s"}'
                                              % (r, 100 + r))
    txt = "\n".join(section_from_dir(str(tmp_path))["text"])
    assert "ranks 1-3: no dump: rank N (pid N) wrote no dump within 5 s" in txt
    assert txt.count("no dump:") == 1
