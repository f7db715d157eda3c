"""The job as Slurm describes it: :class:`JobEnv`, the one reading of a job's ``SLURM_*``
environment, and the one place that runs Slurm commands (``scontrol``, ``squeue``,
``sstat``, ``srun --overlap``, ``scancel``). A foundation: it imports only ``layout``, so
storage, the collector and the monitor all take its values.

Rules: argv lists only (never a shell); every job id is validated first
(:func:`hpc_hangkit.layout.validate_job_id`); every call has a timeout; a missing command or a
non-zero exit raises :class:`SlurmError` naming the command and Slurm's own
message. Output is parsed in a version-tolerant way: ``scontrol show -o``
key=value lines (the same in 22.05 and 24.11; ``--json`` for scontrol only
exists from 23.02), ``squeue --json`` where it is wanted (22.05 gives
``job_state`` as a string, 24.11 and 26.05 as a list), ``sstat -P`` pipe-separated
(the same in all three; docs/admin.md has the table per release).

The prolog and epilog use :class:`JobEnv` only (they must never call Slurm).
"""
import json
import math
import os
import re
import shutil
import socket
import subprocess
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, Optional, Sequence

from hpc_hangkit.layout import HOST_RE as NODE_RE  # a node name as Slurm prints it (no list syntax)
from hpc_hangkit import layout

DEFAULT_TIMEOUT_S = 30.0


class SlurmError(RuntimeError):
    """A Slurm command is missing, timed out, or failed; the message says which and why."""


def job_id_from_env(env: Mapping[str, str]) -> str:
    """The unique numeric ``SLURM_JOB_ID`` (else ``SLURM_JOBID``) of a prolog, epilog or job
    environment. Raises ValueError if it is missing or not the numeric id
    (:func:`hpc_hangkit.layout.unique_job_id`)."""
    return layout.unique_job_id(env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID") or "")


def attempt_from_env(env: Optional[Mapping[str, str]] = None) -> int:
    """This job attempt's 0-based number: SLURM_JOB_RESTART_COUNT (prolog/epilog)
    or SLURM_RESTART_COUNT (job; unset on the first run), else 0."""
    env = os.environ if env is None else env
    for k in ("SLURM_JOB_RESTART_COUNT", "SLURM_RESTART_COUNT"):
        v = env.get(k, "").strip()
        if v.isdigit():
            return int(v)
    return 0


@dataclass(frozen=True)
class JobEnv:
    """One job (step) as its environment names it, read once (:meth:`from_env`) and handed to
    every consumer. Set by slurmd for a prolog/epilog and by Slurm inside the job:

    ``job_id``: the unique numeric ``SLURM_JOB_ID`` (str); ``attempt``: 0-based restart count
    (:func:`attempt_from_env`); ``array_job``/``array_task``: ``SLURM_ARRAY_JOB_ID`` /
    ``SLURM_ARRAY_TASK_ID`` when both are numbers (slurmd's epilog of 22.05-24.11 does not
    set them); ``step``: ``SLURM_STEP_ID`` (a number, or None outside a step); ``uid``/``gid``:
    ``SLURM_JOB_UID``/``SLURM_JOB_GID`` (None when unset); ``user``: ``SLURM_JOB_USER``, else
    ``USER`` (unchecked: the epilog takes the name from the passwd entry of ``uid``); ``node``:
    this node's short name (``SLURMD_NODENAME``, else the host name); ``scratch``: the job
    attempt's own scratch directory (``HANGKIT_SCRATCH_DIR``, set by the prolog), or None."""
    job_id: str
    attempt: int = 0
    array_job: Optional[str] = None
    array_task: Optional[str] = None
    step: Optional[int] = None
    uid: Optional[int] = None
    gid: Optional[int] = None
    user: Optional[str] = None
    node: str = ""
    scratch: Optional[str] = None

    @classmethod
    def from_env(cls, env: Optional[Mapping[str, str]] = None) -> "JobEnv":
        """Read ``env`` (default os.environ). Raises ValueError when ``SLURM_JOB_ID`` is missing
        or not the numeric id, or ``SLURM_JOB_UID``/``SLURM_JOB_GID`` is set but not a number."""
        env = os.environ if env is None else env
        arr, task = env.get("SLURM_ARRAY_JOB_ID", ""), env.get("SLURM_ARRAY_TASK_ID", "")
        both = arr.isdigit() and task.isdigit()
        step = env.get("SLURM_STEP_ID", "")
        return cls(job_id=job_id_from_env(env), attempt=attempt_from_env(env),
                   array_job=arr if both else None, array_task=task if both else None,
                   step=int(step) if step.isdigit() else None,
                   uid=_int_or_none(env, "SLURM_JOB_UID"), gid=_int_or_none(env, "SLURM_JOB_GID"),
                   user=env.get("SLURM_JOB_USER") or env.get("USER") or None,
                   node=node_name(env),
                   scratch=env.get(layout.ENV_SCRATCH_DIR) or None)

    @property
    def alias(self) -> Optional[str]:
        """``<array job>_<task>`` for an array task, else None."""
        return "%s_%s" % (self.array_job, self.array_task) if self.array_job else None


def node_name(env: Mapping[str, str]) -> str:
    """This node's short name: ``SLURMD_NODENAME`` of ``env`` (slurmd's), else the host name."""
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def _int_or_none(env: Mapping[str, str], key: str) -> Optional[int]:
    v = env.get(key)
    if v is None or v == "":
        return None
    try:
        return int(v)
    except ValueError:
        raise ValueError("%s=%r is not a number" % (key, v)) from None


def _run(argv: Sequence[str], timeout: float = DEFAULT_TIMEOUT_S, check: bool = True,
         env: Optional[Mapping[str, str]] = None) -> subprocess.CompletedProcess:
    exe = shutil.which(argv[0], path=(env or os.environ).get("PATH"))
    if exe is None:
        raise SlurmError("%s not found on PATH: is this a Slurm node with the Slurm "
                         "client commands installed?" % argv[0])
    try:
        p = subprocess.run([exe] + list(argv[1:]), stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, env=None if env is None else dict(env))
    except subprocess.TimeoutExpired:
        raise SlurmError("%s timed out after %.0f s" % (" ".join(argv[:3]), timeout))
    if check and p.returncode != 0:
        msg = (p.stderr or p.stdout).decode("utf-8", "replace").strip()
        raise SlurmError("%s failed (exit %d): %s" % (" ".join(argv[:3]), p.returncode,
                                                       msg or "no message"))
    return p


def version() -> tuple:
    """Slurm version as a tuple of ints, e.g. ``(22, 5, 8)``, from ``scontrol --version``."""
    out = _run(["scontrol", "--version"], timeout=10).stdout.decode()
    m = re.search(r"(\d+)\.(\d+)\.(\d+)", out)
    if not m:
        raise SlurmError("cannot read a version from scontrol --version: %r" % out.strip())
    return tuple(int(x) for x in m.groups())


_KV_RE = re.compile(r"(?:^|\s)([A-Za-z][A-Za-z0-9_:/.]*)=")


def parse_kv_line(line: str) -> Dict[str, str]:
    """Parse one ``scontrol show -o`` line (``Key=Value Key2=Value with spaces``).

    A value runs up to the next `` Key=``; so values with spaces (WorkDir,
    Command, Comment) survive. Pure.
    """
    out = {}
    ms = list(_KV_RE.finditer(line))
    for i, m in enumerate(ms):
        end = ms[i + 1].start() if i + 1 < len(ms) else len(line)
        out[m.group(1)] = line[m.end():end].strip()
    return out


@dataclass
class JobInfo:
    """What hpc-hangkit needs to know about a job (from ``scontrol show job -o``).

    ``job_id``: the unique numeric id (for an array task, not ``123_4``);
    ``state``: e.g. RUNNING, PENDING, COMPLETED; ``requeue``: the Requeue flag;
    ``batch``: a batch job; ``restarts``: Slurm's restart count (all causes);
    ``nodes``: the allocated node names, expanded; ``raw``: every field.
    """
    job_id: str
    state: str
    requeue: bool
    batch: bool
    restarts: int
    nodes: List[str]
    user_id: Optional[int]
    array_job_id: Optional[str]
    array_task_id: Optional[str]
    raw: Dict[str, str] = field(default_factory=dict)


def job_info(job_id) -> JobInfo:
    """Look a job up with ``scontrol show job -o <id>`` (works for ``123_4``).

    Raises ValueError for a malformed id, SlurmError if Slurm does not know the
    job (e.g. purged after MinJobAge) or the command fails.
    """
    jid = layout.validate_job_id(job_id)
    out = _run(["scontrol", "show", "job", "-o", jid]).stdout.decode("utf-8", "replace")
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if not lines:
        raise SlurmError("scontrol show job %s printed nothing" % jid)
    kv = parse_kv_line(lines[0])
    uid = re.search(r"\((\d+)\)", kv.get("UserId", ""))
    nodelist = kv.get("NodeList", "")
    nodes = expand_hostlist(nodelist) if nodelist and nodelist != "(null)" else []
    return JobInfo(
        job_id=kv.get("JobId", jid), state=kv.get("JobState", ""),
        requeue=kv.get("Requeue", "0") == "1", batch=kv.get("BatchFlag", "0") == "1",
        restarts=int(kv.get("Restarts", "0") or 0), nodes=nodes,
        user_id=int(uid.group(1)) if uid else None,
        array_job_id=kv.get("ArrayJobId"), array_task_id=kv.get("ArrayTaskId"), raw=kv)


def resolve_job_id(job_id) -> str:
    """The unique numeric job id (SLURM_JOB_ID) for ``123`` or ``123_4``.

    ``123`` is returned as is without asking Slurm; an array task id is looked
    up (its scratch and storage use the unique id).
    """
    jid = layout.validate_job_id(job_id)
    if "_" not in jid:
        return jid
    return job_info(jid).job_id


def expand_hostlist(hostlist: str) -> List[str]:
    """``hk[1-2],gpu07`` -> ``['hk1', 'hk2', 'gpu07']`` via ``scontrol show hostnames``."""
    if not hostlist:
        return []
    out = _run(["scontrol", "show", "hostnames", hostlist], timeout=10).stdout.decode()
    return [h for h in out.split() if h]


def job_state(job_id) -> Optional[str]:
    """The job's state from ``squeue --json`` (e.g. ``RUNNING``), None once squeue
    no longer lists it. Handles 22.05 (string) and 24.11 (list) shapes."""
    jid = layout.validate_job_id(job_id)
    p = _run(["squeue", "--json", "-j", jid], check=False)
    if p.returncode != 0:
        return None
    return parse_squeue_state(p.stdout.decode("utf-8", "replace"), jid)


def parse_squeue_state(text: str, job_id: str) -> Optional[str]:
    """The state of ``job_id`` (``123`` or ``123_4``) in ``squeue --json`` output, or None
    if it is not listed. Raises SlurmError if the text is not JSON. Pure."""
    jid = layout.validate_job_id(job_id)
    try:
        jobs = json.loads(text).get("jobs", [])
    except (ValueError, AttributeError):
        raise SlurmError("squeue --json gave output that is not JSON")
    for j in jobs:
        # 22.05's squeue --json ignores -j and lists every job; 24.11 gives numbers as
        # {"set", "infinite", "number"} objects
        ids = {str(_json_number(j.get("job_id"))),
               "%s_%s" % (_json_number(j.get("array_job_id")), _json_number(j.get("array_task_id")))}
        if jid not in ids:
            continue
        st = j.get("job_state")
        if isinstance(st, list):
            st = st[0] if st else None
        return st
    return None


def _json_number(v):
    """A number from Slurm JSON: a plain int (22.05) or ``{"set", "infinite", "number"}``
    (23.02+); None when unset."""
    if isinstance(v, dict):
        return v.get("number") if v.get("set", True) and not v.get("infinite") else None
    return v


@dataclass(frozen=True)
class StepStat:
    """One step's progress counters from ``sstat`` (cumulative since the step started).

    ``step``: e.g. ``57.0``, ``57.batch``; ``ntasks``; ``cpu_s``: total CPU
    seconds over the step's tasks (AveCPU x NTasks); ``read_bytes`` /
    ``write_bytes``: total disk I/O (AveDiskRead/Write x NTasks). Values are
    sampled by jobacct_gather every JobAcctGatherFrequency seconds.
    """
    step: str
    ntasks: int
    cpu_s: float
    read_bytes: float
    write_bytes: float


_UNITS = {"": 1, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4, "P": 1024 ** 5}


def parse_size(s: str) -> float:
    """sstat sizes (``123``, ``12.5K``, ``3M``) -> bytes; '' -> 0. Pure."""
    s = s.strip()
    if not s:
        return 0.0
    m = re.match(r"^([0-9.]+)([KMGTP]?)$", s)
    if not m:
        raise ValueError("not an sstat size: %r" % s)
    return float(m.group(1)) * _UNITS[m.group(2)]


def parse_duration(s: str) -> float:
    """Slurm durations ``[D-][HH:]MM:SS[.mmm]`` -> seconds; '' -> 0. Pure."""
    s = s.strip()
    if not s:
        return 0.0
    days = 0
    if "-" in s:
        d, s = s.split("-", 1)
        days = int(d)
    parts = [float(x) for x in s.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    h, m, sec = parts[-3:]
    return days * 86400 + h * 3600 + m * 60 + sec


SSTAT_FORMAT = "JobID,NTasks,AveCPU,AveDiskRead,AveDiskWrite"


def parse_sstat(text: str) -> List[StepStat]:
    """Parse ``sstat -n -P --format=JobID,NTasks,AveCPU,AveDiskRead,AveDiskWrite``.

    Lines that do not parse are skipped (sstat prints garbage CPU times when
    JobAcctGatherType is none). Pure.
    """
    out = []
    for line in text.splitlines():
        f = line.strip().split("|")
        if len(f) < 5 or not f[0]:
            continue
        try:
            nt = int(f[1] or 0)
            cpu = parse_duration(f[2])
            rd, wr = parse_size(f[3]), parse_size(f[4])
            n = max(nt, 1)
            vals = (cpu * n, rd * n, wr * n)
        except (ValueError, OverflowError):  # OverflowError: a 300-digit field is no counter either
            continue
        if cpu > 10 * 365 * 86400 or not all(math.isfinite(v) for v in vals):  # jobacct_gather/none garbage
            continue
        out.append(StepStat(step=f[0], ntasks=nt, cpu_s=vals[0], read_bytes=vals[1], write_bytes=vals[2]))
    return out


def step_stats(job_id, timeout: float = DEFAULT_TIMEOUT_S) -> List[StepStat]:
    """Every running step's counters (``sstat --allsteps``). Needs
    ``JobAcctGatherType=jobacct_gather/linux``; an empty list when no step runs. sstat asks
    the slurmd of every node of each step: ``timeout`` (seconds) bounds a node that does not
    answer (SlurmError)."""
    jid = layout.validate_job_id(job_id)
    p = _run(["sstat", "-a", "-n", "-P", "-j", jid, "--format=" + SSTAT_FORMAT], timeout=timeout, check=False)
    if p.returncode != 0:
        msg = p.stderr.decode("utf-8", "replace").strip()
        if "no steps running" in msg.lower() or not msg:
            return []
        raise SlurmError("sstat -j %s failed: %s" % (jid, msg))
    return parse_sstat(p.stdout.decode("utf-8", "replace"))


def requeue(job_id) -> None:
    """``scontrol requeue <id>``: kills the running attempt and queues the job again.

    Raises SlurmError with Slurm's reason (e.g. "Requested operation is
    presently disabled" for a --no-requeue job)."""
    _run(["scontrol", "requeue", layout.validate_job_id(job_id)])


#: Slurm's limit on a job's Comment, in bytes: slurmctld refuses a longer one
#: ("Pathname of a file, directory or other parameter too long"; tried on 22.05)
COMMENT_MAX = 1024
#: what of our text survives however long the user's own Comment is
COMMENT_MARK = "hpc-hangkit: hang confirmed"
COMMENT_SEP = " | "


def job_comment(job_id) -> str:
    """The job's Comment exactly as its owner set it ('' when none), from
    ``squeue -h -t all -j <id> -o %k`` (which prints it whole and unparsed, unlike the
    key=value line of ``scontrol show job``, where a Comment holding ``x=y`` is cut
    there; ``(null)`` means none; ``-t all``: an ended job too, until MinJobAge).
    Raises ValueError for a bad id, SlurmError when squeue fails or no longer lists the job."""
    jid = layout.validate_job_id(job_id)
    out = _run(["squeue", "-h", "-t", "all", "-j", jid, "-o", "%k"]).stdout.decode("utf-8", "replace")
    if not out:
        raise SlurmError("squeue -j %s lists no such job" % jid)
    text = out[:-1] if out.endswith("\n") else out
    return "" if text == "(null)" else text


def _cut(text: str, nbytes: int) -> str:
    """``text`` cut to at most ``nbytes`` UTF-8 bytes, never inside a character."""
    return text.encode("utf-8")[:max(0, nbytes)].decode("utf-8", "ignore")


def merged_comment(ours: str, theirs: str, limit: int = COMMENT_MAX) -> str:
    """The Comment that puts ``ours`` before the user's own ``theirs``: ``ours | theirs``
    within ``limit`` bytes. Pure.

    ``ours`` has its whitespace (newlines included) collapsed; ``theirs`` is kept
    byte for byte. When both do not fit, ``ours`` is shortened first (ending in
    ``...``), down to :data:`COMMENT_MARK`; only a user Comment that leaves no room
    even for that mark loses its tail.
    """
    ours = " ".join(str(ours).split())
    if not theirs:
        return _cut(ours, limit)
    nb = lambda s: len(s.encode("utf-8"))
    room = limit - nb(theirs) - nb(COMMENT_SEP)
    if nb(ours) > room:
        ours = _cut(ours, room - 3) + "..." if room - 3 >= nb(COMMENT_MARK) else COMMENT_MARK
    return _cut(ours + COMMENT_SEP + theirs, limit)


def prepend_comment(job_id, text: str) -> str:
    """Put ``text`` before the job's own Comment (:func:`merged_comment`) with
    ``scontrol update JobId=<id> Comment=...`` (the job's owner may do this); returns
    the Comment set. Raises SlurmError, leaving the Comment untouched, when the
    current one cannot be read (it is never overwritten blind) or the update fails."""
    jid = layout.validate_job_id(job_id)
    merged = merged_comment(text, job_comment(jid))
    _run(["scontrol", "update", "JobId=" + jid, "Comment=" + merged])
    return merged


def cancel(job_id) -> None:
    """``scancel <id>``: end the job (its epilog still runs)."""
    _run(["scancel", layout.validate_job_id(job_id)])


STEP_ID_RE = re.compile(r"^([0-9]{1,10})\.([0-9]{1,10})\Z")


def validate_step_id(step) -> tuple:
    """``"<job>.<step>"`` (both numeric: a user step, not ``batch``/``extern``) ->
    ``(job_id, step_id)`` strings. Raises ValueError naming the value otherwise."""
    m = STEP_ID_RE.match(str(step).strip())
    if not m:
        raise ValueError("invalid Slurm step id %r: expected <job>.<step>, such as 1234.0" % (step,))
    return m.group(1), m.group(2)


@dataclass(frozen=True)
class StepInfo:
    """One running step (from ``scontrol show step -o J.S``): ``step`` (``J.S``),
    ``state`` (e.g. RUNNING), ``nodes`` (expanded node names), ``ntasks``."""
    step: str
    state: str
    nodes: List[str]
    ntasks: Optional[int]


def parse_step_line(text: str) -> Optional[Dict[str, str]]:
    """The key=value fields of the first ``scontrol show step -o`` line of ``text``, or None
    when there is none (22.05, 24.11 and 26.05 print ``StepId= ... NodeList= Tasks=``). Pure."""
    for ln in text.splitlines():
        if ln.strip().startswith("StepId="):
            return parse_kv_line(ln.strip())
    return None


def step_info(step) -> Optional[StepInfo]:
    """Look a running step up: ``scontrol show step -o <job>.<step>``. None when Slurm lists
    no such step (not yet created, or over). Raises ValueError for a bad id, SlurmError
    when scontrol is missing or times out."""
    jid, sid = validate_step_id(step)
    p = _run(["scontrol", "show", "step", "-o", "%s.%s" % (jid, sid)], check=False)
    kv = parse_step_line(p.stdout.decode("utf-8", "replace")) if p.returncode == 0 else None
    if kv is None:
        return None
    nodelist = kv.get("NodeList", "")
    tasks = kv.get("Tasks", "")
    return StepInfo(step=kv.get("StepId", "%s.%s" % (jid, sid)), state=kv.get("State", ""),
                    nodes=expand_hostlist(nodelist) if nodelist and nodelist != "(null)" else [],
                    ntasks=int(tasks) if tasks.isdigit() else None)


def cancel_step(step) -> None:
    """``scancel <job>.<step>``: end one step; the job and its other steps go on (for a job
    that ``srun`` itself allocated, srun then exits and the job ends with it). Raises
    ValueError for a bad id, SlurmError with Slurm's message when scancel fails."""
    jid, sid = validate_step_id(step)
    _run(["scancel", "%s.%s" % (jid, sid)])


#: input variables of srun (22.05 and 24.11, src/srun/opt.c) that a batch-step
#: environment may hold and that would reshape a one-task-per-node helper step
#: (task counts, per-task CPUs/GPUs/TRES, binding, --exact/--exclusive); 24.11's
#: sbatch also exports SLURM_TRES_PER_TASK, which its srun reads
STEP_SHAPE_ENV = frozenset((
    "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NNODES", "SLURM_JOB_NUM_NODES", "SLURM_NTASKS_PER_NODE",
    "SLURM_NTASKS_PER_CORE", "SLURM_NTASKS_PER_SOCKET", "SLURM_NTASKS_PER_GPU", "SLURM_NTASKS_PER_TRES",
    "SLURM_CPUS_PER_TASK", "SLURM_CPUS_PER_GPU", "SLURM_TRES_PER_TASK", "SLURM_GPUS_PER_TASK",
    "SLURM_MEM_PER_CPU", "SLURM_MEM_PER_NODE", "SLURM_MEM_PER_GPU", "SLURM_DISTRIBUTION",
    "SLURM_CPU_BIND", "SLURM_MEM_BIND", "SLURM_GPU_BIND", "SLURM_TRES_BIND", "SLURM_EXACT",
    "SLURM_EXCLUSIVE", "SLURM_OVERCOMMIT", "SLURM_SPREAD_JOB", "SLURM_USE_MIN_NODES"))


def overlap_prefix(job_id, nodes: Sequence[str]) -> List[str]:
    """The argv that runs a command once on each of ``nodes`` inside the job's
    allocation, next to its running steps: ``srun --overlap --jobid J -w n1,n2 -N k
    -n k --ntasks-per-node=1 -l --hang-detect=off --kill-on-bad-exit=0 --`` (hang
    detection off so the helper is never armed). Raises ValueError for a bad id or
    node name, or no node."""
    jid = layout.validate_job_id(job_id)
    for n in nodes:
        if not NODE_RE.match(n):
            raise ValueError("invalid node name %r" % (n,))
    if not nodes:
        raise ValueError("srun_overlap needs at least one node")
    return ["srun", "--overlap", "--jobid", jid, "-w", ",".join(nodes), "-N", str(len(nodes)),
            "-n", str(len(nodes)), "--ntasks-per-node=1", "-l", "--hang-detect=off",
            "--kill-on-bad-exit=0", "--"]


def srun_overlap(job_id, nodes: Sequence[str], argv: Sequence[str],
                 timeout: float = 60.0, env: Optional[Mapping[str, str]] = None
                 ) -> subprocess.CompletedProcess:
    """Run ``argv`` once on each of ``nodes`` inside the job's allocation, next to
    its running steps: ``srun --overlap --jobid J -w n1,n2 -N k --ntasks-per-node=1
    --hang-detect=off -- argv`` (hang detection off so the probe is never armed).

    Returns the finished process (stdout/stderr bytes, output of all nodes,
    prefixed ``<task>: `` by ``-l``). Raises SlurmError on timeout or a missing srun.
    """
    cmd = overlap_prefix(job_id, nodes) + list(argv)
    e = dict(os.environ if env is None else env)
    # our batch-step environment must not shape the probe step
    for k in list(e):
        if k in STEP_SHAPE_ENV:
            del e[k]
    return _run(cmd, timeout=timeout, check=False, env=e)


@dataclass
class StreamedStep:
    """What :func:`srun_overlap_stream` saw: ``returncode`` (None when it was stopped at the
    deadline), ``timed_out`` (the deadline came first), ``seconds`` (wall, from the start to
    the end of srun or of its stop), ``stderr`` (its last 4 KiB, text)."""

    returncode: Optional[int]
    timed_out: bool
    seconds: float
    stderr: str = ""


#: seconds srun gets to end the step after SIGTERM (at the deadline), before SIGKILL
STREAM_STOP_GRACE_S = 2.0


def srun_overlap_stream(job_id, nodes: Sequence[str], argv: Sequence[str], on_line,
                        deadline_s: float, env: Optional[Mapping[str, str]] = None,
                        done=None) -> StreamedStep:
    """:func:`srun_overlap`, its stdout read as it comes: ``on_line(text)`` is called with each
    complete output line (``-l`` labels included) as soon as srun prints it, in this thread.
    ``done()`` (optional), checked after each line: True stops waiting early (every node
    answered). At ``deadline_s`` seconds from the start (or when ``done()``), srun gets
    SIGTERM (srun forwards it to the step's tasks and ends the step), then SIGKILL after
    :data:`STREAM_STOP_GRACE_S` s, so the call returns by ``deadline_s`` + that grace +
    a fraction of a second, whatever a node does (a node whose slurmd is gone never
    answers, and srun would wait for it). Raises SlurmError for a missing srun, ValueError
    as :func:`overlap_prefix`."""
    import selectors
    import signal
    import threading
    import time

    cmd = overlap_prefix(job_id, nodes) + list(argv)
    e = dict(os.environ if env is None else env)
    for k in list(e):
        if k in STEP_SHAPE_ENV:
            del e[k]
    exe = shutil.which(cmd[0], path=e.get("PATH"))
    if exe is None:
        raise SlurmError("srun not found on PATH: is this a Slurm node with the Slurm client "
                         "commands installed?")
    t0 = time.monotonic()
    p = subprocess.Popen([exe] + cmd[1:], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=e)
    err = bytearray()

    def _drain_err():
        # stderr in its own thread: a full stderr pipe must never stall srun's stdout
        for chunk in iter(lambda: p.stderr.read1(4096), b""):
            err.extend(chunk)
            del err[:-4096]
    et = threading.Thread(target=_drain_err, daemon=True, name="srun-stderr")
    et.start()
    sel = selectors.DefaultSelector()
    sel.register(p.stdout, selectors.EVENT_READ)
    fd = p.stdout.fileno()
    buf = b""
    timed_out = False
    stopped = False
    try:
        while True:
            left = deadline_s - (time.monotonic() - t0)
            if left <= 0:
                timed_out = True
                break
            if not sel.select(timeout=left):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break  # srun closed its output: the step ended
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for ln in lines:
                on_line(ln.decode("utf-8", "replace"))
            if done is not None and done():
                stopped = True
                break
    finally:
        sel.close()
        if p.poll() is None and not timed_out:
            # the step's output ended (or every node answered): srun ends by itself
            try:
                p.wait(timeout=max(0.0, min(STREAM_STOP_GRACE_S, deadline_s - (time.monotonic() - t0))))
            except subprocess.TimeoutExpired:
                pass
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=STREAM_STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        p.stdout.close()
        et.join(1.0)
    if buf and not (timed_out or stopped):
        on_line(buf.decode("utf-8", "replace"))
    return StreamedStep(None if timed_out else p.returncode, timed_out, time.monotonic() - t0,
                        bytes(err).decode("utf-8", "replace"))
