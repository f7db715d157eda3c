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
                                 read_alias, storage_attempts, stored_numbers)

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


def fetch_from_storage(storage_url, job_id, attempt, dest_dir, user=None, step=None):
    """Download ``<storage>/<job>/attempt_<n>/hang_detector/`` into ``dest_dir/hang_detector``
    (with ``step``, an interactive step's ``.../attempt_<n>/step_<s>/hang_detector/`` into
    ``dest_dir/step_<s>/hang_detector``).

    Every object name is checked (no ``..``, no absolute parts) before it is
    joined to ``dest_dir``; symlinks (file systems) are skipped. Returns the local hang_detector path and the
    number of files. Raises FileNotFoundError if the attempt (step) has no files.
    """
    sub = HANG_DETECTOR if step is None else layout.step_dir_name(step) + "/" + HANG_DETECTOR
    src = attempt_url(storage_url, job_id, attempt, user) + "/" + sub
    fs, root = fs_and_root(src)
    try:
        found = fs.find(root, detail=True)
    except FileNotFoundError:
        found = {}
    out = os.path.join(dest_dir, *sub.split("/"))
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


def stored_steps(storage_url, job_id, attempt, user=None):
    """Interactive steps with a directory in storage under ``<job>/attempt_<n>/``
    (``step_<s>``; sorted step ids); [] if none. Storage errors propagate."""
    return stored_numbers(attempt_url(storage_url, job_id, attempt, user), layout.step_of)


class Part:
    """One roll call of a collected attempt: ``step`` (None: the attempt's own tree, the
    batch script's ranks; else an interactive step's id), ``report`` (rollcall Report),
    ``hd_dir`` (the local hang_detector tree it was built from)."""

    def __init__(self, step, report, hd_dir):
        self.step, self.report, self.hd_dir = step, report, hd_dir


class Collected:
    """Result of :func:`collect_job`: ``parts`` (list of :class:`Part`: the attempt's own
    tree first when it has files, then each interactive step's, by step id; never empty),
    ``source`` (``live`` or the storage URL), ``attempt`` (int), ``notes`` (list of str for
    the user). ``report`` and ``hd_dir`` are the first part's."""

    def __init__(self, parts, source, attempt, notes):
        self.parts, self.source = parts, source
        self.attempt, self.notes = attempt, notes

    @property
    def report(self):
        return self.parts[0].report

    @property
    def hd_dir(self):
        return self.parts[0].hd_dir


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
      newest attempt unless ``attempt`` is given) and each interactive step's
      ``.../attempt_<n>/step_<s>/hang_detector``: one roll call per tree, so
      steps that ran at the same time in one allocation are never mixed.

    ``out_dir``: where the gathered trees go (``hang_detector/``, ``step_<s>/hang_detector/``;
    a temp dir if None; the caller removes it). Returns :class:`Collected`. Raises ValueError (bad id),
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
        trees, source, used_attempt = _gather(asked, key, info, attempt, settings, user,
                                              out_dir, timeout_s, notes)
        parts = _roll_calls(trees, settings)
    except BaseException as e:
        if made:
            shutil.rmtree(out_dir, ignore_errors=True)
        if notes and isinstance(e, (FileNotFoundError, RuntimeError)):
            raise type(e)("%s (%s)" % (e, "; ".join(notes))) from e
        raise
    return Collected(parts, source, used_attempt, notes)


def _roll_calls(trees, settings):
    """One :class:`Part` per gathered ``(step, hd_dir)``, each roll call over its own tree
    alone (:func:`hpc_hangkit.rollcall.report_from_dir` with the site's settings). The
    attempt's own tree is left out when interactive steps were gathered and it holds no
    rank's file (an allocation whose ranks all ran in steps: its tree has only node-wide
    files such as the job environment)."""
    from hpc_hangkit.rollcall import report_from_dir

    if len(trees) > 1 and trees[0][0] is None and not _has_rank_files(trees[0][1]):
        trees = trees[1:]
    return [Part(step, report_from_dir(hd_dir, settings), hd_dir) for step, hd_dir in trees]


def _gather(asked, key, info, attempt, settings, user, out_dir, timeout_s, notes):
    """Live from the nodes or from storage -> ([(step or None, hd_dir)], source, attempt)."""
    if info is not None and info["running"] and attempt in (None, info["attempt"]):
        trees, n, more = _gather_live_all(key, info, settings, out_dir, timeout_s)
        notes.extend(more)
        return trees, "live from %d node(s) (%d files)" % (len(info["nodes"]), n), \
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
    trees = []
    try:
        trees.append((None, fetch_from_storage(settings.storage_url, key, used, out_dir, user)[0]))
    except FileNotFoundError:
        pass                        # an allocation whose ranks were all in interactive steps
    for step in stored_steps(settings.storage_url, key, used, user):
        try:
            trees.append((step, fetch_from_storage(settings.storage_url, key, used, out_dir, user,
                                                   step=step)[0]))
        except FileNotFoundError:
            notes.append("%s in storage holds no files" % layout.step_dir_name(step))
    if not trees:
        raise FileNotFoundError("no files under %s" % attempt_url(settings.storage_url, key, used, user))
    if len(attempts) > 1:
        notes.append("attempts in storage: %s (showing %d; --attempt N for another)" % (
            ", ".join(str(a) for a in attempts), used))
    return trees, attempt_url(settings.storage_url, key, used, user), used


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


def _has_rank_files(hd_dir) -> bool:
    """Whether a gathered tree holds any rank's file (a dump, heartbeat, marker or stack),
    not only node-wide evidence such as nvidia-smi."""
    if os.path.exists(os.path.join(hd_dir, layout.REPORT_JSON)):
        return True
    return any(layout.list_rank_files(os.path.join(hd_dir, sub))
               for sub in (layout.WATCHDOG_DIR, layout.HEARTBEAT_DIR, layout.UNWATCHED_DIR,
                           layout.EXITS_DIR, layout.VANISHED_DIR)) or \
        bool(os.path.isdir(os.path.join(hd_dir, layout.STACK_TRACES_DIR))
             and os.listdir(os.path.join(hd_dir, layout.STACK_TRACES_DIR)))


def _live_steps(key):
    """``(step id, nodes)`` of the job's running numeric steps (``sstat``, then
    ``scontrol show step``); [] when Slurm cannot say."""
    from hpc_hangkit import slurmjob as slurm

    out = []
    try:
        stats = slurm.step_stats(key)
    except (slurm.SlurmError, OSError):
        return []
    for st in stats:
        jid, _, sid = st.step.partition(".")
        if jid != key or not sid.isdigit():
            continue
        try:
            si = slurm.step_info("%s.%s" % (key, sid))
        except (slurm.SlurmError, OSError, ValueError):
            si = None
        if si is not None and si.nodes:
            out.append((int(sid), list(si.nodes)))
    return sorted(out)


def _gather_live_all(key, info, settings, out_dir, timeout_s):
    """The attempt's own tree (:func:`_gather_live`) and each running interactive step's
    (its ``step_<s>`` node scratch, on the step's nodes, into ``out_dir/step_<s>/hang_detector``)
    -> ([(step or None, hd_dir)], files merged, notes). A step's tree without any rank file
    (a batch script's srun: its ranks are in the attempt's tree) is left out. Raises like :func:`_gather_live`
    when nothing came back at all."""
    from hpc_hangkit.gather import capture_job

    trees, total, notes, first_error = [], 0, [], None
    try:
        hd_dir, n, more = _gather_live(key, info, settings, out_dir, timeout_s)
        trees.append((None, hd_dir))
        total += n
        notes.extend(more)
    except (FileNotFoundError, RuntimeError) as e:
        first_error = e
    attempt_dir = job_scratch(settings.scratch_dir, key, info["attempt"])
    for sid, nodes in _live_steps(key):
        hd_root = os.path.join(out_dir, layout.step_dir_name(sid), HANG_DETECTOR)
        os.makedirs(hd_root, exist_ok=True)
        got = capture_job(key, nodes, layout.step_scratch_dir(attempt_dir, sid),
                          [sys.executable, "-m", "hpc_hangkit"], hd_root, timeout_s=timeout_s)
        if got.files and _has_rank_files(hd_root):
            trees.append((sid, hd_root))
            total += got.files
            notes.extend("step %d: %s" % (sid, n) for n in got.notes)
        else:
            shutil.rmtree(os.path.dirname(hd_root), ignore_errors=True)
    if not trees:
        raise first_error or FileNotFoundError("live gather of job %s returned no files" % key)
    return trees, total, notes


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
