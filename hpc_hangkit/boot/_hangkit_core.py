"""hpc-hangkit watchdog core: stdlib-only, CPython >= 3.8, Linux x86_64/aarch64.

Loaded as the top-level module ``_hangkit_core`` by the boot ``sitecustomize``
(the boot directory is first on PYTHONPATH) or as
``hpc_hangkit.boot._hangkit_core`` by :mod:`hpc_hangkit.arm.watchdog`; there is one
state per process (``hpc_hangkit.arm.watchdog`` re-uses whichever is loaded).

Mechanism (see docs/watchdog.md):

- a kernel timer, ``timer_create(CLOCK_MONOTONIC, SIGEV_THREAD_ID -> main
  thread)``, raises the watchdog signal (default SIGURG, whose default action
  is "ignore") at ``last checkpoint + period`` and then every period while the
  rank stays stalled;
- the signal is handled in C by ``faulthandler.register(sig, fd,
  all_threads=False)``, so a dump appears even while the main thread is
  blocked in C holding the GIL (``faulthandler.dump_traceback_later`` is never
  used: it crashes healthy processes);
- :func:`checkpoint` is a few stores: the time in memory and a seqlock-guarded
  record in a MAP_SHARED mmap of the per-process heartbeat file.  A small
  daemon thread wakes every period/4 and pushes the kernel timer out to
  ``last checkpoint + period``.

This module must import fast (it runs at interpreter start in every rank):
only builtin modules at import time; ``ctypes`` is imported when arming.
"""
import _signal
import _thread
import faulthandler
import mmap
import os
import struct
import sys
import time

# the rank-side names and defaults, shared with hpc_hangkit.layout and .config
if __package__:  # hpc_hangkit.boot._hangkit_core
    from ._hangkit_names import *  # noqa: F401,F403
else:  # top-level _hangkit_core: the boot directory is on sys.path
    from _hangkit_names import *  # noqa: F401,F403

#: of ALLOWED_SIGNALS, the ones whose default action is harmless (ignore)
_HARMLESS_DEFAULT = ("SIGURG", "SIGWINCH")

# rank sources, in precedence order: (rank var, world var, local-rank var)
RANK_SOURCES = (
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("PMIX_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
)
WORLD_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
# launchers / agents / our own tools: never a rank
_HELPER_MODULES = ("torch.distributed.run", "torch.distributed.launch", "hpc_hangkit")
_HELPER_SCRIPTS = ("torchrun", "hpc-hangkit")

# --- heartbeat record (docs/internals.md "Heartbeat record") --------------------
HB_MAGIC = b"HKHEARTB"
HB_VERSION = 2
HB_SIZE = 1024
HB_LABEL_MAX = 200
#: static part, written once per arming: magic, version, record size, rank,
#: world, local_rank, pid, main_tid, signal, period_s, armed_wall_s,
#: armed_mono_s, host
HB_STATIC = struct.Struct("<8sIIiiiIIiddd64s")  # 128 bytes at offset 0
HB_SEQ = struct.Struct("<Q")  # odd while a writer is inside the slot, even when done
#: two slots, written alternately (checkpoint n into slot (seq >> 1) & 1), each
#: guarded by its own sequence number: while the rank writes one (or is preempted
#: inside it), the other is whole, so a reader never waits on the writer.  Slot 0
#: sits where version 1's only slot was.
HB_SLOT_OFFSETS = (128, 512)
#: one slot: seq, counter, mono_s, label (utf-8, NUL padded).  No wall time
#: here (one clock call less per checkpoint): readers derive it as
#: armed_wall_s + (mono_s - armed_mono_s)
HB_SLOT = struct.Struct("<QQd%ds" % HB_LABEL_MAX)  # 224 bytes
HB_SEQ_OFFSET = HB_SLOT_OFFSETS[0]
HB_DYN_OFFSET = HB_SEQ_OFFSET + 8
HB_DYN = struct.Struct("<Qd%ds" % HB_LABEL_MAX)  # a slot after its seq
HB_LABEL = struct.Struct("%ds" % HB_LABEL_MAX)
#: index of each slot's seq in a memoryview cast to "Q"; counter is at +1, mono_s
#: at +2 (in the "d" view), the label at byte (index + 3) * 8
HB_SLOT_INDEX = tuple(o // 8 for o in HB_SLOT_OFFSETS)
#: u64 after slot 0's label, outside the seqlocks (one writer: the watchdog thread): how
#: many times that thread found the main thread running Python (see _main_busy); 0 in
#: records of older versions
HB_BUSY_OFFSET = HB_DYN_OFFSET + HB_DYN.size  # 352
HB_BUSY_INDEX = HB_BUSY_OFFSET // 8
#: two f64 after it, outside the seqlocks (one writer, the watchdog thread; 0.0 in records of
#: older versions): CLOCK_MONOTONIC seconds when the thread last looked at the main thread's
#: innermost frame (checked), and when it last found that frame moved since its previous look
#: (moved).  A reader reads checked before moved; the thread writes moved first.
HB_CHECKED_OFFSET = HB_BUSY_OFFSET + 8  # 360
HB_MOVED_OFFSET = HB_CHECKED_OFFSET + 8  # 368
HB_CHECKED_INDEX = HB_CHECKED_OFFSET // 8
HB_MOVED_INDEX = HB_MOVED_OFFSET // 8
#: f64: CLOCK_MONOTONIC seconds of the look that last counted busy (written before busy,
#: read after it; 0.0 in older records)
HB_BUSY_AT_OFFSET = HB_MOVED_OFFSET + 8  # 376
HB_BUSY_AT_INDEX = HB_BUSY_AT_OFFSET // 8
#: version 1 (512 bytes, one slot at HB_SEQ_OFFSET) is still read
HB_V1_SIZE = 512

_CLOCK_MONOTONIC = 1
_SIGEV_THREAD_ID = 4
_TIMER_ABSTIME = 1
_SYS_TGKILL = {"x86_64": 234, "amd64": 234, "aarch64": 131, "arm64": 131}

# --- process state (one per process) -------------------------------------------
_lock = _thread.allocate_lock()  # serialises arm/disarm
_timer_lock = _thread.allocate_lock()  # timer id vs the deadline thread
_state = None  # dict while armed, else None
_gen = 0  # bumped on every arm/disarm; the deadline thread exits when it changes
_hooks_installed = False

# checkpoint() state: module globals (fastest to reach from checkpoint)
_counter = 0
_last_mono = 0.0  # monotonic time of the last checkpoint (0.0: none yet)
#: a checkpoint after a gap longer than this re-arms the timer itself (the
#: deadline thread may be up to period/4 late, e.g. right after the rank
#: resumes from a GIL-held stall); inf when not armed
_resync_s = float("inf")
_hb = None  # memoryview (format "Q") of the heartbeat mmap, or None
_hbd = None  # the same memory as doubles (format "d")
_seq = 0
_label_obj = ""
_label_b = b""
_slot_label = [None, None]  # the label object last packed into each slot
_busy = 0  # times the watchdog thread found the main thread running Python
_monotonic = time.monotonic
_pack_label = HB_LABEL.pack_into
_SLOT_INDEX = HB_SLOT_INDEX

_libc_cache = None


class _Libc:
    """What :func:`_libc` loads once per process: the libc handle (``libc``), the POSIX
    timer functions, ``syscall``, the ``ctypes`` module and the structures the timer
    calls take (``timespec``, ``itimerspec``, ``sigevent``)."""
    __slots__ = ("libc", "timer_create", "timer_settime", "timer_delete", "timer_gettime", "syscall",
                 "ctypes", "timespec", "itimerspec", "sigevent")

    def __init__(self, **fields):
        for name, value in fields.items():
            setattr(self, name, value)


def _libc():
    """The :class:`_Libc` of this process (loaded on first use: ctypes is imported here,
    not at boot).  Raises OSError on a platform without 64-bit Linux timer_create."""
    global _libc_cache
    if _libc_cache is not None:
        return _libc_cache
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    try:
        libc.timer_create
        lib_rt = libc
    except AttributeError:  # glibc < 2.34 keeps POSIX timers in librt
        lib_rt = ctypes.CDLL("librt.so.1", use_errno=True)

    class timespec(ctypes.Structure):
        _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]

    class itimerspec(ctypes.Structure):
        _fields_ = [("it_interval", timespec), ("it_value", timespec)]

    class sigevent(ctypes.Structure):  # 64 bytes on LP64 Linux
        _fields_ = [
            ("sigev_value", ctypes.c_void_p),
            ("sigev_signo", ctypes.c_int),
            ("sigev_notify", ctypes.c_int),
            ("sigev_notify_thread_id", ctypes.c_int),
            ("_pad", ctypes.c_int * 11),
        ]

    if ctypes.sizeof(sigevent) != 64 or ctypes.sizeof(ctypes.c_void_p) != 8:
        raise OSError("unsupported platform for timer_create (needs 64-bit Linux)")
    tc = lib_rt.timer_create
    tc.argtypes = [ctypes.c_int, ctypes.POINTER(sigevent), ctypes.POINTER(ctypes.c_void_p)]
    tc.restype = ctypes.c_int
    ts = lib_rt.timer_settime
    ts.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.POINTER(itimerspec), ctypes.c_void_p]
    ts.restype = ctypes.c_int
    td = lib_rt.timer_delete
    td.argtypes = [ctypes.c_void_p]
    td.restype = ctypes.c_int
    tg = lib_rt.timer_gettime
    tg.argtypes = [ctypes.c_void_p, ctypes.POINTER(itimerspec)]
    tg.restype = ctypes.c_int
    sc = libc.syscall
    sc.restype = ctypes.c_long
    _libc_cache = _Libc(libc=libc, timer_create=tc, timer_settime=ts, timer_delete=td, timer_gettime=tg,
                        syscall=sc, ctypes=ctypes, timespec=timespec, itimerspec=itimerspec, sigevent=sigevent)
    return _libc_cache


def _oserror(what):
    import ctypes

    e = ctypes.get_errno()
    return OSError(e, "%s: %s" % (what, os.strerror(e)))


def signal_number(sig):
    """Signal number for a name (``"SIGURG"``, ``"urg"``) or number.

    Raises ValueError for an unknown signal or one not in ALLOWED_SIGNALS.
    """
    if isinstance(sig, bool):
        raise ValueError("not a signal: %r" % (sig,))
    if isinstance(sig, int):
        for name in ALLOWED_SIGNALS:
            if getattr(_signal, name, None) == sig:
                return sig
        raise ValueError("signal %d is not allowed for the watchdog (use one of %s)"
                         % (sig, ", ".join(ALLOWED_SIGNALS)))
    name = str(sig).strip().upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    num = getattr(_signal, name, None) if name in ALLOWED_SIGNALS else None
    if not isinstance(num, int):
        raise ValueError("signal %r is not allowed for the watchdog (use one of %s)"
                         % (sig, ", ".join(ALLOWED_SIGNALS)))
    return num


def signal_name(signum):
    """Name (``"SIGURG"``) of an allowed signal number, else ``"SIG<n>"``."""
    for name in ALLOWED_SIGNALS:
        if getattr(_signal, name, None) == signum:
            return name
    return "SIG%d" % signum


def _json_str(s):
    out = ['"']
    for ch in s:
        o = ord(ch)
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif o < 0x20 or 0xD800 <= o <= 0xDFFF:
            out.append("\\u%04x" % o)
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _cmdline():
    """argv of this process as the kernel saw it (falls back to sys.argv)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            raw = f.read()
        parts = raw.split(b"\0")
        if parts and parts[-1] == b"":
            parts.pop()
        return [p.decode("utf-8", "replace") for p in parts]
    except OSError:
        return list(getattr(sys, "orig_argv", None) or getattr(sys, "argv", None) or [])


def header_line(rank, world, local_rank, pid, host, t, signame, period_s, argv):
    """The one header line of a watchdog log (docs/internals.md), with newline."""
    def dash(v):
        return "-" if v is None else str(v)

    return "%srank=%s world=%s local_rank=%s pid=%d host=%s t=%.3f signal=%s period_s=%s argv=[%s]\n" % (
        HEADER_PREFIX, dash(rank), dash(world), dash(local_rank), pid, host, t, signame,
        repr(float(period_s)), ", ".join(_json_str(a) for a in argv))


def _encode_label(label):
    if not isinstance(label, str):
        label = str(label)
    b = label.encode("utf-8", "replace").replace(b"\0", b" ")
    if len(b) > HB_LABEL_MAX:
        b = b[:HB_LABEL_MAX].decode("utf-8", "ignore").encode("utf-8")  # never split a character
    return b


def checkpoint(label=""):
    """Record progress: push the watchdog deadline out and update the heartbeat.

    ``label`` (str, at most 200 UTF-8 bytes kept; longer labels are cut at a
    character boundary) names where the rank is, e.g. ``"step 12"``.  Cost:
    well under a microsecond (memory stores into an mmap; no system call), so
    it is safe in inner loops.  Works (and only counts) when not watching.
    The record is readable by another process while this one is blocked
    (:func:`hpc_hangkit.parse.heartbeat.read_heartbeat`).  Never raises for a
    str label.
    """
    global _counter, _last_mono, _seq, _label_obj, _label_b
    # memoryview item stores (~30 ns each) instead of struct.pack_into (~150 ns)
    t = _monotonic()
    _counter += 1
    if t - _last_mono > _resync_s:
        _resync(t)
    _last_mono = t
    m = _hb
    if m is not None:
        s = _seq + 1
        k = (s >> 1) & 1  # alternate slots: the other one stays whole meanwhile
        i = _SLOT_INDEX[k]
        m[i] = s  # odd: writing this slot
        m[i + 1] = _counter
        _hbd[i + 2] = t
        if label is not _slot_label[k]:
            if label is not _label_obj:
                _label_obj = label
                _label_b = _encode_label(label)
            _slot_label[k] = label
            _pack_label(m, (i + 3) * 8, _label_b)
        _seq = s + 1
        m[i] = _seq  # even: done


def _resync(t):
    """Re-arm the kernel timer for t + period now (first checkpoint after a long gap)."""
    st = _state
    if st is None:
        return
    try:
        with _timer_lock:
            if st.get("_timer") is not None and _state is st:
                _set_timer(st, t + st["period_s"], absolute=True)
    except Exception:  # the deadline thread will still push it
        pass


def is_armed():
    """True while the watchdog is armed in this process."""
    return _state is not None


def status():
    """A copy of the armed state (paths, period, signal, rank, ...) or None."""
    st = _state
    if st is None:
        return None
    return {k: v for k, v in st.items() if not k.startswith("_")}


def counter():
    """Number of checkpoint() calls so far in this process."""
    return _counter


def _set_timer(st, first_s, absolute=False):
    lib = _libc()
    period = st["period_s"]
    spec = lib.itimerspec()
    spec.it_interval.tv_sec = int(period)
    spec.it_interval.tv_nsec = int(round((period - int(period)) * 1e9))
    if spec.it_interval.tv_nsec >= 1000000000:
        spec.it_interval.tv_sec += 1
        spec.it_interval.tv_nsec -= 1000000000
    if first_s <= 0 and not absolute:
        first_s = 1e-9
    sec = int(first_s)
    spec.it_value.tv_sec = sec
    spec.it_value.tv_nsec = max(1 if sec == 0 else 0, int((first_s - sec) * 1e9))
    if lib.timer_settime(st["_timer"], _TIMER_ABSTIME if absolute else 0, spec, None) != 0:
        raise _oserror("timer_settime")


def _timer_next(st):
    """Monotonic time of the kernel timer's next expiry (None: disarmed/unknown)."""
    lib = _libc()
    spec = lib.itimerspec()
    if lib.timer_gettime(st["_timer"], lib.ctypes.byref(spec)) != 0:
        return None
    v = spec.it_value
    if v.tv_sec == 0 and v.tv_nsec == 0:
        return None
    return _monotonic() + v.tv_sec + v.tv_nsec / 1e9


def _fh_str(s):
    """A string the way faulthandler writes it: ASCII, escapes, cut at 500 chars."""
    if not isinstance(s, str):
        return "???"
    cut = len(s) > 500
    out = s[:500].encode("ascii", "backslashreplace").decode("ascii")
    return out + "..." if cut else out


def dump_main_thread(st=None):
    """Write one dump of the main thread's stack, from Python, to the watchdog log.

    Same text as faulthandler's ``Stack (most recent call first):`` block (the
    parsers cannot tell them apart).  Safe only because the caller holds the
    GIL, so the main thread is between bytecodes or blocked in C and its frame
    chain is consistent; this is what makes on-demand and periodic dumps of a
    *running* rank crash-free (a C-level signal dump that lands while the main
    thread pops a frame reads freed memory on CPython 3.11/3.12, see
    docs/watchdog.md).  Returns True if a dump was written.
    """
    st = _state if st is None else st
    if st is None:
        return False
    f = sys._current_frames().get(st.get("_main_ident"))
    if f is None:
        return False
    parts = ["Stack (most recent call first):\n"]
    depth = 0
    while f is not None:
        if depth >= 100:  # faulthandler's MAX_FRAME_DEPTH
            parts.append("  ...\n")
            break
        co = f.f_code
        line = f.f_lineno
        parts.append('  File "%s", line %s in %s\n' % (
            _fh_str(co.co_filename), line if isinstance(line, int) and line >= 0 else "???",
            _fh_str(co.co_name)))
        f = f.f_back
        depth += 1
    f = None
    os.write(st["fd"], "".join(parts).encode("ascii", "replace"))
    return True


def _note_position(st, gen, p0):
    """Keep the heartbeat's moved/checked times (HB_MOVED_INDEX, HB_CHECKED_INDEX) for the
    main thread as it is now: its innermost frame ``p0`` (:func:`_main_position`) and every
    outer frame's identity and instruction (a collective left and a new one entered at another
    line can reuse the innermost frame's memory, instruction and argument values; its caller's
    instruction differs).  A monitor that sees this rank's stack change then knows it changed
    no later than ``moved``, when ``checked`` is at or after the dump that showed it.  No
    Python frame (p0 None) is no look."""
    if p0 is None:
        return
    f = sys._current_frames().get(st.get("_main_ident"))
    chain = []
    while f is not None and len(chain) < 100:  # faulthandler's MAX_FRAME_DEPTH
        chain.append((id(f), f.f_lasti))
        f = f.f_back
    f = None
    pos = (p0, tuple(chain))
    now = _monotonic()
    moved = pos != st.get("_pos")
    st["_pos"] = pos
    m = _hbd
    if m is not None and _gen == gen:
        if moved:
            m[HB_MOVED_INDEX] = now
        m[HB_CHECKED_INDEX] = now


def _main_busy(st, p0=None):
    """True if the main thread is running Python.

    This thread gives up the GIL for 0.2 ms and takes the time until it has it back.
    A main thread that runs Python grabs it and keeps it until asked, so the way back
    takes a whole switch interval (``sys.getswitchinterval()``, 5 ms); a main thread
    blocked in C with the GIL released (a collective) leaves it free, so it comes back
    at once.  Both probes must be slow, and the main thread must have used CPU time
    meanwhile (its own thread CPU clock): then another Python thread holding the GIL
    while the main thread sleeps in a collective is not read as busy.  A false "busy"
    would count as progress and delay a real hang's confirmation; a missed one costs
    nothing (the next wake probes again).  A slow way back also needs the main thread's
    innermost frame to have moved on (its instruction or its locals, :func:`_main_position`),
    unless the GIL was held for longer than :data:`_GIL_HELD_S`: on a loaded node the
    scheduler alone makes the way back slow, and a collective's spin-wait burns CPU in C.
    Costs this thread <= 2 switch intervals of waiting and the main thread two GIL
    hand-overs.
    """
    need = 0.0002 + max(0.002, 0.8 * sys.getswitchinterval())
    clk = st.get("_main_clock")
    c0 = time.clock_gettime(clk) if clk is not None else None
    if p0 is None:
        p0 = _main_position(st)
    held = False
    for _ in (0, 1):
        t0 = _monotonic()
        time.sleep(0.0002)
        took = _monotonic() - t0
        if took < need:
            return False
        held = held or took > _GIL_HELD_S
    if c0 is not None and time.clock_gettime(clk) - c0 <= 0.0005:
        return False
    # on a loaded node a slow way back can be the scheduler, not the GIL: the main thread
    # ran Python only if its frame moved on meanwhile (or it kept the GIL for longer than
    # a scheduling delay, in a C call that holds it: computing)
    return held or p0 is None or _main_position(st) != p0


#: a GIL hand-over that takes longer than this (s) is a C call holding it, not scheduling
_GIL_HELD_S = 0.05


def _main_position(st):
    """What the main thread's innermost Python frame looks like now, or None.

    (frame id, last instruction, its locals): the locals as values where the type is a
    builtin scalar (compared by value: a freed int's address is reused at once) and as
    ids otherwise, so no user ``__eq__`` runs.  A loop that runs Python hands the GIL
    over at the same back edge every time, so the instruction alone does not move; its
    counters and accumulators do.  A rank waiting in a collective changes neither.
    """
    f = sys._current_frames().get(st.get("_main_ident"))
    if f is None:
        return None
    try:
        local = tuple(v if type(v) in _SCALARS else id(v) for v in f.f_locals.values())
    except Exception:
        local = None
    pos = (id(f), f.f_lasti, local)
    f = None
    return pos


_SCALARS = frozenset((int, float, complex, bool, str, bytes, type(None)))


def _name_thread(ident, name):
    """Set thread ``ident``'s kernel name (what /proc/<pid>/task/<tid>/comm shows)."""
    try:
        lib = _libc()
        lib.libc.pthread_setname_np(lib.ctypes.c_ulong(ident), name.encode()[:15])
    except Exception:
        pass


def _deadline_loop(gen, st):
    """The watchdog thread (named ``hk-watchdog``): a dump server and the deadline keeper.

    - It blocks the watchdog signal for itself and waits in ``sigtimedwait``:
      a request sent to *its* thread id (:func:`request_dump`) makes it dump
      the main thread from Python (:func:`dump_main_thread`).
    - It pushes the kernel timer to ``last checkpoint + period`` while
      checkpoints come, and when a period passes without one it takes the
      stall dump itself (slightly early) and pushes the timer past it.
    - It needs the GIL for both.  When it cannot get it (the main thread is
      blocked in C holding the GIL) the kernel timer fires and faulthandler
      dumps from C: exactly the case C dumping exists for, and a safe one,
      since the main thread is not executing bytecode.
    """
    global _busy
    sig = st["signal"]
    sigset = (sig,)
    period = st["period_s"]
    step = period / 4.0
    lead = min(0.5, period / 10.0)
    armed_for = st["_armed_for"]
    due = st["_due"]
    try:
        # (the signal is already blocked here: inherited from arm(); the name
        # was set by arm() too, so a request can find this thread at once)
        while True:
            wait = min(step, due - lead - _monotonic())
            got = _signal.sigtimedwait(sigset, wait) if wait > 0 else None
            if _gen != gen:
                break
            if got is not None:
                dump_main_thread(st)
                _note_position(st, gen, _main_position(st))  # after the dump: checked covers it
                continue
            p0 = _main_position(st)
            _note_position(st, gen, p0)
            if _main_busy(st, p0):
                _busy += 1
                m, md = _hb, _hbd
                if m is not None and md is not None and _gen == gen:
                    md[HB_BUSY_AT_INDEX] = _monotonic()
                    m[HB_BUSY_INDEX] = _busy
            last = _last_mono
            if last and last != armed_for:
                armed_for = last
                due = last + period
                with _timer_lock:
                    if _gen != gen:
                        break
                    _set_timer(st, due, absolute=True)
                continue
            if _monotonic() < due - lead:
                continue
            # a period without a checkpoint: stalled (or busy without checkpoints)
            with _timer_lock:
                if _gen != gen:
                    break
                nxt = _timer_next(st)
                if nxt is not None and nxt > due + lead:
                    due = nxt  # it fired while this thread could not run: C already dumped
                    continue
                due += period
                _set_timer(st, due, absolute=True)
            dump_main_thread(st)
            _note_position(st, gen, _main_position(st))
    except BaseException:  # never print from a daemon thread; the timer keeps firing
        pass
    finally:
        try:
            st["_done"].release()
        except Exception:
            pass


def _main_tid():
    th = sys.modules.get("threading")
    if th is not None:
        tid = getattr(th.main_thread(), "native_id", None)
        if tid:
            return tid
    # boot: sitecustomize runs on the main thread, before any other
    return _thread.get_native_id()


def _main_ident():
    th = sys.modules.get("threading")
    if th is not None:
        return th.main_thread().ident
    return _thread.get_ident()  # boot: sitecustomize runs on the main thread


def _fd_of(dest):
    """A real file descriptor for ``dest`` (int fd or object with a working fileno())."""
    if isinstance(dest, bool):
        raise TypeError("watchdog destination must be a path or a real file descriptor, not %r" % (dest,))
    if isinstance(dest, int):
        fd = dest
    else:
        fileno = getattr(dest, "fileno", None)
        try:
            fd = fileno() if fileno is not None else None
        except Exception:
            fd = None
        if not isinstance(fd, int) or isinstance(fd, bool):
            raise TypeError(
                "watchdog destination %r has no real file descriptor: dumps are written from C "
                "(while the rank is blocked, possibly holding the GIL), so they need a path or a "
                "file with a working fileno(); an in-memory buffer such as StringIO would receive "
                "nothing" % (type(dest).__name__,))
        flush = getattr(dest, "flush", None)
        if flush is not None:
            try:
                flush()
            except Exception:
                pass
    try:
        os.fstat(fd)
    except (OSError, ValueError, OverflowError) as e:
        raise TypeError("watchdog destination fd %r is not an open file descriptor: %s" % (fd, e))
    if fd < 0:
        raise TypeError("watchdog destination fd %r is not an open file descriptor" % fd)
    return fd


def _create_heartbeat(path, static_args):
    d = os.path.dirname(path)
    if d:
        os.makedirs(d, 0o700, exist_ok=True)
    rec = bytearray(HB_SIZE)
    HB_STATIC.pack_into(rec, 0, *static_args)
    tmp = "%s.tmp%d" % (path, os.getpid())
    fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, bytes(rec))
        os.rename(tmp, path)  # readers never see a partial record
        m = mmap.mmap(fd, HB_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    return m


def arm(dest=None, period_s=None, sig=None, rank=None, world=None, local_rank=None,
        heartbeat_path=None, argv=None, header=True):
    """Arm the watchdog in this process (re-arms if already armed).

    dest: a path (str/PathLike; opened O_APPEND|O_CREAT, mode 0600, parent
    directories created 0700) or a real file descriptor (int or object with a
    working ``fileno()``).  Anything else -> TypeError.  period_s: seconds
    (> 0) without checkpoint() before a dump, and between repeat dumps.  sig:
    signal name or number from ALLOWED_SIGNALS (ValueError otherwise).
    heartbeat_path: fixed-size heartbeat record file (None: no file; counters
    stay in memory).  Writes the header line if the log is empty.
    Raises OSError if the kernel timer cannot be created.
    """
    global _state, _gen, _hb, _hbd, _seq, _label_obj, _label_b, _resync_s
    if dest is None:
        raise TypeError("watchdog destination is required (a path or a real file descriptor)")
    period_s = DEFAULT_PERIOD_S if period_s is None else period_s
    if isinstance(period_s, bool) or not isinstance(period_s, (int, float)):
        raise TypeError("period_s must be a number of seconds, not %r" % (period_s,))
    period_s = float(period_s)
    if not (period_s > 0.0 and period_s < 1e9):
        raise ValueError("period_s must be > 0 seconds, got %r" % (period_s,))
    signum = signal_number(DEFAULT_SIGNAL if sig is None else sig)
    owned_fd = None
    path = None
    if isinstance(dest, (str, bytes)) or hasattr(dest, "__fspath__"):
        path = os.fsdecode(os.fspath(dest))
    else:
        fd = _fd_of(dest)
    _libc()  # fail early (before touching anything) if timers are unavailable
    with _lock:
        _disarm_locked()
        pid = os.getpid()
        if path is not None:
            parent = os.path.dirname(path)
            if parent:
                os.makedirs(parent, 0o700, exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
            owned_fd = fd
        st = {"path": path, "fd": fd, "period_s": period_s, "signal": signum,
              "signal_name": signal_name(signum), "rank": rank, "world": world,
              "local_rank": local_rank, "pid": pid, "heartbeat_path": heartbeat_path,
              "_owned_fd": owned_fd, "_dest": dest, "_timer": None, "_registered": False}
        try:
            host = os.uname().nodename
            wall0, mono0 = time.time(), time.monotonic()
            main_tid = _main_tid()
            st["main_tid"] = main_tid
            if header:
                import stat as _stat

                info = os.fstat(fd)
                if not _stat.S_ISREG(info.st_mode) or info.st_size == 0:
                    line = header_line(rank, world, local_rank, pid, host, wall0, st["signal_name"], period_s,
                                       _cmdline() if argv is None else list(argv))
                    os.write(fd, line.encode("utf-8", "replace"))
            if heartbeat_path is not None:
                hostb = host.encode("utf-8", "replace")[:64]
                m = _create_heartbeat(heartbeat_path, (
                    HB_MAGIC, HB_VERSION, HB_SIZE, -1 if rank is None else rank, -1 if world is None else world,
                    -1 if local_rank is None else local_rank, pid, main_tid, signum, period_s, wall0, mono0, hostb))
                _seq = 0
                _label_b = _encode_label(_label_obj)
                # current counter/label in both slots; times = arming time until the
                # first checkpoint.  Not yet shared with checkpoint() (under _lock).
                last = _last_mono
                for k, off in enumerate(HB_SLOT_OFFSETS):
                    HB_SLOT.pack_into(m, off, 2, _counter, last or mono0, _label_b)
                    _slot_label[k] = _label_obj
                _seq = 2
                st["_hbmap"] = m
                st["_hb"] = memoryview(m).cast("Q")
                st["_hbd"] = memoryview(m).cast("d")
            lib = _libc()
            ctypes = lib.ctypes
            # a late signal must never kill: if this signal's default action
            # terminates, make the disposition faulthandler saves (and
            # restores at unregister/exit) "ignore"
            if st["signal_name"] not in _HARMLESS_DEFAULT and _signal.getsignal(signum) == _signal.SIG_DFL:
                try:
                    _signal.signal(signum, _signal.SIG_IGN)
                except ValueError:  # not the main thread: leave the disposition alone
                    pass
            faulthandler.register(signum, file=fd, all_threads=False, chain=False)
            st["_registered"] = True
            ev = lib.sigevent()
            ev.sigev_signo = signum
            ev.sigev_notify = _SIGEV_THREAD_ID
            ev.sigev_notify_thread_id = main_tid
            tid = ctypes.c_void_p()
            if lib.timer_create(_CLOCK_MONOTONIC, ctypes.byref(ev), ctypes.byref(tid)) != 0:
                raise _oserror("timer_create")
            st["_timer"] = tid
            st["_due"] = time.monotonic() + period_s
            _set_timer(st, st["_due"], absolute=True)  # before the first checkpoint: every period from now
            st["_armed_for"] = _last_mono
            st["_main_ident"] = _main_ident()
            try:  # the main thread's CPU clock (for _main_busy)
                st["_main_clock"] = time.pthread_getcpuclockid(st["_main_ident"])
            except (AttributeError, OSError):
                st["_main_clock"] = None
            st["_done"] = _thread.allocate_lock()
            st["_done"].acquire()
            _gen += 1
            # the thread starts with the signal blocked (masks are inherited), so
            # it never runs faulthandler itself; it waits for it in sigtimedwait
            old_mask = _signal.pthread_sigmask(_signal.SIG_BLOCK, (signum,))
            try:
                st["_thread_ident"] = _thread.start_new_thread(_deadline_loop, (_gen, st))
            finally:
                if signum not in old_mask:
                    _signal.pthread_sigmask(_signal.SIG_UNBLOCK, (signum,))
            st["_thread"] = True
            _name_thread(st["_thread_ident"], SERVER_THREAD_NAME)
        except BaseException:
            _teardown(st, unregister=True)
            raise
        _state = st
        _resync_s = period_s / 2.0
        if st.get("_hb") is not None:
            _hbd = st["_hbd"]
            _hb = st["_hb"]
        _install_hooks()
    return status()


def _teardown(st, unregister=True, close=True, wait=True):
    """Timer first, then the thread, then the handler, then the files."""
    global _gen, _hb
    with _timer_lock:
        _gen += 1
        t = st.get("_timer")
        st["_timer"] = None
        if t is not None:
            try:
                _libc().timer_delete(t)
            except Exception:
                pass
    if st.get("_thread"):
        st["_thread"] = False
        try:
            if st["_done"].locked():  # still running: wake it out of sigtimedwait
                _signal.pthread_kill(st["_thread_ident"], st["signal"])
        except Exception:
            pass
        if wait:
            st["_done"].acquire(True, 2.0)
    if unregister and st.get("_registered"):
        st["_registered"] = False
        try:
            faulthandler.unregister(st["signal"])
        except Exception:
            pass
    if st.get("_hb") is not None:
        if _hb is st["_hb"]:
            _hb = None
        if close:
            _close_heartbeat(st)
    if close and st.get("_owned_fd") is not None and not st.get("_registered"):
        try:
            os.close(st["_owned_fd"])
        except OSError:
            pass
        st["_owned_fd"] = None


def _close_heartbeat(st):
    views, m = (st.pop("_hb", None), st.pop("_hbd", None)), st.pop("_hbmap", None)
    try:
        for view in views:
            if view is not None:
                view.release()
        if m is not None:
            m.close()
    except Exception:
        pass


def _disarm_locked(unregister=True, close=True):
    global _state, _resync_s
    st = _state
    if st is None:
        return False
    _state = None
    _resync_s = float("inf")
    _teardown(st, unregister=unregister, close=close)
    return True


def disarm():
    """Disarm: delete the kernel timer, stop the deadline thread, unregister the
    handler, close the log and heartbeat.  Returns True if it was armed."""
    with _lock:
        return _disarm_locked()


def _atexit():
    # stop the timer; keep the handler installed (faulthandler's own teardown
    # restores the saved disposition, which is "ignore" for our signals)
    try:
        with _lock:
            _disarm_locked(unregister=False, close=False)
    except Exception:
        pass


def _after_fork_child():
    """A fork child (e.g. a data-loader worker) is not the rank: drop everything."""
    global _state, _lock, _timer_lock, _hb, _gen, _resync_s
    _lock = _thread.allocate_lock()
    _timer_lock = _thread.allocate_lock()
    st = _state
    _state = None
    _resync_s = float("inf")
    _hb = None  # never write into the parent's heartbeat record
    if st is None:
        return
    _gen += 1
    # POSIX timers and threads are not inherited by fork; the handler and fds are
    st["_timer"] = None
    st["_thread"] = False
    try:
        if st.get("_registered"):
            faulthandler.unregister(st["signal"])
            st["_registered"] = False
    except Exception:
        pass
    _close_heartbeat(st)
    try:
        if st.get("_owned_fd") is not None:
            os.close(st["_owned_fd"])
    except OSError:
        pass


def _install_hooks():
    global _hooks_installed
    if _hooks_installed:
        return
    import atexit

    atexit.register(_atexit)
    os.register_at_fork(after_in_child=_after_fork_child)
    _hooks_installed = True


SERVER_THREAD_NAME = "hk-watchdog"


def server_tid(pid):
    """Kernel thread id of process ``pid``'s watchdog thread (named
    ``hk-watchdog``, read from ``/proc/<pid>/task/*/comm``), or None when it
    has none (not armed, an older version, or the process is gone)."""
    d = "/proc/%d/task" % int(pid)
    try:
        tids = os.listdir(d)
    except OSError:
        return None
    want = SERVER_THREAD_NAME.encode() + b"\n"
    for t in tids:
        if not t.isdigit() or t == str(pid):
            continue
        try:
            fd = os.open("%s/%s/comm" % (d, t), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            if os.read(fd, 64) == want:
                return int(t)
        except OSError:
            pass
        finally:
            os.close(fd)
    return None


def tgkill(pid, tid, signum):
    """Send ``signum`` to thread ``tid`` of process ``pid`` (Linux ``tgkill``; elsewhere, or
    without the syscall, ``kill`` when ``tid == pid``). Raises ProcessLookupError,
    PermissionError, OSError."""
    nr = _SYS_TGKILL.get(os.uname().machine)
    if nr is not None:
        try:
            lib = _libc()
        except Exception:
            lib = None
        if lib is not None:
            sc, ctypes = lib.syscall, lib.ctypes
            if sc(ctypes.c_long(nr), ctypes.c_long(pid), ctypes.c_long(tid), ctypes.c_long(signum)) == 0:
                return
            e = ctypes.get_errno()
            import errno as _errno

            if e == _errno.ESRCH:
                raise ProcessLookupError(e, "no process %d (thread %d)" % (pid, tid))
            if e == _errno.EPERM:
                raise PermissionError(e, "not allowed to signal process %d" % pid)
            if e != _errno.ENOSYS:
                raise OSError(e, "tgkill(%d, %d): %s" % (pid, tid, os.strerror(e)))
    if tid != pid:
        raise OSError("cannot signal thread %d of process %d on this platform" % (tid, pid))
    os.kill(pid, signum)


def request_dump(pid, sig=DEFAULT_SIGNAL, direct=False):
    """Ask process ``pid`` for one stack dump of its main thread, now.

    By default the request goes to the process's ``hk-watchdog`` thread
    (``tgkill(pid, server_tid, sig)``), which writes the dump from Python
    while holding the GIL: crash-free whatever the main thread is doing, but
    only when that thread can get the GIL.  ``direct=True``, or a process
    without that thread, signals the main thread itself (``tgkill(pid, pid,
    sig)``) and faulthandler dumps from C: that works while the main thread
    is blocked in C with the GIL held, and is the fallback for exactly that
    case (see :func:`hpc_hangkit.arm.watchdog.request_dumps`).  The dump goes to
    the process's watchdog log.  Returns ``"thread"`` or ``"signal"`` (which
    path was used).  Raises ProcessLookupError if there is no such process,
    PermissionError if it is not ours, ValueError for a signal the watchdog
    does not use or a bad pid.
    """
    signum = signal_number(sig)
    pid = int(pid)
    if pid <= 0:
        raise ValueError("pid must be > 0, got %d" % pid)
    tid = None if direct else server_tid(pid)
    if tid is not None:
        try:
            tgkill(pid, tid, signum)
            return "thread"
        except ProcessLookupError:
            pass  # the thread ended between lookup and signal: use the main thread
    tgkill(pid, pid, signum)
    return "signal"


# --- arming from the environment (used by the boot sitecustomize) ---------------

class NotRank(Exception):
    """This process is not a rank (silently left alone)."""


class Unwatched(Exception):
    """This process is a rank that cannot be armed (stderr line + marker file)."""

    def __init__(self, reason, rank=None):
        Exception.__init__(self, reason)
        self.reason = reason
        self.rank = rank


def _int_var(env, name, minimum=0):
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        v = int(raw.strip())
    except ValueError:
        raise ValueError("%s=%r is not an integer" % (name, raw))
    if v < minimum:
        raise ValueError("%s=%r is below %d" % (name, raw, minimum))
    return v


def _python_target(argv):
    """('module', name) / ('script', path) / ('command', None) / (None, None) from argv."""
    i = 1
    while i < len(argv):
        a = argv[i]
        if a == "-m":
            return ("module", argv[i + 1] if i + 1 < len(argv) else "")
        if a.startswith("-m") and not a.startswith("--"):
            return ("module", a[2:])
        if a == "-c" or (a.startswith("-c") and not a.startswith("--")):
            return ("command", None)
        if a in ("-W", "-X", "--check-hash-based-pycs"):
            i += 2
            continue
        if a == "-" or not a.startswith("-"):
            return ("script", a)
        i += 1
    return (None, None)


def identify(env, argv=None):
    """(rank, world, local_rank, source var) of this process from the environment.

    Raises NotRank(why) for processes that are not ranks (no rank variable;
    the torchrun agent; our own tools; the Slurm batch step; a child of the
    armed rank) and Unwatched(why) for a rank whose variables are malformed.
    """
    armed_pid = env.get(ENV_ARMED_PID)
    if armed_pid and armed_pid.strip() != str(os.getpid()):
        raise NotRank("child of the armed rank (pid %s)" % armed_pid.strip())
    argv = _cmdline() if argv is None else argv
    kind, target = _python_target(argv)
    if kind == "module" and any(target == m or target.startswith(m + ".") for m in _HELPER_MODULES):
        raise NotRank("launcher/tool module %s" % target)
    if kind == "script" and os.path.basename(target) in _HELPER_SCRIPTS:
        raise NotRank("launcher/tool %s" % os.path.basename(target))
    if env.get("TORCHELASTIC_RUN_ID") is not None and env.get("RANK") is None:
        raise NotRank("torchrun agent (TORCHELASTIC_RUN_ID without RANK)")
    for rank_var, world_var, local_var in RANK_SOURCES:
        raw = env.get(rank_var)
        if raw is None or raw.strip() == "":
            continue
        if rank_var == "SLURM_PROCID":
            step = env.get("SLURM_STEP_ID", env.get("SLURM_STEPID"))
            try:
                step_ok = step is not None and 0 <= int(step) < 0xFFFFFFF0
            except ValueError:
                step_ok = False
            if not step_ok:
                raise NotRank("Slurm batch/extern step (SLURM_PROCID without a numbered SLURM_STEP_ID)")
        try:
            rank = _int_var(env, rank_var)
        except ValueError as e:
            raise Unwatched(str(e))
        try:
            world = _int_var(env, world_var, 1)
            if world is None:
                for wv in WORLD_VARS:
                    world = _int_var(env, wv, 1)
                    if world is not None:
                        break
        except ValueError as e:
            raise Unwatched(str(e), rank)
        try:
            local = _int_var(env, local_var)
        except ValueError:
            local = None
        if world is not None and rank >= world:
            raise Unwatched("%s=%d is not below the world size %d" % (rank_var, rank, world), rank)
        return rank, world, local, rank_var
    raise NotRank("no rank variable")


def _truthy(raw):
    """True for a boolean environment value spelled as in TRUE_WORDS (None: False)."""
    return raw is not None and raw.strip().lower() in TRUE_WORDS


def mark_unwatched(scratch, rank, pid, reason):
    """Write ``unwatched/rank_<r>.pid<pid>.txt`` (one line: the reason). Returns its path."""
    d = os.path.join(scratch, UNWATCHED_DIR)
    os.makedirs(d, 0o700, exist_ok=True)
    path = os.path.join(d, rank_file_name(rank, pid, UNWATCHED_SUFFIX))
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        os.write(fd, (" ".join(str(reason).split()) + "\n").encode("utf-8", "replace"))
    finally:
        os.close(fd)
    return path


def boot(env=None):
    """Arm this process from the job environment if it is a rank.

    Returns the armed status dict, or None when this process is left alone.
    Never raises: a rank that cannot be armed gets one stderr line
    ``hpc-hangkit: rank R NOT watched: <why>`` and a marker file
    ``unwatched/rank_<r>.pid<pid>.txt`` in scratch.
    """
    try:
        return _boot(os.environ if env is None else env)
    except NotRank:
        return None
    except BaseException as e:  # last resort: never reach the user's program
        try:
            _report_unwatched(os.environ if env is None else env, None, "internal error: %r" % (e,))
        except BaseException:
            pass
        return None


def _report_unwatched(env, rank, reason):
    pid = os.getpid()
    scratch = env.get(ENV_SCRATCH_DIR)
    extra = ""
    if scratch:
        try:
            mark_unwatched(scratch, rank, pid, reason)
        except Exception as e:
            extra = " (marker file not written: %s)" % e
    else:
        extra = " (no marker file: %s is not set)" % ENV_SCRATCH_DIR
    try:
        sys.stderr.write("hpc-hangkit: rank %s NOT watched: %s%s\n" % ("?" if rank is None else rank, reason, extra))
        sys.stderr.flush()
    except Exception:
        pass


def _boot(env):
    mode = env.get(ENV_MODE)
    if mode is None or mode.strip().lower() in ("", "off"):
        raise NotRank("hpc-hangkit is off")
    try:
        rank, world, local, _src = identify(env)
    except Unwatched as e:
        env[ENV_ARMED_PID] = str(os.getpid())
        _report_unwatched(env, e.rank, e.reason)
        return None
    # from here on this process is the rank: its children are not
    env[ENV_ARMED_PID] = str(os.getpid())
    try:
        if mode.strip().lower() not in ("observe", "fail"):
            raise Unwatched("%s=%r is not one of off, observe, fail" % (ENV_MODE, mode))
        scratch = env.get(ENV_SCRATCH_DIR, "").strip()
        if not scratch:
            raise Unwatched("%s is not set" % ENV_SCRATCH_DIR)
        if not os.path.isabs(scratch):
            raise Unwatched("%s=%r is not an absolute path" % (ENV_SCRATCH_DIR, scratch))
        raw = env.get(ENV_WATCHDOG_PERIOD_S)
        period = DEFAULT_PERIOD_S
        if raw is not None and raw.strip() != "":
            try:
                period = float(raw)
            except ValueError:
                raise Unwatched("%s=%r is not a number of seconds" % (ENV_WATCHDOG_PERIOD_S, raw))
            if not (period > 0 and period < 1e9):
                raise Unwatched("%s=%r must be > 0" % (ENV_WATCHDOG_PERIOD_S, raw))
        raw = env.get(ENV_WATCHDOG_SIGNAL)
        sig = DEFAULT_SIGNAL if raw is None or raw.strip() == "" else raw
        try:
            signal_number(sig)
        except ValueError as e:
            raise Unwatched("%s: %s" % (ENV_WATCHDOG_SIGNAL, e))
        pid = os.getpid()
        try:
            st = arm(os.path.join(scratch, WATCHDOG_DIR, rank_file_name(rank, pid, WATCHDOG_SUFFIX)),
                     period, sig, rank=rank, world=world, local_rank=local,
                     heartbeat_path=os.path.join(scratch, HEARTBEAT_DIR, rank_file_name(rank, pid, HEARTBEAT_SUFFIX)))
        except (OSError, ValueError, TypeError) as e:
            raise Unwatched("arming failed: %s" % (e,))
        if not faulthandler.is_enabled():
            # a fatal signal (segfault, abort) leaves its fatal-error dump in the rank's log:
            # how the report knows the rank died there
            try:
                faulthandler.enable(st["fd"], all_threads=True)
            except (OSError, ValueError, RuntimeError):
                pass
    except Unwatched as e:
        _report_unwatched(env, rank, e.reason)
        return None
    return st
