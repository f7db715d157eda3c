"""``hpc-hangkit collect`` and ``hpc-hangkit report`` are one roll call: on one directory,
under a site ``stack_samples = 3``, they give the same verdict (collect once used K = 5
whatever the site said)."""
import os
import shutil
import subprocess
import sys

import pytest

from hpc_hangkit import layout
from hpc_hangkit.parse.faulthandler import parse_faulthandler
from hpc_hangkit.rollcall import main_thread, report_from_dir, user_frame

from testlib import REPO, TESTS, validate_report

FIX = os.path.join(TESTS, "fixtures", "torch_samples")


def _k_sensitive_job(dst: str) -> str:
    """The real dumps of a hung 4-rank gloo job (rank 1 went the other way), rank 3's log
    rebuilt from its own real dumps so that its newest five samples are three taken
    mid-transition (in ``train``) and then two in ``sync_grads``: K = 3 puts rank 3 with
    ranks 0 and 2, K = 5 in a group of its own."""
    shutil.copytree(os.path.join(FIX, "hung_sigusr1_register", "gloo"), dst)
    data = open(os.path.join(FIX, "gloo_sigusr1_register_running", "rank_3_head520.log"), "rb").read()
    samples = parse_faulthandler(data).samples
    odd = [i for i, s in enumerate(samples) if user_frame(main_thread(s).frames).function != "sync_grads"]
    j = odd[0]
    assert 2 <= j < len(samples) - 1

    def dump(i):
        return data[samples[i].offset:samples[i + 1].offset]
    with open(os.path.join(dst, "rank_3.log"), "wb") as f:
        f.write(data[:samples[j - 2].offset] + dump(j) * 3 + dump(j - 1) + dump(j - 2))
    return dst


def _verdict(doc: dict) -> tuple:
    return doc["verdict"], doc["suspect_ranks"], sorted(sorted(g["ranks"]) for g in doc["groups"])


@pytest.mark.timeout(120)
def test_collect_and_report_agree_under_a_site_stack_samples(tmp_path):
    storage = tmp_path / "storage"
    hd = storage / layout.storage_attempt_prefix("4711", 0) / "hang_detector"
    job = _k_sensitive_job(str(hd / layout.WATCHDOG_DIR))
    # the directory can tell K = 3 from K = 5: otherwise this test could not fail
    k3, k5 = (_verdict(report_from_dir(job, samples=k).to_dict()) for k in (3, 5))
    assert k3 != k5, (k3, k5)
    (tmp_path / "scratch").mkdir()
    cfg = tmp_path / "site.toml"
    cfg.write_text('scratch_dir = "%s"\nstorage_url = "file://%s"\nstack_samples = 3\n'
                   % (tmp_path / "scratch", storage))
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGKIT_")}
    env["HPC_HANGKIT_CONFIG"] = str(cfg)

    def run(*args):
        p = subprocess.run([sys.executable, "-m", "hpc_hangkit"] + list(args) + ["--json"], env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                           timeout=90, cwd=REPO)
        assert p.returncode == 0, (args, p.stderr)
        return _verdict(validate_report(p.stdout, " ".join(args)))
    reported = run("report", str(hd))
    collected = run("collect", "4711", "--stored")
    assert reported == collected == k3, (reported, collected, k3)
