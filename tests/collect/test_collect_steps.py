"""Interactive steps keep their files apart: the collector stores ``step_<s>/`` of the
attempt scratch under ``<storage>/<job>/attempt_<n>/step_<s>/hang_detector/``, and
``hpc-hangkit collect`` makes one roll call per step (and one of the batch script's ranks),
each from its own tree alone.

Three real hung jobs' dumps (tests/fixtures/torch_samples) stand in for the batch script's
ranks and two steps: every one has ranks 0-3, so a mixed tree would put two jobs' rank 1 in
one roll call and change its groups. Runs as root (the collector drops to ``nobody``).
"""
import json
import os
import subprocess
import sys
import time
import types

import pytest

from hpc_hangkit import layout
from hpc_hangkit.collect import copy, job
from hpc_hangkit.collect.attempt import collect_attempt
from hpc_hangkit.rollcall import report_from_dir

from collect_helpers import area, job_user, local_files  # noqa: F401 (area: fixture)
from testlib import TESTS, validate_report

FIX = os.path.join(TESTS, "fixtures", "torch_samples")
#: where each tree's dumps come from: None = the batch script's ranks, else a step id
JOBS = {None: os.path.join(FIX, "gloo_divergent_barrier", "faulthandler"),
        1: os.path.join(FIX, "hung_sigusr1_register", "gloo"),
        7: os.path.join(FIX, "gloo_divergent_sleep", "faulthandler")}


def _files():
    out = {}
    for step, src in JOBS.items():
        top = "" if step is None else layout.step_dir_name(step) + "/"
        for n in sorted(os.listdir(src)):
            rank = int(n.split("_")[1].split(".")[0])      # rank_<r>.log
            name = layout.watchdog_log_name(rank, 1000 + 10 * (step or 0) + rank)
            with open(os.path.join(src, n), "rb") as f:
                out["%s%s/%s" % (top, layout.WATCHDOG_DIR, name)] = f.read()
    return out


def _settings(area):
    return types.SimpleNamespace(stack_samples=5, **vars(area.settings()))


def _key(doc):
    return (doc["verdict"], doc["suspect_ranks"], sorted(sorted(g["ranks"]) for g in doc["groups"]),
            sorted(g.get("frame", {}).get("function", "") for g in doc["groups"]))


def test_step_names_and_scratch_paths():
    assert layout.step_dir_name(3) == "step_3" == layout.step_dir_name("03")
    assert layout.step_of("step_12") == 12
    for bad in ("step_", "step_1/..", "steps_1", "step_-1", "attempt_0", None):
        assert layout.step_of(bad) is None
    for bad in (-1, "1/2", "..", "batch", "4294967294x", ""):
        with pytest.raises(ValueError):
            layout.step_dir_name(bad)
    a = layout.job_scratch_dir("/s", "5", 0)
    assert layout.step_scratch_dir(a, 2) == "/s/job_5/attempt_0/step_2"
    # the plugin's spelling is layout's
    src = open(os.path.join(TESTS, "..", "spank", "hangkit_spank.c")).read()
    assert '#define STEP_DIR_PREFIX "%s"' % layout.STEP_DIR_PREFIX in src


def test_storage_paths_of_steps_and_of_the_batch_script():
    d = copy._dest_rel
    assert d("watchdog/rank_0.pid1.log") == "hang_detector/watchdog/rank_0.pid1.log"
    assert d("hang_detector/report.txt") == "hang_detector/report.txt"
    assert d("step_2/watchdog/rank_0.pid1.log") == "step_2/hang_detector/watchdog/rank_0.pid1.log"
    assert d("step_2/hang_detector/report.txt") == "step_2/hang_detector/report.txt"
    # not a step directory: stored under the attempt's own tree, as any other name
    assert d("step_x/a") == "hang_detector/step_x/a"
    assert d("step_2") == "hang_detector/step_2"
    assert copy._priority("step_2/watchdog/a") == copy._priority("watchdog/a")


@pytest.mark.timeout(120)
def test_collector_stores_steps_apart_and_collect_reports_each(area, tmp_path):
    uid, gid, user = job_user()
    files = _files()
    d = area.make_attempt("4242", 0, uid, gid, files)
    res = collect_attempt(area.scratch, "4242", 0, "file://" + area.storage, uid=uid, gid=gid,
                          user=user, deadline=time.monotonic() + 60, host="hk1")
    assert res["status"] == "complete", res
    assert local_files(d) == {}
    stored = local_files(os.path.join(area.storage, layout.storage_attempt_prefix("4242", 0)))
    for rel in files:
        assert copy._dest_rel(rel) in stored, rel
    assert job.stored_steps("file://" + area.storage, "4242", 0) == [1, 7]

    got = job.collect_job("4242", settings=_settings(area), live=False,
                          out_dir=str(tmp_path / "out"))
    assert [p.step for p in got.parts] == [None, 1, 7]
    for p in got.parts:
        want = report_from_dir(JOBS[p.step]).to_dict()
        doc = p.report.to_dict()
        validate_report(doc)
        assert _key(doc) == _key(want), p.step
        assert len(os.listdir(os.path.join(p.hd_dir, layout.WATCHDOG_DIR))) == 4
    # the trees differ (else this test could not tell a mixed tree from a clean one)
    assert len({json.dumps(_key(p.report.to_dict())) for p in got.parts}) > 1

    # the command: one labelled report per tree; JSON: one object listing them
    cfg = tmp_path / "site.toml"
    cfg.write_text('scratch_dir = "%s"\nstorage_url = "file://%s"\n' % (area.scratch, area.storage))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    env["HPC_HANGKIT_CONFIG"] = str(cfg)

    def run(*args):
        p = subprocess.run([sys.executable, "-m", "hpc_hangkit", "collect", "4242", "--stored"]
                           + list(args), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           stdin=subprocess.DEVNULL, timeout=100)
        assert p.returncode == 0, p.stderr.decode()
        return p.stdout.decode()
    text = run()
    titles = [ln for ln in text.splitlines() if ln.startswith("=== ")]
    assert titles == ["=== job 4242 attempt 0: batch script ===",
                      "=== job 4242 attempt 0 step 1 ===", "=== job 4242 attempt 0 step 7 ==="]
    doc = json.loads(run("--json"))
    assert [r["step"] for r in doc["reports"]] == [None, 1, 7]
    for r, p in zip(doc["reports"], got.parts):
        assert _key(r["report"]) == _key(p.report.to_dict())
    # --html: one page per tree; --out keeps the trees in the storage layout
    page = tmp_path / "pages" / "r.html"
    page.parent.mkdir()
    run("--html", str(page), "--out", str(tmp_path / "kept"))
    assert sorted(os.listdir(page.parent)) == ["r.html", "r.step_1.html", "r.step_7.html"]
    for step in (1, 7):
        kept = tmp_path / "kept" / layout.step_dir_name(step) / layout.HANG_DETECTOR_DIR / layout.WATCHDOG_DIR
        assert len(os.listdir(kept)) == 4
        assert "suspect" in (page.parent / ("r.step_%d.html" % step)).read_text().lower()


@pytest.mark.timeout(120)
def test_an_allocation_of_steps_only_and_a_batch_job_unchanged(area, tmp_path):
    uid, gid, user = job_user()
    only = {k: v for k, v in _files().items() if k.startswith("step_7/")}
    # the job environment the prolog writes: stored in the attempt's own tree, no rank's file
    only[layout.JOB_ENV_FILE] = b"# written by the hpc-hangkit prolog\nHANGKIT_MODE=observe\n"
    area.make_attempt("4243", 0, uid, gid, only)
    assert collect_attempt(area.scratch, "4243", 0, "file://" + area.storage, uid=uid, gid=gid,
                           user=user, deadline=time.monotonic() + 60, host="hk1")["status"] == "complete"
    got = job.collect_job("4243", settings=_settings(area), live=False, out_dir=str(tmp_path / "a"))
    assert [p.step for p in got.parts] == [7]
    assert _key(got.report.to_dict()) == _key(report_from_dir(JOBS[7]).to_dict())

    plain = {k: v for k, v in _files().items() if not k.startswith("step_")}
    area.make_attempt("4244", 0, uid, gid, plain)
    assert collect_attempt(area.scratch, "4244", 0, "file://" + area.storage, uid=uid, gid=gid,
                           user=user, deadline=time.monotonic() + 60, host="hk1")["status"] == "complete"
    got = job.collect_job("4244", settings=_settings(area), live=False, out_dir=str(tmp_path / "b"))
    assert [p.step for p in got.parts] == [None]
    assert got.hd_dir == str(tmp_path / "b" / layout.HANG_DETECTOR_DIR)
