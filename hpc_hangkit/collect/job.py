"""``hpc-hangkit collect JOBID``: a job's dumps, gathered live or read from storage.

Runs as the user who asks (or root on a node). :func:`collect_job` first
finishes any copy a failed epilog left in this node's scratch
(:func:`finish_local`), then gathers: a running job live from every node
(:func:`hpc_hangkit.gather.capture_job`: ``hpc-hangkit slurm-capture`` through
``srun --overlap``), a finished one from
``<storage_url>/<job_id>/attempt_<n>/hang_detector/`` (:func:`fetch_from_storage`),
and builds the roll call (:func:`hpc_hangkit.rollcall.report_from_dir`).
"""
import os
import shutil
import stat
import sys
import time

from hpc_hangkit import layout
from hpc_hangkit.collect.attempt import collect_attempt, load_site_settings, rmdir_empty_attempt
from hpc_hangkit.collect.copy import has_manifest, job_scratch, local_attempts
from hpc_hangkit.slurmjob import node_name
from hpc_hangkit.storage import (ALIAS_SUFFIX, attempt_url, expand_storage_url, fs_and_root,
                                 read_alias, storage_attempts)

HANG_DETECTOR = layout.HANG_DETECTOR_DIR


def finish_local(job_id, *, settings=None, attempt=None, budget_s=120.0, log=None, select=None):
    """Finish copies a failed epilog left in this node's scratch.

    For each ``<scratch_dir>/<job>/attempt_<n>`` here (or only ``attempt``),
    run the same verified copy as the epilog: as root, in a child that drops
    to the directory's owner; as a user, only for directories that user owns.
    ``select(attempt, has_manifest) -> bool`` picks the attempts to touch
    (default: all); the copy deletes local files, so never select the scratch
    of an attempt that is still running. Returns a list of per-attempt result
    dicts (``attempt``, ``status``, ``copied``, ``failed``, ``reason``...).
    Raises ValueError for a bad id.
    """
    key = layout.unique_job_id(job_id)
    settings = settings or load_site_settings()
    out = []
    attempts = [attempt] if attempt is not None else local_attempts(settings.scratch_dir, key)
    for a in attempts:
        path = job_scratch(settings.scratch_dir, key, a)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            out.append({"attempt": a, "status": "refused", "reason": "%s is not a directory" % path})
            continue
        if select is not None and not select(a, has_manifest(path)):
            continue
        if os.geteuid() != 0 and st.st_uid != os.geteuid():
            out.append({"attempt": a, "status": "refused",
                        "reason": "%s belongs to uid %d; run as that user or root"
                                  % (path, st.st_uid)})
            continue
        import pwd

        try:
            pw = pwd.getpwuid(st.st_uid)
            user, home = pw.pw_name, pw.pw_dir
            gid = pw.pw_gid
        except KeyError:
            user, home, gid = None, None, st.st_gid
        res = collect_attempt(settings.scratch_dir, key, a, settings.storage_url,
                              uid=st.st_uid, gid=gid, user=user,
                              deadline=time.monotonic() + budget_s,
                              host=node_name(os.environ), home=home)
        res["attempt"] = a
        if res.get("status") == "complete" and os.geteuid() == 0:
            rmdir_empty_attempt(settings.scratch_dir, key, a)
        out.append(res)
        if log:
            log("finished local copy of %s attempt %d: %s" % (key, a, res.get("status")))
    return out


#: job states in which an attempt may still be writing (or its epilog copying) its scratch
_ACTIVE_STATES = frozenset(("RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "PENDING",
                            "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESIZING", "SIGNALING",
                            "STAGE_OUT", "STOPPED", "RESV_DEL_HOLD"))


def _finish_selector(info):
    """Which local attempts ``collect`` may finish (copy, then delete locally).

    With a manifest (an epilog ran and could not finish): yes, except the
    current attempt of a job still active (its epilog may be running now).
    Without one: only attempts Slurm says are over (an earlier attempt, or
    a job in a final state); never when Slurm does not know the job."""
    def select(attempt, has_manifest):
        if info is None:
            return has_manifest
        active = info.get("state") in _ACTIVE_STATES
        if attempt < info["attempt"]:
            return True
        return not active
    return select


def fetch_from_storage(storage_url, job_id, attempt, dest_dir, user=None):
    """Download ``<storage>/<job>/attempt_<n>/hang_detector/`` into ``dest_dir/hang_detector``.

    Every object name is checked (no ``..``, no absolute parts) before it is
    joined to ``dest_dir``; symlinks (file systems) are skipped. Returns the local hang_detector path and the
    number of files. Raises FileNotFoundError if the attempt has no files.
    """
    src = attempt_url(storage_url, job_id, attempt, user) + "/" + HANG_DETECTOR
    fs, root = fs_and_root(src)
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        found = {}
    out = os.path.join(dest_dir, HANG_DETECTOR)
    n = 0
    for path in sorted(found):
        info = found[path]
        if info.get("islink") or info.get("type", "file") != "file":
            continue        # a shared file system: never follow a planted link
        rel = path[len(root):].lstrip("/")
        try:
            parts = layout.split_rel(rel)
        except ValueError:
            continue
        local = os.path.join(out, *parts)
        os.makedirs(os.path.dirname(local), exist_ok=True)
        fs.get_file(path, local)
        n += 1
    if not n:
        raise FileNotFoundError("no files under %s" % src)
    return out, n


class Collected:
    """Result of :func:`collect_job`: ``report`` (rollcall Report), ``hd_dir``
    (local hang_detector tree it was built from), ``source`` (``live`` or the
    storage URL), ``attempt`` (int), ``notes`` (list of str for the user)."""

    def __init__(self, report, hd_dir, source, attempt, notes):
        self.report, self.hd_dir, self.source = report, hd_dir, source
        self.attempt, self.notes = attempt, notes


def collect_job(job_id, *, attempt=None, settings=None, out_dir=None, live=None,
                timeout_s=120.0):
    """Gather a job's dumps and build its roll call.

    - Finishes any partial local copy on this node first (:func:`finish_local`).
    - If the job is running (``live`` None: ask Slurm; True: insist; False:
      storage only), runs ``hpc-hangkit slurm-capture`` on every node of the
      job in one ``srun --overlap`` step (on-demand dump of each rank of the
      current attempt, py-spy, Flight Recorder, nvidia-smi, copy of the rank
      files; it also lands in the node scratch, so the epilog stores it); the
      answers are merged under ``out_dir/hang_detector`` (``timeout_s``
      bounds the step).
    - Otherwise downloads ``<storage>/<job>/attempt_<n>/hang_detector`` (the
      newest attempt unless ``attempt`` is given).

    ``out_dir``: where the gathered tree goes (a temp dir if None; the caller
    removes it). Returns :class:`Collected`. Raises ValueError (bad id),
    FileNotFoundError (nothing stored or gathered), RuntimeError (Slurm or
    storage unusable, with the reason).
    """
    import tempfile

    asked = layout.validate_job_id(job_id)
    settings = settings or load_site_settings()
    notes = []
    user = _current_user()
    info = _job_info(asked) if live is None or live else None
    if live and (info is None or not info["running"]):
        raise RuntimeError("job %s is not running (or Slurm does not know it); "
                           "drop --live to read storage" % asked)
    key = info["jobid"] if info else None
    if key is None and asked.isdigit():
        key = asked
    if key is None and settings.storage_url:
        key = read_alias(settings.storage_url, asked, user)
    if key is None:
        raise FileNotFoundError("array task %s: Slurm no longer knows it and storage has no"
                                " %s%s alias; pass the numeric SLURM_JOB_ID" % (asked, asked,
                                                                                ALIAS_SUFFIX))
    if key != asked:
        notes.append("job %s is SLURM_JOB_ID %s" % (asked, key))
    for res in finish_local(key, settings=settings, attempt=attempt,
                            select=_finish_selector(info)):
        notes.append("local scratch attempt_%d: %s%s" % (
            res["attempt"], res.get("status"),
            (" (%s)" % res["reason"]) if res.get("reason") else ""))
    made = out_dir is None
    out_dir = out_dir or tempfile.mkdtemp(prefix="hangkit-collect-")
    try:
        hd_dir, source, used_attempt = _gather(asked, key, info, attempt, settings, user,
                                               out_dir, timeout_s, notes)
        from hpc_hangkit.rollcall import report_from_dir

        report = report_from_dir(hd_dir, settings)
    except BaseException as e:
        if made:
            shutil.rmtree(out_dir, ignore_errors=True)
        if notes and isinstance(e, (FileNotFoundError, RuntimeError)):
            raise type(e)("%s (%s)" % (e, "; ".join(notes))) from e
        raise
    return Collected(report, hd_dir, source, used_attempt, notes)


def _gather(asked, key, info, attempt, settings, user, out_dir, timeout_s, notes):
    """Live from the nodes or from storage -> (hd_dir, source, attempt)."""
    if info is not None and info["running"] and attempt in (None, info["attempt"]):
        hd_dir, n, more = _gather_live(key, info, settings, out_dir, timeout_s)
        notes.extend(more)
        return hd_dir, "live from %d node(s) (%d files)" % (len(info["nodes"]), n), \
            info["attempt"]
    if not settings.storage_url:
        raise RuntimeError("job %s is not running and no storage_url is configured"
                           " (site config.toml or HANGKIT_STORAGE_URL)" % asked)
    attempts = storage_attempts(settings.storage_url, key, user)
    if not attempts:
        raise FileNotFoundError("nothing stored for job %s under %s" % (
            asked, expand_storage_url(settings.storage_url, user)))
    used = attempt if attempt is not None else attempts[-1]
    if used not in attempts:
        raise FileNotFoundError("job %s has no attempt_%d in storage (have: %s)" % (
            asked, used, ", ".join(str(a) for a in attempts)))
    hd_dir, n = fetch_from_storage(settings.storage_url, key, used, out_dir, user)
    if len(attempts) > 1:
        notes.append("attempts in storage: %s (showing %d; --attempt N for another)" % (
            ", ".join(str(a) for a in attempts), used))
    return hd_dir, attempt_url(settings.storage_url, key, used, user), used


def _current_user():
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (KeyError, ImportError):
        return os.environ.get("USER")


# --------------------------------------------------------------------------
# live gather: `hpc-hangkit slurm-capture` on every node (hpc_hangkit.gather)


def _job_info(job_id):
    """{running, attempt, nodes, jobid} from Slurm (scontrol), or None when
    Slurm is absent or no longer knows the job (then storage is read)."""
    try:
        from hpc_hangkit import slurmjob as slurm

        info = slurm.job_info(job_id)
    except (ImportError, RuntimeError, OSError):
        return None
    state = (info.state or "").split()[0].upper() if info.state else ""
    return {"running": state in ("RUNNING", "SUSPENDED"), "state": state,
            "attempt": int(info.restarts or 0), "nodes": list(info.nodes),
            "jobid": str(info.job_id)}


def _gather_live(key, info, settings, out_dir, timeout_s):
    """Capture on every node of the running job (:func:`hpc_hangkit.gather.capture_job`,
    one ``srun --overlap`` step bounded by ``timeout_s``) into ``out_dir/hang_detector``
    -> (that path, files merged, notes). Raises the SlurmError of a failed step, or
    FileNotFoundError when no file came back."""
    from hpc_hangkit.gather import capture_job

    hd_root = os.path.join(out_dir, HANG_DETECTOR)
    os.makedirs(hd_root, exist_ok=True)
    scratch = job_scratch(settings.scratch_dir, key, info["attempt"])
    got = capture_job(key, info["nodes"], scratch, [sys.executable, "-m", "hpc_hangkit"],
                      hd_root, timeout_s=timeout_s)
    if got.error is not None:
        raise got.error
    if not got.files:
        raise FileNotFoundError("live gather of job %s returned no files (%s)" % (
            key, "; ".join(got.notes) or "no node answered"))
    return hd_root, got.files, got.notes
