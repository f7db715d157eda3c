"""The root side of the Slurm epilog: ``python -m hpc_hangkit.collect epilog``.

``slurm/epilog`` (a tiny stdlib supervisor, run by slurmd as root on every
node of a job when it ends) runs :func:`main`, which runs :func:`epilog`: it
finds the job's node-local scratch (``<scratch_dir>/job_<id>/attempt_<n>/``),
and for each attempt forks a child that drops to the job's user and runs the
copy engine (:func:`hpc_hangkit.collect.copy.copy_tree`) to
``<storage_url>/<job_id>/attempt_<n>/hang_detector/...``, inside the time
budget ``epilog_budget_s``. It never calls a Slurm command and always returns 0.

Security model (the epilog runs as root on a directory the user controls):
the root parent never opens anything under the job scratch. It forks a child
that drops to the job's uid/gid (``SLURM_JOB_UID``/``SLURM_JOB_GID``,
supplementary groups of ``SLURM_JOB_USER``) before touching scratch or
storage, so the child can read and write only what the user could anyway; the
parent supervises the child with a deadline and kills it when the budget is
spent. As root it only removes the emptied attempt directory (rmdir through
O_NOFOLLOW directory fds).
"""
import errno
import json
import os
import select
import signal
import socket
import sys
import time

from hpc_hangkit import layout
from hpc_hangkit.collect.copy import (Tree, copy_tree, job_scratch, local_attempts,
                                      open_attempt, open_dir_at, record_not_copied,
                                      scratch_parts, summary)
from hpc_hangkit.slurm import rasport
from hpc_hangkit.slurm.commands import attempt_from_env, job_id_from_env
from hpc_hangkit.storage import attempt_url, fsspec_config_as_this_user, write_alias

#: reserved at the end of the budget to record a timeout
_FINALIZE_S = 2.0


# --------------------------------------------------------------------------
# privilege drop + supervision (the root parent only waits)


def drop_privileges(uid, gid, user=None):
    """Become uid/gid for good (real, effective and saved ids). Raises OSError."""
    if os.geteuid() != 0:
        if uid != os.geteuid():
            raise PermissionError(errno.EPERM, "not root: cannot become uid %d" % uid)
        return
    if uid == 0:
        return
    try:
        import pwd

        if user and pwd.getpwnam(user).pw_uid == uid:
            os.initgroups(user, gid)      # the user's project groups (shared storage)
        else:
            os.setgroups([gid])
    except (OSError, KeyError):
        os.setgroups([gid])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getresuid() != (uid, uid, uid) or os.getresgid() != (gid, gid, gid):
        raise PermissionError(errno.EPERM, "privilege drop to %d:%d did not stick" % (uid, gid))
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise PermissionError(errno.EPERM, "could regain root after dropping to uid %d" % uid)


def as_user(fn, *, uid, gid, user, deadline, home=None, lifeline=None):
    """Run ``fn()`` in a forked child as ``uid``/``gid`` (groups of ``user``, umask 077, cwd
    /, HOME=``home`` if given); ``fn`` returns a JSON-able value. Returns ``("ok", value)``,
    ``("timeout", None)`` (the child is SIGKILLed at ``deadline``, a time.monotonic()
    value), ``("orphaned", None)`` (``lifeline``, the read end of slurm/epilog's pipe, hit
    EOF: the supervisor was killed, so the child is SIGKILLed at once) or
    ``("error", text)`` (the child's exception, or its death without a result).
    Raises OSError only if the fork or pipe fails."""
    r, w = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            os.umask(0o077)
            drop_privileges(uid, gid, user)
            if home:
                os.environ["HOME"] = home
            fsspec_config_as_this_user()
            try:
                os.chdir("/")
            except OSError:
                pass
            out = {"ok": True, "value": fn()}
        except BaseException as e:  # noqa: BLE001 -- reported to the parent
            out = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
            code = 1
        try:
            data = json.dumps(out, default=str).encode()
            view = memoryview(data)
            while view:
                view = view[os.write(w, view):]
        except BaseException:  # noqa: BLE001
            code = 2
        os._exit(code)
    os.close(w)
    buf = []
    timed_out = orphaned = False
    watch = [r] + ([lifeline] if lifeline is not None else [])
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                timed_out = True
                break
            ready, _, _ = select.select(watch, [], [], min(left, 0.5))
            if lifeline is not None and lifeline in ready and not os.read(lifeline, 1):
                timed_out = orphaned = True
                break
            if r in ready:
                b = os.read(r, 65536)
                if not b:
                    break
                buf.append(b)
    finally:
        os.close(r)
        if timed_out:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(pid, None if timed_out else max(0.5, deadline - time.monotonic()))
    if timed_out:
        return ("orphaned" if orphaned else "timeout"), None
    try:
        out = json.loads(b"".join(buf).decode())
    except ValueError:
        return "error", "collector child died without a result"
    return ("ok", out["value"]) if out.get("ok") else ("error", out.get("error"))


def _reap(pid, wait_s):
    end = time.monotonic() + (wait_s if wait_s is not None else 5.0)
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        if time.monotonic() >= end:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            end = time.monotonic() + 5.0
        time.sleep(0.02)


# --------------------------------------------------------------------------
# collecting one attempt (shared by the epilog and `collect` on the node)


def collect_attempt(scratch_dir, job_id, attempt, storage_url, *, uid, gid, user, deadline,
                 host, home=None, alias=None, lifeline=None):
    """Copy one attempt's scratch to ``storage_url`` in a child that runs as ``uid``/``gid``
    (:func:`as_user`); if the child fails or is killed at ``deadline`` (a
    time.monotonic() value), a second child records why in the local manifest. With
    ``alias`` (``<A>_<T>``), the array-task alias is stored too (best effort).

    Returns a dict ``{status, reason, dest, copied, kept, failed, pending, skipped,
    skipped_paths}`` (:func:`hpc_hangkit.collect.copy.summary`; ``status`` also
    ``no_scratch``, ``busy``, ``timeout`` or ``error``; ``orphaned: True`` when the
    ``lifeline`` (:func:`as_user`) said the epilog was killed). Never raises for storage
    errors."""
    t0 = time.monotonic()
    reserve = min(_FINALIZE_S, max(0.2, (deadline - t0) * 0.2))
    work_deadline = deadline - reserve
    if storage_url:
        try:
            dest = attempt_url(storage_url, job_id, attempt, user)
        except ValueError as e:
            dest, no_dest = None, str(e)
        else:
            no_dest = None
    else:
        dest, no_dest = None, "no storage_url configured (site config.toml or HANGKIT_STORAGE_URL)"

    def work():
        afd = open_attempt(scratch_dir, job_id, attempt, expect_uid=uid if uid else None)
        try:
            if dest is None:
                return record_not_copied(Tree(afd), job_id, attempt, host, None, "incomplete",
                                          no_dest)
            # leave the copy loop early enough to write the manifest
            man = copy_tree(afd, dest, job_id=job_id, attempt=attempt, host=host,
                            deadline=work_deadline - 0.2)
            if alias and man.get("status") != "no_files" and time.monotonic() < work_deadline:
                try:
                    write_alias(storage_url, alias, job_id, user)
                except Exception:  # noqa: BLE001 -- a convenience; the data is keyed by id
                    pass
            return summary(man)
        finally:
            os.close(afd)

    status, value = as_user(work, uid=uid, gid=gid, user=user, deadline=work_deadline, home=home,
                            lifeline=lifeline)
    if status == "ok":
        return value    # busy included: the collector that holds the attempt records it
    if status == "orphaned":
        why = ("the epilog was killed (slurmd's epilog timeout?) after %.1f s; collector "
               "stopped with it" % (time.monotonic() - t0))
        deadline = min(deadline, time.monotonic() + _FINALIZE_S)
    elif status == "timeout":
        why = ("storage %s did not finish within the budget; collector killed after %.1f s"
               % (dest, time.monotonic() - t0))
    else:
        why = "collector failed: %s" % value
    if status == "error" and value and ("FileNotFoundError" in value):
        return {"status": "no_scratch", "reason": value}

    def mark():
        afd = open_attempt(scratch_dir, job_id, attempt, expect_uid=uid if uid else None)
        try:
            return record_not_copied(Tree(afd), job_id, attempt, host, dest,
                                      "incomplete" if status == "error" else "timeout", why)
        finally:
            os.close(afd)

    st2, value2 = as_user(mark, uid=uid, gid=gid, user=user, deadline=deadline, home=home)
    if st2 == "ok":
        out = value2
    else:
        out = {"status": "error" if status == "error" else "timeout", "reason": why,
               "manifest_error": value2}
    if status == "orphaned":
        out["orphaned"] = True
    return out


# --------------------------------------------------------------------------
# settings


def load_site_settings(env=None, storage_url=None):
    """Settings for the collector: site config.toml < ``HANGKIT_*`` < ``storage_url``.

    ``HANGKIT_SCRATCH_DIR`` is ignored: inside a job it names that job's own
    attempt scratch, while the collector needs the scratch root. Raises
    :class:`hpc_hangkit.config.ConfigError` for a bad site config.
    """
    from hpc_hangkit.config import load_settings

    env = dict(os.environ if env is None else env)
    env.pop(layout.ENV_SCRATCH_DIR, None)
    return load_settings(env=env, overrides={"storage_url": storage_url} if storage_url else None)


def _budget(settings, env, budget_s=None, hard_timeout_s=None):
    """Seconds the epilog may spend: ``budget_s``, else the setting (from ``settings``, or
    when the site config could not be loaded from ``HANGKIT_EPILOG_BUDGET_S`` by the same
    rule, :func:`hpc_hangkit.config.epilog_budget_s`), capped at ``hard_timeout_s - 3``."""
    if budget_s is None:
        budget_s = getattr(settings, "epilog_budget_s", None)
    if budget_s is None:
        from hpc_hangkit.config import epilog_budget_s

        budget_s = epilog_budget_s((env or {}).get("HANGKIT_EPILOG_BUDGET_S"))
    budget_s = float(budget_s)
    if hard_timeout_s:
        budget_s = min(budget_s, float(hard_timeout_s) - 3.0)
    return max(1.0, budget_s)


# --------------------------------------------------------------------------
# the epilog


def epilog(env=None, *, budget_s=None, hard_timeout_s=None, log=None):
    """Collect this node's scratch of the ending job; the body of ``slurm/epilog``.

    Reads (from ``env``, default os.environ, as set by slurmd):
    ``SLURM_JOB_ID`` (the unique numeric id), ``SLURM_ARRAY_JOB_ID`` +
    ``SLURM_ARRAY_TASK_ID`` if present (slurmd 22.05-24.11 does not set them
    for an epilog; the batch-step monitor records the array alias with
    :func:`hpc_hangkit.storage.record_array_alias`), ``SLURM_JOB_RESTART_COUNT`` (attempt), ``SLURM_JOB_UID``, ``SLURM_JOB_GID``,
    ``SLURM_JOB_USER``; settings ``scratch_dir``, ``storage_url`` and
    ``epilog_budget_s`` (site config.toml / ``HANGKIT_*``; default budget
    60 s, capped at ``hard_timeout_s - 3``). Never raises, never calls Slurm,
    returns 0 always; the outcome is logged as one line through ``log``
    (default: stderr) and, on failure, left in the scratch manifest.
    Returns the process exit status (0).
    """
    t0 = time.monotonic()
    env = dict(os.environ if env is None else env)
    log = log or (lambda msg: print("hpc-hangkit epilog: " + msg, file=sys.stderr, flush=True))
    try:
        key = job_id_from_env(env)
        attempt = attempt_from_env(env)
        uid, gid = int(env["SLURM_JOB_UID"]), int(env["SLURM_JOB_GID"])
        user = job_user_of(uid, env.get("SLURM_JOB_USER") or None, log)
        try:
            settings = load_site_settings(env=env)
            scratch_dir, storage_url = settings.scratch_dir, settings.storage_url
            cfg_err = None
        except Exception as e:  # noqa: BLE001 -- a bad site config must not fail the node
            settings, cfg_err = None, "%s: %s" % (type(e).__name__, e)
            scratch_dir, storage_url = layout.DEFAULT_SCRATCH_DIR, None
        deadline = t0 + _budget(settings, env, budget_s, hard_timeout_s)
        # the job's ranks are gone from this node: its NCCL RAS port is free again
        freed = rasport.release_at(scratch_dir, key)
        if freed:
            log("job %s: NCCL RAS port %s given back" % (key, ",".join(map(str, freed))))
        # The epilog that runs at a requeue already sees the NEXT restart count,
        # so the attempt that just ended cannot be told from the environment:
        # collect every attempt directory up to this count, oldest first.
        attempts = [a for a in local_attempts(scratch_dir, key) if a <= attempt]
        if not attempts:
            log("job %s attempt %d: no scratch at %s; nothing to collect%s" % (
                key, attempt, job_scratch(scratch_dir, key, attempt),
                (" (site config error: %s)" % cfg_err) if cfg_err else ""))
            return 0
        home = None
        try:
            import pwd

            home = pwd.getpwuid(uid).pw_dir
        except (KeyError, ImportError):
            pass
        alias = None
        arr, task = env.get("SLURM_ARRAY_JOB_ID"), env.get("SLURM_ARRAY_TASK_ID")
        if arr and task and arr.isdigit() and task.isdigit():
            alias = "%s_%s" % (arr, task)
        lifeline = _lifeline(env)
        for attempt in attempts:
            res = collect_attempt(scratch_dir, key, attempt, storage_url, uid=uid, gid=gid,
                                  user=user, deadline=deadline, host=host_name(env), home=home,
                                  alias=alias, lifeline=lifeline)
            if cfg_err and res.get("status") not in ("complete", "no_files"):
                res["reason"] = "config error (%s); %s" % (cfg_err, res.get("reason"))
            log("job %s attempt %d: %s in %.1f s (%s)" % (
                key, attempt, res.get("status"), time.monotonic() - t0,
                ", ".join("%s=%s" % (k, res[k]) for k in ("copied", "failed", "pending", "skipped",
                                                           "reason") if res.get(k))))
            if res.get("status") == "complete":
                rmdir_empty_attempt(scratch_dir, key, attempt)
            if res.get("orphaned"):
                break
    except BaseException as e:  # noqa: BLE001 -- the epilog must always exit 0
        try:
            log("error (ignored, node stays up): %s: %s" % (type(e).__name__, e))
        except BaseException:  # noqa: BLE001
            pass
    return 0


def _lifeline(env):
    """The read end of slurm/epilog's lifeline pipe (``HANGKIT_EPILOG_LIFELINE_FD``), or
    None when there is none (the epilog body run directly, tests)."""
    try:
        fd = int(env.get("HANGKIT_EPILOG_LIFELINE_FD", ""))
        os.fstat(fd)
    except (ValueError, OSError):
        return None
    return fd


def job_user_of(uid, name, log=None):
    """The job's user name, taken from the passwd entry of ``uid`` (SLURM_JOB_UID), the
    id the collector runs as: a ``name`` (SLURM_JOB_USER) that disagrees is ignored and
    logged, so ``{user}`` in storage_url always names the uid's own account. Without a
    passwd entry, ``name`` if it is a plain name, else None."""
    try:
        import pwd

        real = pwd.getpwuid(uid).pw_name
    except (KeyError, ImportError):
        real = None
    if real is not None:
        if name is not None and name != real and log:
            log("SLURM_JOB_USER %r is not uid %d's account %r; using %r" % (name, uid, real, real))
        name = real
    if name is not None:
        try:
            layout.validate_user(name)
        except ValueError:
            return None
    return name


def host_name(env):
    """This node's short name: ``SLURMD_NODENAME`` of ``env`` (slurmd's), else the host name."""
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def rmdir_empty_attempt(scratch_dir, key, attempt):
    """Remove the (now empty) attempt dir and its empty parents up to scratch_dir; never
    raises for a directory that is not empty or gone (ValueError for a bad ``key``).

    Runs as root: only rmdir through dir fds opened with O_NOFOLLOW (rmdir
    never follows a link and fails on a non-empty directory)."""
    parts = scratch_parts(scratch_dir, key, attempt)
    fds = []
    try:
        fds.append(os.open(scratch_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for p in parts[:-1]:
            fds.append(open_dir_at(fds[-1], p))
        for i in range(len(parts) - 1, -1, -1):
            os.rmdir(parts[i], dir_fd=fds[i])
    except OSError:
        pass
    finally:
        for fd in fds:
            os.close(fd)


# --------------------------------------------------------------------------
# `python -m hpc_hangkit.collect epilog` (no click: the epilog imports little)


def main(argv=None):
    """``python -m hpc_hangkit.collect epilog [--budget-s S] [--hard-timeout-s S]``:
    the epilog body (run by slurm/epilog as root). Always returns 0."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m hpc_hangkit.collect")
    sub = ap.add_subparsers(dest="cmd")
    ep = sub.add_parser("epilog", help="collect this node's scratch (run by slurm/epilog as root)")
    ep.add_argument("--budget-s", type=float, default=None)
    ep.add_argument("--hard-timeout-s", type=float, default=None)
    try:
        args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit:
        args = argparse.Namespace(cmd="epilog", budget_s=None, hard_timeout_s=None)
    return epilog(budget_s=getattr(args, "budget_s", None),
                  hard_timeout_s=getattr(args, "hard_timeout_s", None))
