"""Site set-up: ``hpc-hangkit admin build-spank | install | check``.

Run as root on each node (and the login nodes, for the submit-time option).

- :func:`build_spank` compiles ``spank/hangkit_spank.c`` against the installed
  ``slurm/spank.h`` (``make -C spank``; Debian package libslurm-dev) and stamps
  the Slurm version it was built for next to the ``.so``.
- :func:`install` puts the plugin, a ``plugstack.conf.d`` entry with the site
  default, the prolog/epilog hooks and an example ``config.toml`` in place. It
  never edits ``slurm.conf`` (a cluster-wide file): it prints the lines to add.
- :func:`check` finds what is missing or wrong on this node and says how to fix it.

The plugin source and the prolog/epilog scripts come from the source tree
(``spank/``, ``slurm/``) next to the installed package, i.e. a git checkout
installed with ``pip install -e`` or ``pip install .`` from it.
"""
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from typing import Dict, List, Optional

from hpc_hangkit import fsio, layout

PLUGIN = "hangkit_spank.so"
PLUGSTACK_ENTRY = "hpc-hangkit.conf"
VERSION_SUFFIX = ".slurm-version"
MODES = ("off", "observe", "fail")


class AdminError(RuntimeError):
    """Something the admin must fix first; the message says what and how."""


@dataclass
class Finding:
    """One check result: ``level`` OK | WARN | ERROR, ``what`` was found, ``fix`` (how to fix it, or '')."""
    level: str
    what: str
    fix: str = ""

    def line(self) -> str:
        return "%-5s %s%s" % (self.level, self.what, ("\n      fix: " + self.fix) if self.fix else "")


def source_tree() -> Optional[str]:
    """The checkout holding ``spank/hangkit_spank.c`` and ``slurm/prolog`` (next to the package), or None."""
    import hpc_hangkit

    top = os.path.dirname(os.path.dirname(os.path.abspath(hpc_hangkit.__file__)))
    if os.path.isfile(os.path.join(top, "spank", "hangkit_spank.c")) and \
            os.path.isfile(os.path.join(top, "slurm", "prolog")):
        return top
    return None


def _need_source() -> str:
    src = source_tree()
    if src is None:
        raise AdminError("the hpc-hangkit source tree (spank/, slurm/) is not next to the installed "
                         "package: run this from a git checkout installed with `pip install -e .`")
    return src


def slurm_version() -> Optional[str]:
    """The installed Slurm's version string (``22.05.8``), from ``slurmd -V`` or ``scontrol --version``."""
    for cmd in (["slurmd", "-V"], ["scontrol", "--version"]):
        exe = shutil.which(cmd[0])
        if not exe:
            continue
        try:
            out = subprocess.run([exe] + cmd[1:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.STDOUT, timeout=20).stdout.decode()
        except (OSError, subprocess.TimeoutExpired):
            continue
        m = re.search(r"(\d+\.\d+\.\d+)", out)
        if m:
            return m.group(1)
    return None


def build_spank(out: Optional[str] = None, include: Optional[str] = None) -> str:
    """Compile the SPANK plugin; returns the path of the ``.so``.

    ``out``: destination (default ``spank/hangkit_spank.so`` in the source
    tree); ``include``: directory holding ``slurm/spank.h`` (default
    /usr/include). Writes ``<out>.slurm-version`` with the Slurm version built
    for. Raises AdminError with the compiler's message, or when spank.h or
    make/gcc are missing.
    """
    src = _need_source()
    inc = include or "/usr/include"
    if not os.path.isfile(os.path.join(inc, "slurm", "spank.h")):
        raise AdminError("%s/slurm/spank.h not found: install the Slurm development headers "
                         "(Debian: apt-get install libslurm-dev) or pass --slurm-include" % inc)
    for tool in ("make", "gcc"):
        if not shutil.which(tool):
            raise AdminError("%s not found: apt-get install %s" % (tool, tool))
    p = subprocess.run(["make", "-B", "-C", os.path.join(src, "spank"), "SLURM_INCLUDE=" + inc],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=300)
    built = os.path.join(src, "spank", PLUGIN)
    if p.returncode != 0 or not os.path.isfile(built):
        raise AdminError("building the SPANK plugin failed:\n" + p.stdout.decode(errors="replace")[-3000:])
    dest = out or built
    if os.path.abspath(dest) != os.path.abspath(built):
        os.makedirs(os.path.dirname(os.path.abspath(dest)), exist_ok=True)
        shutil.copyfile(built, dest)
        os.chmod(dest, 0o755)
    with open(dest + VERSION_SUFFIX, "w") as f:
        f.write((slurm_version() or "unknown") + "\n")
    return dest


def _under(root: str, path: str) -> str:
    return os.path.join(root, path.lstrip("/")) if root not in ("", "/") else path


def _write(path: str, text: str, mode: int, actions: List[str], dry_run: bool, keep: bool = False) -> None:
    if keep and os.path.exists(path):
        actions.append("kept     %s (exists)" % path)
        return
    if os.path.exists(path) and open(path, errors="replace").read() == text:
        actions.append("same     %s" % path)
        return
    actions.append("write    %s" % path)
    if dry_run:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fsio.write_atomic(path, text, mode)


def plugstack_line(lib_dir: str, default_mode: str, scratch_dir: str, required: bool = False) -> str:
    """The plugstack.conf line for the plugin installed in ``lib_dir``."""
    return "%s %s/%s default=%s scratch_dir=%s bin=%s/hpc-hangkit" % (
        "required" if required else "optional", lib_dir.rstrip("/"), PLUGIN, default_mode,
        scratch_dir, lib_dir.rstrip("/"))


def slurm_conf_lines(etc_dir: str) -> List[str]:
    """The slurm.conf lines hpc-hangkit needs (see slurm/slurm.conf.snippet)."""
    return ["Prolog=%s/prolog" % etc_dir.rstrip("/"), "Epilog=%s/epilog" % etc_dir.rstrip("/"),
            "PrologFlags=Alloc", "JobAcctGatherType=jobacct_gather/linux", "JobRequeue=1"]


def install(default_mode: str = "off", root: str = "/", lib_dir: str = "/usr/local/lib/hpc-hangkit",
            etc_dir: str = "/etc/hpc-hangkit", slurm_etc: str = "/etc/slurm",
            dry_run: bool = False) -> List[str]:
    """Install the site set-up under ``root``; returns one line per action, then the
    slurm.conf lines to add. Paths written into files are the final ones (without
    ``root``). Raises AdminError (bad mode, no source tree, build failure,
    invalid existing config.toml)."""
    if default_mode not in MODES:
        raise AdminError("default mode %r: use one of %s" % (default_mode, ", ".join(MODES)))
    src = _need_source()
    actions: List[str] = []
    lib, etc, setc = _under(root, lib_dir), _under(root, etc_dir), _under(root, slurm_etc)

    # 1. the plugin, built here for this node's Slurm
    so = os.path.join(lib, PLUGIN)
    if dry_run:
        actions.append("build    %s (make -C spank)" % so)
    else:
        os.makedirs(lib, exist_ok=True)
        build_spank(out=so)
        actions.append("built    %s for Slurm %s" % (so, open(so + VERSION_SUFFIX).read().strip()))
    # 2. the monitor launcher, prolog and epilog (absolute interpreter: slurmd gives them no PATH)
    py = sys.executable
    _write(os.path.join(lib, "hpc-hangkit"), "#!/bin/sh\nexec %s -m hpc_hangkit \"$@\"\n" % py,
           0o755, actions, dry_run)
    for hook in ("prolog", "epilog"):
        with open(os.path.join(src, "slurm", hook)) as f:
            _write(os.path.join(lib, hook + ".py"), f.read(), 0o755, actions, dry_run)
        _write(os.path.join(etc, hook), "#!/bin/sh\n# hpc-hangkit %s (always exits 0)\nexec %s %s/%s.py\n"
               % (hook, py, lib_dir.rstrip("/"), hook), 0o755, actions, dry_run)
    # 3. site config (kept if present)
    cfg = os.path.join(etc, "config.toml")
    with open(os.path.join(src, "slurm", "config.toml.example")) as f:
        _write(cfg, f.read(), 0o644, actions, dry_run, keep=True)
    scratch = layout.DEFAULT_SCRATCH_DIR
    if os.path.exists(cfg):
        from hpc_hangkit.config import ConfigError, load_settings
        try:
            scratch = load_settings(env={}, path=cfg).scratch_dir
        except ConfigError as e:
            raise AdminError("%s is invalid: %s" % (cfg, e))
    # 4. plugstack entry, and the include of plugstack.conf.d
    _write(os.path.join(setc, "plugstack.conf.d", PLUGSTACK_ENTRY),
           "# hpc-hangkit SPANK plugin (written by `hpc-hangkit admin install`)\n%s\n"
           % plugstack_line(lib_dir, default_mode, scratch), 0o644, actions, dry_run)
    ps = os.path.join(setc, "plugstack.conf")
    inc = "include %s/plugstack.conf.d/*.conf" % slurm_etc.rstrip("/")
    have = open(ps).read() if os.path.exists(ps) else ""
    if "plugstack.conf.d" not in have:
        actions.append("append   %s: %s" % (ps, inc))
        if not dry_run:
            os.makedirs(setc, exist_ok=True)
            with open(ps, "a") as f:
                f.write(("" if not have or have.endswith("\n") else "\n") + inc + "\n")
    actions.append("")
    actions.append("Add to slurm.conf on every node and the controller (not done automatically):")
    actions += ["    " + ln for ln in slurm_conf_lines(etc_dir)]
    actions.append("then restart slurmctld and slurmd, and run: hpc-hangkit admin check")
    return actions


# --------------------------------------------------------------------------- check

def read_slurm_conf(path: str) -> Dict[str, str]:
    """``key.lower() -> value`` of a slurm.conf (later lines win; NodeName/PartitionName lines skipped)."""
    out: Dict[str, str] = {}
    with open(path, errors="replace") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if "=" not in line:
                continue
            k, v = line.split("=", 1)
            if k.strip().lower() in ("nodename", "partitionname", "nodeset", "frontendname"):
                continue
            out[k.strip().lower()] = v.strip().split()[0] if v.strip() else ""
    return out


def _plugstack_entries(setc: str) -> List[tuple]:
    """(file, line) of every plugstack line naming hangkit_spank.so."""
    files = [os.path.join(setc, "plugstack.conf")]
    d = os.path.join(setc, "plugstack.conf.d")
    if os.path.isdir(d):
        files += sorted(os.path.join(d, n) for n in os.listdir(d) if n.endswith(".conf"))
    out = []
    for fp in files:
        if not os.path.isfile(fp):
            continue
        for line in open(fp, errors="replace"):
            s = line.split("#", 1)[0].strip()
            if PLUGIN in s:
                out.append((fp, s))
    return out


def check(root: str = "/", etc_dir: str = "/etc/hpc-hangkit", slurm_etc: str = "/etc/slurm") -> List[Finding]:
    """Check this node's set-up; returns findings (OK/WARN/ERROR, each with a fix)."""
    F: List[Finding] = []
    etc, setc = _under(root, etc_dir), _under(root, slurm_etc)
    ver = slurm_version()
    F.append(Finding("OK", "Slurm %s installed" % ver) if ver else
             Finding("ERROR", "no Slurm found (slurmd/scontrol not on PATH)", "install Slurm on this node"))
    if not os.path.isfile("/usr/include/slurm/spank.h"):
        F.append(Finding("WARN", "slurm/spank.h not installed: the plugin cannot be rebuilt here",
                         "apt-get install libslurm-dev"))

    # site config
    settings = None
    cfg = os.environ.get(layout.CONFIG_PATH_ENV) or os.path.join(etc, "config.toml")
    from hpc_hangkit.config import ConfigError, load_settings
    if not os.path.exists(cfg):
        F.append(Finding("WARN", "no site config at %s: built-in defaults apply" % cfg,
                         "hpc-hangkit admin install (writes an example), then edit it"))
    try:
        settings = load_settings(env={}, path=cfg if os.path.exists(cfg) else None)
        if os.path.exists(cfg):
            F.append(Finding("OK", "site config %s is valid" % cfg))
    except ConfigError as e:
        F.append(Finding("ERROR", "site config: %s" % e, "fix %s (hpc-hangkit admin check re-reads it)" % cfg))

    # plugstack
    entries = _plugstack_entries(setc)
    if not entries:
        F.append(Finding("ERROR", "no plugstack entry for %s under %s" % (PLUGIN, setc),
                         "hpc-hangkit admin install --default-mode observe"))
    for fp, line in entries:
        words = line.split()
        so = next((w for w in words if w.endswith(PLUGIN)), "")
        args = dict(w.split("=", 1) for w in words if "=" in w)
        so_path = _under(root, so)
        if not os.path.isfile(so_path):
            F.append(Finding("ERROR", "%s: plugin %s does not exist" % (fp, so), "hpc-hangkit admin install"))
        else:
            built = open(so_path + VERSION_SUFFIX).read().strip() if os.path.exists(so_path + VERSION_SUFFIX) else None
            if built and ver and built.split(".")[:2] != ver.split(".")[:2]:
                F.append(Finding("ERROR", "plugin %s was built for Slurm %s, this node runs %s"
                                 % (so, built, ver), "hpc-hangkit admin install (rebuilds it), then restart slurmd"))
            else:
                F.append(Finding("OK", "plugin %s (%s)" % (so, "built for Slurm %s" % built if built else
                                                           "build version unknown")))
        mode = args.get("default", "off")
        if mode not in MODES:
            F.append(Finding("ERROR", "%s: default=%s is not a mode" % (fp, mode),
                             "use default=off, observe or fail"))
        else:
            F.append(Finding("OK", "site default mode: %s" % mode))
        sd = args.get("scratch_dir", layout.DEFAULT_SCRATCH_DIR)
        if settings is not None and sd != settings.scratch_dir:
            F.append(Finding("ERROR", "%s: scratch_dir=%s but the site config says %s: ranks would not be armed"
                             % (fp, sd, settings.scratch_dir), "make them equal and restart slurmd"))
        b = args.get("bin")
        if not b:
            F.append(Finding("WARN", "%s: no bin= argument: no batch-step monitor is started" % fp,
                             "hpc-hangkit admin install"))
        elif not os.access(_under(root, b), os.X_OK):
            F.append(Finding("ERROR", "%s: bin=%s is not executable" % (fp, b), "hpc-hangkit admin install"))
        if fp.startswith(os.path.join(setc, "plugstack.conf.d")):
            ps = os.path.join(setc, "plugstack.conf")
            if not os.path.exists(ps) or "plugstack.conf.d" not in open(ps).read():
                F.append(Finding("ERROR", "%s does not include plugstack.conf.d/*.conf" % ps,
                                 "add: include %s/plugstack.conf.d/*.conf" % slurm_etc))

    # slurm.conf
    sc = os.path.join(setc, "slurm.conf")
    if not os.path.isfile(sc):
        F.append(Finding("ERROR", "no %s" % sc, "install and configure Slurm"))
    else:
        conf = read_slurm_conf(sc)
        for key, name in (("prolog", "Prolog"), ("epilog", "Epilog")):
            v = conf.get(key)
            if not v:
                F.append(Finding("ERROR", "slurm.conf has no %s=: no per-job scratch%s" % (
                    name, "" if key == "prolog" else ", no collection"),
                    "add %s=%s/%s and restart slurmctld/slurmd" % (name, etc_dir, key)))
            elif not os.access(_under(root, v), os.X_OK):
                F.append(Finding("ERROR", "slurm.conf %s=%s is not executable" % (name, v),
                                 "hpc-hangkit admin install"))
            else:
                F.append(Finding("OK", "%s=%s" % (name, v)))
        # Contain, RunInJob (24.11+), X11, NoHold and ForceRequeueOnFail imply Alloc
        # (Slurm's read_config.c prolog_str2flags)
        if not {"alloc", "contain", "runinjob", "x11", "nohold", "forcerequeueonfail"} & set(
                f.strip() for f in conf.get("prologflags", "").lower().split(",")):
            F.append(Finding("ERROR", "PrologFlags lacks Alloc: other nodes get their scratch only at their "
                             "first step", "add PrologFlags=Alloc"))
        if conf.get("jobacctgathertype", "") != "jobacct_gather/linux":
            F.append(Finding("WARN", "JobAcctGatherType=%s: sstat step counters are empty"
                             % (conf.get("jobacctgathertype") or "(unset)"),
                             "JobAcctGatherType=jobacct_gather/linux"))
        if conf.get("jobrequeue", "1") == "0":
            F.append(Finding("WARN", "JobRequeue=0: fail mode requeues only jobs submitted with --requeue",
                             "JobRequeue=1, or tell users to submit with --requeue"))

    # runtime pieces
    if settings is not None:
        if not settings.storage_url:
            F.append(Finding("WARN", "storage_url is not set: dumps stay on the nodes, "
                             "`hpc-hangkit collect` of finished jobs finds nothing",
                             "set storage_url in %s" % cfg))
        sd = _under(root, settings.scratch_dir)
        if os.path.lexists(sd):
            st = os.lstat(sd)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
                F.append(Finding("WARN", "%s is not a root-owned, non-writable directory; the prolog will "
                                 "move it aside" % sd, ""))
        if not shutil.which(settings.pyspy_path):
            F.append(Finding("WARN", "%s not found: captures have no py-spy stacks (the watchdog dumps remain)"
                             % settings.pyspy_path, "pip install py-spy"))
    return F
