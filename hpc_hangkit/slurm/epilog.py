"""slurmd's epilog hook: ``python -m hpc_hangkit.collect epilog``.

``slurm/epilog`` (a tiny stdlib supervisor, run by slurmd as root on every node of a job
when it ends) runs :func:`main`, which runs :func:`epilog`: it reads the job once
(:class:`hpc_hangkit.slurmjob.JobEnv`), gives the job's NCCL RAS port back, finds the job's
node-local scratch (``<scratch_dir>/job_<id>/attempt_<n>/``) and has the collector
(:func:`hpc_hangkit.collect.attempt.collect_attempt`: privilege drop, copy, budget) store
each attempt, inside the time budget ``epilog_budget_s``. It never calls a Slurm command
and always returns 0. The security model is the collector's (:mod:`hpc_hangkit.collect.attempt`).
"""
import os
import sys
import time

from hpc_hangkit import layout
from hpc_hangkit.collect.attempt import budget_s_of, collect_attempt, job_user_of, load_site_settings, \
    rmdir_empty_attempt
from hpc_hangkit.collect.copy import job_scratch, local_attempts
from hpc_hangkit.slurm import rasport
from hpc_hangkit.slurmjob import JobEnv


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
        job = JobEnv.from_env(env)
        key, attempt, uid, gid = job.job_id, job.attempt, job.uid, job.gid
        if uid is None or gid is None:
            raise ValueError("SLURM_JOB_UID/SLURM_JOB_GID not set")
        user = job_user_of(uid, env.get("SLURM_JOB_USER") or None, log)
        try:
            settings = load_site_settings(env=env)
            scratch_dir, storage_url = settings.scratch_dir, settings.storage_url
            cfg_err = None
        except Exception as e:  # noqa: BLE001 -- a bad site config must not fail the node
            settings, cfg_err = None, "%s: %s" % (type(e).__name__, e)
            scratch_dir, storage_url = layout.DEFAULT_SCRATCH_DIR, None
        deadline = t0 + budget_s_of(settings, env, budget_s, hard_timeout_s)
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
        lifeline = _lifeline(env)
        for attempt in attempts:
            res = collect_attempt(scratch_dir, key, attempt, storage_url, uid=uid, gid=gid,
                                  user=user, deadline=deadline, host=job.node, home=home,
                                  alias=job.alias, lifeline=lifeline)
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
