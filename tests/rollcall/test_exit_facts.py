"""A rank's end as a value (hpc_hangkit.parse.exits.Exit): made where it is read, decided on
by its fields, written in words only by rollcall.prose; node summaries keep their version-1
words and read the ones written before the value existed."""
from testlib import TESTS
import json
import os
import shutil
import subprocess
import sys
import textwrap

from hpc_hangkit.evidence.registry import SOURCES
from hpc_hangkit.parse.exits import Exit, ExitHow
from hpc_hangkit.report.render import render_json
from hpc_hangkit.rollcall import RankFacts, build_report, report_from_dir
from hpc_hangkit.rollcall.prose import exit_from_text, exit_public, exit_text

FIX = os.path.join(TESTS, "fixtures", "torch_samples", "gloo_divergent_barrier", "faulthandler")
GOLDEN = os.path.join(TESTS, "report", "golden")

#: one end of every kind, with the words a report has always printed for it
ENDS = [
    (Exit(ExitHow.NORMAL, status=0), "exited normally (status 0)"),
    (Exit(ExitHow.SYS_EXIT, status=3), "called sys.exit(3): exit status 3"),
    (Exit(ExitHow.EXCEPTION, error="RuntimeError: shard 7 is corrupt"), "RuntimeError: shard 7 is corrupt"),
    (Exit(ExitHow.EXCEPTION, status=2), "exited with an uncaught exception (status 2)"),
    (Exit(ExitHow.EXCEPTION), "exited with a Python traceback"),
    (Exit(ExitHow.FATAL, error="Segmentation fault"), "Fatal Python error: Segmentation fault"),
    (Exit(ExitHow.VANISHED, pid=1234),
     "vanished (pid 1234 gone with no exit record: SIGKILL, the OOM killer or os._exit)"),
    (Exit(ExitHow.SILENT, silent_s=42.0),
     "went silent: nothing written for 42 s while other ranks kept writing (exited, killed, or its node is gone)"),
]


def test_every_end_has_its_words_and_reads_back_from_them():
    for e, words in ENDS:
        assert exit_text(e) == words
        assert exit_from_text(words) == e, words
        assert Exit.from_json(json.loads(json.dumps(e.to_json()))) == e


def test_public_exit_object():
    pub = {e.how: exit_public(e) for e, _ in ENDS[:3] + ENDS[5:7]}
    assert pub[ExitHow.NORMAL] == {"how": "normal", "status": 0, "signal": None, "type": None, "message": None}
    assert pub[ExitHow.SYS_EXIT]["how"] == "exit" and pub[ExitHow.SYS_EXIT]["status"] == 3
    assert pub[ExitHow.EXCEPTION] == {"how": "exception", "status": 1, "signal": None, "type": "RuntimeError",
                                      "message": "shard 7 is corrupt"}
    assert pub[ExitHow.FATAL] == {"how": "signal", "status": None, "signal": "SIGSEGV", "type": None,
                                  "message": "Segmentation fault"}
    assert pub[ExitHow.VANISHED]["how"] == "vanished" and pub[ExitHow.VANISHED]["message"].startswith("vanished")
    assert exit_public(None)["how"] == "vanished"


def test_bad_end_objects_are_refused():
    for d in (None, [], {}, {"how": "retired"}, {"how": "normal", "status": "0"}, {"how": "normal", "status": True},
              {"how": "exception", "error": 5}, {"how": "silent", "silent_s": "long"}):
        assert Exit.from_json(d) is None, d


def _job(tmp_path, ranks):
    d = tmp_path / "job"
    for r in ranks:
        p = d / "watchdog" / ("rank_%d.log" % r)
        p.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(os.path.join(FIX, "rank_%d.log" % r), str(p))
    return d


def test_an_exception_whose_words_read_like_a_normal_exit_is_an_exception(tmp_path):
    """A real process dies on an exception whose printed last line starts "exited normally
    (status 0)" (its class's __qualname__ says so): the roll call keeps it an exception,
    through the node summary (which then carries an ``end`` object), in report.json and the
    sentence; the words stay as printed."""
    d = _job(tmp_path, (0, 2, 3))
    code = textwrap.dedent("""
        class Odd(Exception):
            pass
        Odd.__qualname__ = "exited normally (status 0)"
        Odd.__module__ = "builtins"
        def load_shard():
            raise Odd("the shard is gone")
        load_shard()
    """)
    p = subprocess.run([sys.executable, "-c", code], stderr=subprocess.PIPE, timeout=60)
    assert p.returncode == 1
    last = p.stderr.decode().strip().splitlines()[-1]
    assert last == "exited normally (status 0): the shard is gone"
    (d / "rank_1.stderr.txt").write_bytes(p.stderr)

    rep = report_from_dir(str(d))
    assert rep.verdict == "GONE" and rep.suspect_ranks == [1]
    assert rep.ranks[1].exit == last
    assert rep.ranks[1].ending() == Exit(ExitHow.EXCEPTION, error=last)
    entry = rep.summary["facts"]["1"]
    assert entry["exit"] == last and entry["end"] == {"how": "exception", "error": last}
    g = next(g for g in json.loads(render_json(rep))["groups"] if 1 in g["ranks"])
    assert g["exit"]["how"] == "exception"
    assert "left while others still expected" not in rep.reason  # not a clean exit
    assert "see the last traceback below" in rep.reason
    # the summary alone (what merges and --summary-in read) says the same
    again = build_report(json.loads(json.dumps(rep.summary)))
    assert again.ranks[1].ending().how is ExitHow.EXCEPTION
    # where the words are not misread, the summary holds only the words (as before)
    assert all("end" not in e for r, e in rep.summary["facts"].items() if r != "1")


def test_a_summary_written_before_the_end_object_is_read_by_its_words():
    """The golden node summaries are version-1 summaries as earlier releases wrote them:
    their ``exit`` words give each exited rank its end."""
    with open(os.path.join(GOLDEN, "gone_fatal_dump_and_traceback", "summary.json")) as fh:
        old = json.load(fh)
    assert old["hangkit_summary"] == 1 and all("end" not in e for e in old["facts"].values())
    rep = build_report(old)
    assert rep.ranks[1].ending() == Exit(ExitHow.EXCEPTION, error="RuntimeError: shard 7 is corrupt")
    g = next(g for g in rep.groups if 1 in g.ranks)
    assert g.exit["how"] == "exception" and g.exit["type"] == "RuntimeError"
    with open(os.path.join(GOLDEN, "gone_fatal_dump", "summary.json")) as fh:
        fatal = json.load(fh)
    ends = {r: RankFacts.from_summary(None, "exited", e).ending() for r, e in fatal["facts"].items() if "exit" in e}
    assert ends and all(e.how is ExitHow.FATAL for e in ends.values())


def test_an_unreadable_end_object_falls_back_to_the_words():
    f = RankFacts.from_summary(None, "exited", {"exit": "exited normally (status 0)", "end": {"how": "?"}})
    assert f.ending() == Exit(ExitHow.NORMAL, status=0)


def test_only_the_ras_section_adopts_together_without_suspects():
    flags = {s.name: s.together_names_suspects for s in SOURCES}
    assert flags.pop("nccl_ras") is False
    assert flags and all(flags.values())
