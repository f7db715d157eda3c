"""Collecting one job attempt's node scratch into storage: the whole collector, as the
epilog (:mod:`hpc_hangkit.slurm.epilog`, slurmd's hook) and ``hpc-hangkit collect`` on the
node run it.

:func:`collect_attempt` forks a child that drops to the job's user (:func:`as_user`,
:func:`drop_privileges`) and runs the copy engine (:func:`hpc_hangkit.collect.copy.copy_tree`)
to ``<storage_url>/<job_id>/attempt_<n>/hang_detector/...`` inside a deadline; the root
parent only supervises, reaps and, when the child failed or was killed, has a second child
record why in the local manifest. :func:`budget_s_of` is the time the epilog may spend,
:func:`load_site_settings` the collector's settings, :func:`job_user_of` the job's account,
:func:`rmdir_empty_attempt` the only thing root does under scratch (rmdir through O_NOFOLLOW
directory fds).

Security model (this runs as root on a directory the user controls): the root parent never
opens anything under the job scratch. The child drops to the job's uid/gid (supplementary
groups of its user) before touching scratch or storage, so it can read and write only what
the user could anyway; the parent kills it when the budget is spent.
"""
import errno
import json
import os
import select
import signal
import sys
import time

from hpc_hangkit import layout
from hpc_hangkit.collect.copy import (Tree, copy_tree, open_attempt, open_dir_at, record_not_copied,
                                      scratch_parts, summary)
from hpc_hangkit.storage import attempt_url, fsspec_config_as_this_user, write_alias

__all__ = ["drop_privileges", "as_user", "collect_attempt", "load_site_settings", "budget_s_of", "job_user_of",
           "rmdir_empty_attempt"]

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
# collecting one attempt (the epilog's and `collect` on the node)


def collect_attempt(scratch_dir, job_id, attempt, storage_url, *, uid, gid, user, deadline,
                 host, home=None, alias=None, lifeline=None):
    """Copy one attempt's scratch to ``storage_url`` in a child that runs as ``uid``/``gid``
    (:func:`as_user`); if the child fails or is killed at ``deadline`` (a
    time.monotonic() value), a second child records why in the local manifest. With
    ``alias`` (``<A>_<T>``), the array-task alias is stored too (best effort).

    Returns a dict ``{status, reason, dest, copied, kept, failed, pending, skipped,
    skipped_paths}`` (:func:`hpc_hangkit.collect.copy.summary`; ``status`` also
    ``no_scratch``, ``busy``, ``timeout`` or ``error``; ``orphaned: True`` when the
    ``lifeline`` (:func:`as_user`) said the epilog was killed). A child stopped at the
    deadline after it had copied everything (nothing left in scratch) is ``complete``, with
    a ``reason`` and no counts. Never raises for storage errors."""
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
    if st2 == "ok" and value2.get("status") == "no_files" and status != "error":
        # the stopped child had left nothing: the local manifest goes only after the stored
        # record is written, so it finished the copy and was stopped before it could report
        out = {"status": "complete", "dest": dest,
               "reason": "the collector copied every file and wrote the stored record, then was "
                         "stopped (%s) before it reported" % why}
    elif st2 == "ok":
        out = value2
    else:
        out = {"status": "error" if status == "error" else "timeout", "reason": why,
               "manifest_error": value2}
    if status == "orphaned":
        out["orphaned"] = True
    return out


# --------------------------------------------------------------------------
# settings, budget, the job's account, the emptied scratch


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


def budget_s_of(settings, env, budget_s=None, hard_timeout_s=None):
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
