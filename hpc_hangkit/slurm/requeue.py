"""The requeue policy of the batch-step monitor: where a hang is (:func:`signature`), the
job's own count of hang requeues (:class:`RequeueState`, kept per job in storage) and the
rule (:func:`decide`, pure).

A confirmed hang in ``fail`` mode is requeued (``scontrol requeue``) if allowed: a batch job
with Requeue=1, this hang is not a *repeat* (the same suspect ranks at the same place as the
previous attempt), and fewer than ``max_hang_requeues`` hang requeues were made. The count
lives in ``<storage_url>/<job_id>/hangkit_requeue.json`` (or
``~/.hpc-hangkit/jobs/<job_id>/`` without storage), not in SLURM_RESTART_COUNT, which also
counts preemption and node failure.
"""
import json
import logging
import os
from dataclasses import dataclass, field
from typing import List, Mapping

from hpc_hangkit import layout, storage
from hpc_hangkit.ranges import format_ranks, parse_ranks

log = logging.getLogger("hpc_hangkit.slurm.requeue")

__all__ = ["Hang", "RequeueState", "Decision", "signature", "decide", "state_url"]

#: a larger requeue state is not ours (it holds one entry per hang of the job)
MAX_STATE_BYTES = 1 << 20


def signature(report) -> dict:
    """Where a hang is: ``{"verdict", "suspect_ranks", "where"}`` from a roll-call Report.

    ``where``: sorted ``file:line function (in collective)`` of the user frame
    (roll-call group ``frame``) of every group that holds a suspect rank: the
    place the suspects stand. File names are base names, so a job that moved
    its checkout still repeats.
    """
    d = report.to_dict() if hasattr(report, "to_dict") else dict(report or {})
    sus = sorted(int(r) for r in (d.get("suspect_ranks") or []))
    where = []
    for g in d.get("groups") or []:
        ranks = g.get("ranks") or []
        if isinstance(ranks, str):
            ranks = parse_ranks(ranks)
        if not set(int(r) for r in ranks) & set(sus):
            continue
        fr = g.get("frame") or g.get("position") or {}
        if isinstance(fr, dict):
            pos = "%s:%s %s" % (os.path.basename(str(fr.get("file", "?"))), fr.get("line", "?"),
                                fr.get("function", ""))
        else:
            pos = str(fr)
        if g.get("collective"):
            pos += " (in %s)" % g["collective"]
        where.append(str(pos))
    return {"verdict": d.get("verdict"), "suspect_ranks": sus, "where": sorted(where)}


@dataclass
class Hang:
    """One confirmed hang of the job: its ``attempt``, :func:`signature`, when (``t``, epoch
    s) and what was done (``action``: ``requeue`` or ``end``, with its ``reason``)."""
    attempt: int
    signature: dict
    t: float = 0.0
    action: str = ""
    reason: str = ""


@dataclass
class RequeueState:
    """The job's own requeue record: ``hang_requeues`` (requeues made for hangs, >= 0) and
    ``hangs`` (every hang acted on, oldest first). JSON form: ``{"hang_requeues": int,
    "hangs": [{"attempt", "signature", "t", "action", "reason"}]}``."""
    hang_requeues: int = 0
    hangs: List[Hang] = field(default_factory=list)

    @classmethod
    def from_json(cls, doc) -> "RequeueState":
        """The state of a parsed JSON document. Raises ValueError for anything but a requeue
        state (a count that is not an int >= 0, ``hangs`` not a list)."""
        count = doc.get("hang_requeues", 0) if isinstance(doc, dict) else None
        hangs = doc.get("hangs", []) if isinstance(doc, dict) else None
        if not (isinstance(count, int) and not isinstance(count, bool) and count >= 0 and isinstance(hangs, list)):
            raise ValueError("not a requeue state (hang_requeues %r)" % (count,))
        out = []
        for h in hangs:
            if not isinstance(h, dict):
                continue
            try:
                attempt = int(h.get("attempt", -1))
            except (TypeError, ValueError):
                attempt = -1
            sig = h.get("signature")
            out.append(Hang(attempt, sig if isinstance(sig, dict) else {}, h.get("t", 0.0),
                            str(h.get("action", "")), str(h.get("reason", ""))))
        return cls(count, out)

    def to_json(self) -> dict:
        return {"hang_requeues": self.hang_requeues,
                "hangs": [{"attempt": h.attempt, "signature": h.signature, "t": h.t, "action": h.action,
                           "reason": h.reason} for h in self.hangs]}

    @classmethod
    def load(cls, url: str) -> "RequeueState":
        """The state at ``url`` (:func:`state_url`); an empty one if there is none. Read
        through :func:`hpc_hangkit.storage.read_job_record` (on ``file://`` a symlink,
        another user's file or a job directory not the user's own is not read). Anything
        unreadable, corrupt or refused is logged and treated as empty: the save that follows
        a decision then either writes a fresh state or fails, and a failed save never
        requeues."""
        try:
            data = storage.read_job_record(url, MAX_STATE_BYTES)
            if len(data) > MAX_STATE_BYTES:
                raise ValueError("larger than %d bytes" % MAX_STATE_BYTES)
            return cls.from_json(json.loads(data.decode("utf-8")))
        except FileNotFoundError:
            return cls()
        except (ValueError, OSError) as e:
            log.warning("cannot read the requeue state %s (%s); starting from zero", url, e)
            return cls()

    def save(self, url: str) -> None:
        """Write the state to ``url`` (:func:`hpc_hangkit.storage.write_job_record`). Raises
        StoreRefused, OSError (or the backend's error) if storage refuses."""
        storage.write_job_record(url, json.dumps(self.to_json(), indent=1, sort_keys=True).encode("utf-8"))


def state_url(settings, job_id, env: Mapping[str, str]) -> str:
    """Where the hang-requeue count lives: ``<storage_url>/<job_id>/hangkit_requeue.json``
    (``{user}``: SLURM_JOB_USER or USER of ``env``), or
    ``~/.hpc-hangkit/jobs/<job_id>/hangkit_requeue.json`` (HOME of ``env``) when
    ``settings.storage_url`` is unset. Raises ValueError for an unusable ``{user}``."""
    base = getattr(settings, "storage_url", None)
    if base:
        base = storage.expand_storage_url(base, env.get("SLURM_JOB_USER") or env.get("USER"))
        return "%s/%s/%s" % (base, job_id, layout.REQUEUE_STATE_FILE)
    home = env.get("HOME") or os.path.expanduser("~")
    return "file://%s/%s" % (layout.user_job_dir(home, job_id), layout.REQUEUE_STATE_FILE)


@dataclass(frozen=True)
class Decision:
    """``action``: ``keep`` (observe: the job runs on), ``requeue`` or ``end``; ``reason``: one sentence."""
    action: str
    reason: str


def decide(mode: str, requeue_flag: bool, batch: bool, state: RequeueState, sig: dict, attempt: int,
           max_hang_requeues: int) -> Decision:
    """The requeue rule, pure. ``state``: the job's requeue state before this hang."""
    if mode != "fail":
        return Decision("keep", "observe mode: hang reported, the job keeps running")
    if not batch:
        return Decision("end", "not requeued: only batch jobs are requeued")
    if not requeue_flag:
        return Decision("end", "not requeued: the job does not allow requeue "
                               "(submitted with --no-requeue, or JobRequeue=0 on this cluster)")
    prev = [h for h in state.hangs if h.attempt < attempt]
    if prev:
        p = prev[-1]
        if p.signature.get("suspect_ranks") == sig.get("suspect_ranks") and p.signature.get("where") == sig.get("where"):
            return Decision("end", "not requeued: repeat - rank(s) %s hang at the same place as in "
                                   "attempt %s (%s)" % (format_ranks(sig.get("suspect_ranks") or []) or "?",
                                                        p.attempt, "; ".join(sig.get("where") or []) or "?"))
    used = state.hang_requeues
    if used >= max_hang_requeues:
        return Decision("end", "not requeued: the hang-requeue budget is spent (%d of %d used)"
                        % (used, max_hang_requeues))
    return Decision("requeue", "requeueing: hang requeue %d of %d" % (used + 1, max_hang_requeues))
