"""Storage on s3:// against a real S3-protocol server (moto server mode on
127.0.0.1): verified round trip, and a server that stalls (SIGSTOP) while the
collector copies: the collector returns inside its budget with a local
manifest, and a later finish completes the copy (scenario 13).
"""
import json
import os
import signal
import time

import pytest

from hpc_hangkit import storage
from hpc_hangkit.collect import copy, job
from hpc_hangkit.collect.attempt import collect_attempt

from collect_helpers import (S3_ENV, area, faulthandler_dump,  # noqa: F401 (area: fixture)
                             job_user, start_moto)

BUCKET = "hangkit"


@pytest.fixture
def s3(spawn, port, monkeypatch):
    """(moto Popen, endpoint URL); s3fs/fsspec configured for it in this
    process and, through the environment, in forked and spawned children."""
    import fsspec.config

    proc, url = start_moto(spawn, port)
    for k, v in S3_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("FSSPEC_S3_ENDPOINT_URL", url)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": url})
    import s3fs

    fs = s3fs.S3FileSystem(endpoint_url=url, skip_instance_cache=True)
    fs.mkdir(BUCKET)
    yield proc, url
    try:
        os.kill(proc.pid, signal.SIGCONT)
    except ProcessLookupError:
        pass


@pytest.mark.timeout(120)
def test_s3_round_trip_verified(area, s3):
    uid, gid, user = job_user()
    dump = faulthandler_dump(area.base)
    files = {"watchdog/rank_0.pid31.log": dump, "watchdog/rank_1.pid32.log": dump + b"\n",
             "hang_detector/report.json": b'{"verdict": "MISSED"}\n',
             "heartbeats/rank_0.pid31.hb": os.urandom(300)}
    d = area.make_attempt("201", 0, uid, gid, files)
    url = "s3://%s/prefix" % BUCKET
    res = collect_attempt(area.scratch, "201", 0, url, uid=uid, gid=gid, user=user,
                          deadline=time.monotonic() + 60, host="hk1")
    assert res["status"] == "complete", res
    assert res["copied"] == 4
    assert not any(os.path.isfile(os.path.join(r, n)) for r, _, ns in os.walk(d) for n in ns)
    assert storage.storage_attempts(url, "201") == [0]
    out, n = job.fetch_from_storage(url, "201", 0, os.path.join(area.base, "got"))
    assert n == 4
    for rel, data in files.items():
        dest = rel[len("hang_detector/"):] if rel.startswith("hang_detector/") else rel
        with open(os.path.join(out, dest), "rb") as f:
            assert f.read() == data
    import fsspec

    with fsspec.open(url + "/201/attempt_0/collect_hk1.json", "rb") as f:
        man = json.load(f)
    assert man["status"] == "complete" and all(len(x["sha256"]) == 64 for x in man["files"])


@pytest.mark.timeout(120)
def test_s3_stalled_past_budget_then_finished_later(area, s3):
    proc, _ = s3
    uid, gid, user = job_user()
    big = os.urandom(3 << 20)
    files = {"watchdog/rank_0.pid41.log": b"small\n", "hang_detector/big.bin": big}
    d = area.make_attempt("202", 0, uid, gid, files)
    url = "s3://%s/stall" % BUCKET
    os.kill(proc.pid, signal.SIGSTOP)         # accepts TCP connections, never answers
    t0 = time.monotonic()
    res = collect_attempt(area.scratch, "202", 0, url, uid=uid, gid=gid, user=user,
                          deadline=t0 + 4.0, host="hk1")
    took = time.monotonic() - t0
    assert took < 5.0, "collector overran its 4 s budget: %.1f s" % took
    assert res["status"] == "timeout", res
    man = copy.read_manifest(d)
    assert man["status"] == "timeout"
    assert "did not finish within the budget" in man["reason"]
    assert {f["path"] for f in man["files"] if f["state"] in ("pending", "failed")} == set(files)
    for rel, data in files.items():
        with open(os.path.join(d, rel), "rb") as f:
            assert f.read() == data, "local copy kept"

    os.kill(proc.pid, signal.SIGCONT)
    out = job.finish_local("202", settings=area.settings(url))
    assert [r["status"] for r in out] == ["complete"], out
    got, n = job.fetch_from_storage(url, "202", 0, os.path.join(area.base, "got"))
    assert n == 2
    assert open(os.path.join(got, "big.bin"), "rb").read() == big
    assert not os.path.exists(d)


@pytest.mark.timeout(120)
def test_user_fsspec_config_is_used_for_the_users_job(area, spawn, port, monkeypatch):
    """The job user's ``~/.config/fsspec/s3.json`` (endpoint and keys of the loopback S3
    server) is what the collector uses, although fsspec was imported by root first with
    a configuration of its own that points nowhere."""
    import fsspec.config
    import s3fs

    from collect_helpers import two_users

    proc, url = start_moto(spawn, port)
    for k in list(os.environ):
        if k.startswith(("AWS_", "FSSPEC_")):
            monkeypatch.delenv(k)
    monkeypatch.setitem(fsspec.config.conf, "s3", {"endpoint_url": "http://127.0.0.1:9"})
    s3fs.S3FileSystem(endpoint_url=url, key="testing", secret="testing",
                      skip_instance_cache=True).mkdir("userconf")
    (uid, gid, user), _ = two_users()
    home = os.path.join(area.base, "home-" + user)
    cfg_dir = os.path.join(home, ".config", "fsspec")
    os.makedirs(cfg_dir)
    with open(os.path.join(cfg_dir, "s3.json"), "w") as f:
        json.dump({"s3": {"endpoint_url": url, "key": "testing", "secret": "testing",
                          "client_kwargs": {"region_name": "us-east-1"}}}, f)
    for root, dirs, files in os.walk(home):
        for n in dirs + files + ["."]:
            os.chown(os.path.join(root, n), uid, gid)
    area.make_attempt("203", 0, uid, gid, {"watchdog/rank_0.pid1.log": b"dump\n"})
    res = collect_attempt(area.scratch, "203", 0, "s3://userconf/d", uid=uid, gid=gid,
                          user=user, deadline=time.monotonic() + 60, host="hk1",
                          home=home)
    assert res["status"] == "complete", res
    fs = s3fs.S3FileSystem(endpoint_url=url, key="testing", secret="testing",
                           skip_instance_cache=True)
    assert fs.cat("userconf/d/203/attempt_0/hang_detector/watchdog/rank_0.pid1.log") == b"dump\n"
