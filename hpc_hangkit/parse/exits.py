"""How a rank ended, as a value: :class:`ExitHow` and :class:`Exit`.

Made where the fact is read (a rank's exit record, a Python traceback, a fatal-error
dump, the monitor's vanished record, the report's silence rule); the roll call decides
on its fields, and its words (the report's exit error, the ``exit`` object of a group in
report.json) are made from it by :mod:`hpc_hangkit.rollcall.prose`.
"""
import enum
from dataclasses import dataclass
from typing import Optional

__all__ = ["ExitHow", "Exit"]


class ExitHow(str, enum.Enum):
    """How a rank left. ``NORMAL``: the program returned (its exit record, ``status``);
    ``SYS_EXIT``: it called ``sys.exit`` (``status``); ``EXCEPTION``: an uncaught
    exception (a traceback, ``error`` its last line); ``FATAL``: a fatal-error dump
    (``error`` what faulthandler named: ``Segmentation fault``, ``Aborted``, ...);
    ``VANISHED``: the monitor saw its process gone with no exit record (``pid``);
    ``SILENT``: it wrote nothing for ``silent_s`` seconds while other ranks kept writing."""
    NORMAL = "normal"
    SYS_EXIT = "exit"
    EXCEPTION = "exception"
    FATAL = "fatal"
    VANISHED = "vanished"
    SILENT = "silent"


@dataclass(frozen=True)
class Exit:
    """One rank's end. ``how``: :class:`ExitHow`; ``status``: the exit status its exit
    record gives (NORMAL, SYS_EXIT, and EXCEPTION when the record held no readable
    traceback), else None; ``error``: the exception's last line (EXCEPTION; None when the
    traceback printed none) or the fatal error's name (FATAL); ``pid``: the vanished
    process (VANISHED); ``silent_s``: seconds without a write (SILENT)."""
    how: ExitHow
    status: Optional[int] = None
    error: Optional[str] = None
    pid: Optional[int] = None
    silent_s: Optional[float] = None

    def to_json(self) -> dict:
        """``{"how": <ExitHow value>, ...}`` with only the set fields (a node summary's ``end``)."""
        out = {"how": self.how.value}
        for k in ("status", "error", "pid", "silent_s"):
            v = getattr(self, k)
            if v is not None:
                out[k] = v
        return out

    @classmethod
    def from_json(cls, d) -> Optional["Exit"]:
        """The inverse of :meth:`to_json`; None when ``d`` is not one (an unknown ``how``,
        a field of the wrong type)."""
        if not isinstance(d, dict):
            return None
        try:
            how = ExitHow(d.get("how"))
        except ValueError:
            return None
        status, error, pid, silent = (d.get(k) for k in ("status", "error", "pid", "silent_s"))
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in (status, pid)):
            return None
        if not (error is None or isinstance(error, str)):
            return None
        if not (silent is None or (isinstance(silent, (int, float)) and not isinstance(silent, bool))):
            return None
        return cls(how, status, error, pid, None if silent is None else float(silent))
