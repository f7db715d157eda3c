"""`hpc-hangkit admin install | check | build-spank`: real builds with gcc against
the installed slurm/spank.h, installed into a temporary root, then checked and
broken on purpose."""
from testlib import REPO
import os
import shutil
import subprocess
import sys

import pytest

from hpc_hangkit.slurm import admin


needs_spank_h = pytest.mark.skipif(
    not os.path.isfile("/usr/include/slurm/spank.h") or not shutil.which("gcc"),
    reason="needs slurm/spank.h (apt-get install libslurm-dev) and gcc; tests/run_all.sh installs both")


def cli(*args, env=None):
    return subprocess.run([sys.executable, "-m", "hpc_hangkit"] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, timeout=300, env=env)


@pytest.fixture
def installed(tmp_path):
    root = str(tmp_path / "root")
    lines = admin.install(default_mode="observe", root=root)
    os.makedirs(os.path.join(root, "etc", "slurm"), exist_ok=True)
    shutil.copy(os.path.join(REPO, "slurm", "slurm.conf.snippet"), os.path.join(root, "etc", "slurm", "slurm.conf"))
    return root, lines


def levels(findings, level):
    return [f for f in findings if f.level == level]


@needs_spank_h
@pytest.mark.timeout(300)
def test_build_spank_cli_builds_a_plugin_with_the_spank_symbols(tmp_path):
    out = str(tmp_path / "hk.so")
    p = cli("admin", "build-spank", "--out", out)
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().strip() == out
    syms = subprocess.run(["nm", "-D", out], stdout=subprocess.PIPE).stdout.decode()
    for s in ("slurm_spank_init", "slurm_spank_init_post_opt", "slurm_spank_task_init", "plugin_version"):
        assert s in syms
    assert open(out + ".slurm-version").read().strip() == admin.slurm_version()


def test_build_spank_without_headers_says_which_package(tmp_path):
    p = cli("admin", "build-spank", "--slurm-include", str(tmp_path))
    assert p.returncode == 1 and b"libslurm-dev" in p.stderr


@needs_spank_h
@pytest.mark.timeout(300)
def test_install_then_check_is_clean(installed):
    root, lines = installed
    assert any(l.startswith("built") for l in lines)
    assert "    PrologFlags=Alloc" in lines
    conf = open(os.path.join(root, "etc", "slurm", "plugstack.conf.d", "hpc-hangkit.conf")).read()
    assert "optional /usr/local/lib/hpc-hangkit/hangkit_spank.so default=observe scratch_dir=/tmp/hpc-hangkit" in conf
    assert "include /etc/slurm/plugstack.conf.d/*.conf" in open(os.path.join(root, "etc", "slurm", "plugstack.conf")).read()
    f = admin.check(root=root)
    assert levels(f, "ERROR") == [], [x.line() for x in f]
    # a second install changes nothing it need not, and keeps the site's config
    again = admin.install(default_mode="observe", root=root)
    assert any(l.startswith("kept") and l.endswith("config.toml (exists)") for l in again)
    assert not any(l.startswith("append") for l in again)


@needs_spank_h
@pytest.mark.timeout(300)
def test_check_finds_each_breakage_and_says_how_to_fix(installed):
    root, _ = installed
    so = os.path.join(root, "usr", "local", "lib", "hpc-hangkit", admin.PLUGIN)
    with open(so + admin.VERSION_SUFFIX, "w") as f:
        f.write("21.08.1\n")
    cfg = os.path.join(root, "etc", "hpc-hangkit", "config.toml")
    text = open(cfg).read().replace('scratch_dir = "/tmp/hpc-hangkit"', 'scratch_dir = "/scratch/hk"')
    text = text.replace('# storage_url = "file:///shared/hangkit/{user}"', 'storage_url = "file:///tmp/x"')
    open(cfg, "w").write(text)
    sc = os.path.join(root, "etc", "slurm", "slurm.conf")
    text = open(sc).read()          # read before open(..., "w") empties the file
    assert "PrologFlags=Alloc" in text and "Epilog=/etc/hpc-hangkit/epilog" in text
    open(sc, "w").write(text.replace("PrologFlags=Alloc", "PrologFlags=Serial")
                        .replace("Epilog=/etc/hpc-hangkit/epilog", ""))
    errs = [f.what + " | " + f.fix for f in levels(admin.check(root=root), "ERROR")]
    assert any("built for Slurm 21.08.1" in e and "admin install" in e for e in errs), errs
    assert any("scratch_dir=/tmp/hpc-hangkit but the site config says /scratch/hk" in e for e in errs), errs
    assert any("PrologFlags lacks Alloc" in e for e in errs), errs
    assert any("no Epilog=" in e for e in errs), errs
    os.unlink(so)
    p = cli("admin", "check", "--root", root)
    assert p.returncode == 1 and b"does not exist" in p.stdout


@pytest.mark.parametrize("flags", ["Contain", "RunInJob,Serial", "alloc"])
def test_check_accepts_prolog_flags_that_imply_alloc(installed, flags):
    """Contain and RunInJob (Slurm 24.11) imply Alloc in Slurm's own parser."""
    root, _ = installed
    sc = os.path.join(root, "etc", "slurm", "slurm.conf")
    text = open(sc).read()
    open(sc, "w").write(text.replace("PrologFlags=Alloc", "PrologFlags=" + flags))
    assert "PrologFlags=" + flags in open(sc).read()
    assert not any("PrologFlags" in f.what for f in levels(admin.check(root=root), "ERROR"))


@pytest.mark.timeout(120)
def test_install_dry_run_writes_nothing(tmp_path):
    root = str(tmp_path / "r")
    p = cli("admin", "install", "--root", root, "--dry-run", "--default-mode", "fail")
    assert p.returncode == 0, p.stderr.decode()
    assert b"plugstack.conf.d/hpc-hangkit.conf" in p.stdout
    assert not os.path.exists(root)


def test_install_refuses_a_bad_mode():
    with pytest.raises(admin.AdminError, match="default mode 'sometimes'"):
        admin.install(default_mode="sometimes", dry_run=True)


@pytest.mark.slurm
@pytest.mark.timeout(300)
def test_check_on_the_running_test_cluster_has_no_error():
    from test_slurm_cluster import HK_ROOT, SITE_TOML
    if os.geteuid() != 0:
        pytest.skip("the Slurm test cluster needs root")
    subprocess.run(["bash", os.path.join(REPO, "slurm", "testbed", "up.sh")], check=True, timeout=900,
                   env=dict(os.environ, HK_PYTHON=sys.executable, HK_ROOT=HK_ROOT), stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    p = cli("admin", "check", env=dict(os.environ, HPC_HANGKIT_CONFIG=SITE_TOML))
    assert p.returncode == 0, p.stdout.decode()
    assert b"site default mode: observe" in p.stdout
