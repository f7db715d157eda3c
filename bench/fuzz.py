"""Hostile-input fuzz run over every parser: >= 100k inputs, prints crashes (0 is the target).

Targets (each: the parser, the ONLY exception it documents, its seed corpus):

    faulthandler   parse.faulthandler.parse_faulthandler   never raises
    pyspy          parse.pyspy.parse_pyspy                 never raises
    traceback      parse.traceback.parse_tracebacks        never raises
    flightrec      parse.flightrec.parse_flightrec         FRParseError
    ncclras_json   parse.ncclras.parse_ncclras_json        RasParseError
    ncclras_text   parse.ncclras.parse_ncclras_text        never raises
    sstat          slurm.parse_sstat                       never raises
    config_toml    config.load_settings(path=<file>)       ConfigError
    config_env     config.load_settings(env={HANGKIT_*})   ConfigError
    heartbeat      parse.heartbeat.read_heartbeat(<file>)  never raises (None + HeartbeatWarning)

Seeds are the real samples under tests/fixtures (faulthandler, py-spy, Flight Recorder
pickle + JSON, ncclras JSON + text, a heartbeat record), a real ``sstat -P`` shape and a
real config. Each
input is one of: random bytes, a seed truncated at a random byte, two seeds spliced,
a seed with byte flips, lines dropped/duplicated/swapped, or hostile tokens inserted
(NUL, invalid UTF-8, huge numbers, ``inf``/``nan``, deep nesting, separators).
A crash is any other exception; each is printed with its target, a reproducer file
(``--crash-dir``) and the traceback. Deterministic for a given ``--seed``.

Memory: the run sets its own address-space limit (``--mem-limit-mb``, default 2048) so a
parser that allocates without bound raises MemoryError - counted as a crash, with its
reproducer - instead of growing to 12 GiB (it once did: Flight Recorder pickles whose
BINBYTES/BYTEARRAY8 length or LONG_BINPUT memo index CPython's unpickler allocates up
front). The table prints each target's peak RSS (``ru_maxrss`` after the target). A target
that documents a memory bound (flightrec: ``MAX_EXPANSION`` x input + 64 KiB) runs each input
a second time, untimed, under tracemalloc; going over the bound is a crash.

    python bench/fuzz.py [--n 100000] [--seed 1] [--crash-dir DIR] [--mem-limit-mb 2048] [--quick]

Anchor: the same mutated inputs through the stdlib decoders alone (json.loads /
tomllib.loads / bytes.decode): their per-input time gives the ratio printed per target.
"""
import argparse
import glob
import json
import os
import random
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
FIX = os.path.join(ROOT, "tests", "fixtures")

SSTAT_SEED = (b"4242.0|4|00:01:02.500|1.50M|200K\n"
              b"4242.batch|1|1-02:03:04|0|12\n"
              b"4242.extern|1|00:00:00|2.5G|0.50K\n"
              b"4242.1|8|4294967295-00:00:00|1|1\n")
CONFIG_SEED = (b'mode = "observe"\npoll_interval_s = 15\nconfirm_duration_s = 600\nsuspect_after_s = 60\n'
               b'watchdog_period_s = 30\nwatchdog_signal = "SIGURG"\nscratch_dir = "/tmp/hpc-hangkit"\n'
               b'storage_url = "s3://bucket/hangkit"\nmax_hang_requeues = 1\nflight_recorder_buffer = 2000\n'
               b'[ncclras]\npath = "ncclras"\naddress = "127.0.0.1:28028"\ntimeout_s = 10\n'
               b'[pyspy]\npath = "py-spy"\n')
ENV_SEED = {"HANGKIT_MODE": "observe", "HANGKIT_POLL_INTERVAL_S": "15", "HANGKIT_CONFIRM_DURATION_S": "600",
            "HANGKIT_WATCHDOG_SIGNAL": "SIGURG", "HANGKIT_SCRATCH_DIR": "/tmp/hpc-hangkit/job_1/attempt_0",
            "HANGKIT_STORAGE_URL": "file:///shared/hk", "HANGKIT_NCCLRAS_ADDRESS": "127.0.0.1:28028",
            "HANGKIT_AUTO_CHECKIN": "0", "HANGKIT_STACK_SAMPLES": "5"}
TOKENS = [b"\x00", b"\xff\xfe", b"\xc3", b"\n", b"\r\n", b"\"", b"'", b"{", b"}", b"[", b"]", b",", b":", b"|",
          b"-", b"=", b"#", b"\\", b"1e999", b"-1", b"nan", b"inf", b"9" * 400, b"0x", b"???",
          b"Thread 0x7f (most recent call first):\n", b"Stack (most recent call first):\n",
          b"Current thread 0x1 (most recent call first):\n", b"Timeout (0:00:03)!\n",
          b'  File "a.py", line 99999999999999999999 in f\n', b"  File \"", b"Fatal Python error: ",
          b"# hpc-hangkit rank=-1 world=x pid=99999999999999999999 t=nan argv=[\n", b"Process 1: python\n",
          b"    f (a.py:", b'"communicators":', b'"ranks":[', b"[" * 2000, b"{\"a\":" * 500,
          b"\x80\x04\x95", b"(lp0\n", b"cos\nsystem\n", b"[ncclras]\n", b"[[x]]\n", b"a.b.c = 1\n",
          b"Traceback (most recent call last):\n", b"[rank3]: ", b"Group  0", b"Communicator"]


def _read(p):
    with open(p, "rb") as fh:
        return fh.read()


def corpus():
    """{target: [seed bytes]} from the real fixtures (tests/fixtures)."""
    ts = os.path.join(FIX, "torch_samples")
    fh = [p for p in glob.glob(os.path.join(ts, "**", "*.log"), recursive=True)]
    fh += glob.glob(os.path.join(ts, "**", "dump_traceback_rank*.txt"), recursive=True)
    sp = glob.glob(os.path.join(ts, "**", "pyspy", "*"), recursive=True)
    sp += glob.glob(os.path.join(ts, "control_gil_held", "pyspy*"))
    tb = glob.glob(os.path.join(ts, "**", "stdout*", "*"), recursive=True) + glob.glob(
        os.path.join(ts, "**", "stdout*.txt"), recursive=True)
    fr = glob.glob(os.path.join(FIX, "flight_recorder", "**", "rank_*"), recursive=True)
    fr += glob.glob(os.path.join(ts, "**", "fr_trace_json*.json"), recursive=True)
    nj = glob.glob(os.path.join(FIX, "nccl", "**", "*.json"), recursive=True)
    nt = glob.glob(os.path.join(FIX, "nccl", "*.txt"))
    c = {"faulthandler": fh, "pyspy": sp, "traceback": tb, "flightrec": fr, "ncclras_json": nj,
         "ncclras_text": nt}
    out = {k: [_read(p) for p in sorted(set(v)) if os.path.isfile(p)] for k, v in c.items()}
    out["heartbeat"] = [_read(p) for p in sorted(glob.glob(os.path.join(FIX, "heartbeat", "*.hb")))]
    out["sstat"] = [SSTAT_SEED]
    out["config_toml"] = [CONFIG_SEED]
    out["config_env"] = [("\n".join("%s=%s" % kv for kv in ENV_SEED.items())).encode()]
    big = [s for s in out["faulthandler"] if len(s) > 200000]
    out["faulthandler"] = [s for s in out["faulthandler"] if len(s) <= 200000] + [b[:200000] for b in big]
    return out


def mutate(rng, seeds, all_seeds):
    """One hostile input derived from ``seeds`` (bytes)."""
    s = rng.choice(seeds)
    op = rng.randrange(8)
    if op == 0:
        return bytes(rng.getrandbits(8) for _ in range(rng.randrange(0, 300)))
    if op == 1:
        return s[:rng.randrange(0, len(s) + 1)]
    if op == 2:
        o = rng.choice(all_seeds)
        return s[:rng.randrange(0, len(s) + 1)] + o[rng.randrange(0, len(o) + 1):]
    if op == 3:
        b = bytearray(s)
        for _ in range(rng.randrange(1, 20)):
            if b:
                b[rng.randrange(len(b))] = rng.getrandbits(8)
        return bytes(b)
    if op == 4:
        lines = s.split(b"\n")
        for _ in range(rng.randrange(1, 6)):
            if not lines:
                break
            i = rng.randrange(len(lines))
            k = rng.randrange(3)
            if k == 0:
                del lines[i]
            elif k == 1:
                lines.insert(i, lines[i])
            else:
                j = rng.randrange(len(lines))
                lines[i], lines[j] = lines[j], lines[i]
        return b"\n".join(lines)
    if op == 5:
        b = s
        for _ in range(rng.randrange(1, 6)):
            i = rng.randrange(len(b) + 1)
            b = b[:i] + rng.choice(TOKENS) + b[i:]
        return b
    if op == 6:  # replace a number with a hostile one
        import re
        nums = list(re.finditer(rb"\d+", s[:20000]))
        if not nums:
            return s + rng.choice(TOKENS)
        m = rng.choice(nums)
        return s[:m.start()] + rng.choice([b"9" * 400, b"-1", b"1e999", b"nan", b"", b"0" * 50, b"18446744073709551616"]) + s[m.end():]
    return rng.choice(TOKENS) * rng.randrange(1, 50) + s[:rng.randrange(0, 2000)]


class Targets:
    """The parsers, the exception each documents, and a stdlib anchor for the ratio."""

    def __init__(self, tmpdir):
        from hpc_hangkit import config
        from hpc_hangkit import slurmjob as slurm
        from hpc_hangkit.parse import faulthandler, flightrec, heartbeat, ncclras, pyspy
        from hpc_hangkit.parse import traceback as tbmod

        self.tmp = tmpdir
        self.cfg_path = os.path.join(tmpdir, "config.toml")
        self.hb_path = os.path.join(tmpdir, "rank_0.pid1.hb")
        self.config = config
        self.heartbeat = heartbeat
        self.table = {
            "faulthandler": (lambda d: faulthandler.parse_faulthandler(d, "fuzz.log"), ()),
            "pyspy": (lambda d: pyspy.parse_pyspy(d, "fuzz.txt"), ()),
            "traceback": (lambda d: tbmod.parse_tracebacks(d, "fuzz.txt"), ()),
            "flightrec": (lambda d: flightrec.parse_flightrec(d, "rank_0"), (flightrec.FRParseError,)),
            "ncclras_json": (lambda d: ncclras.parse_ncclras_json(d, "fuzz.json"), (ncclras.RasParseError,)),
            "ncclras_text": (lambda d: ncclras.parse_ncclras_text(d, "fuzz.txt"), ()),
            "sstat": (lambda d: slurm.parse_sstat(d.decode("utf-8", "replace")), ()),
            "config_toml": (self._toml, (config.ConfigError,)),
            "config_env": (self._env, (config.ConfigError,)),
            "heartbeat": (self._hb, ()),
        }
        #: targets that document a memory bound: bytes they may allocate for an input of n bytes
        self.memory_bound = {"flightrec": lambda n: flightrec.MAX_EXPANSION * n + (64 << 10)}

    def _hb(self, d):
        """A fresh file each input (the reader maps files of its own user); timeout 0: a torn
        (odd) sequence number is reported after one read instead of retried for 1 s."""
        tmp = self.hb_path + ".tmp"
        with open(tmp, "wb") as fh:
            fh.write(d)
        os.replace(tmp, self.hb_path)
        hb = self.heartbeat.read_heartbeat(self.hb_path, timeout_s=0)
        if hb is not None:
            assert isinstance(hb, self.heartbeat.Heartbeat), hb
            hb.age_s(0.0)
        return hb

    def _toml(self, d):
        with open(self.cfg_path, "wb") as fh:
            fh.write(d)
        return self.config.load_settings(env={}, path=self.cfg_path)

    def _env(self, d):
        env = {}
        for line in d.decode("utf-8", "replace").split("\n"):
            k, _, v = line.partition("=")
            if k and "\x00" not in k + v:
                env[k] = v
        return self.config.load_settings(env=env, path=os.devnull if False else None) if False else \
            self.config.load_settings(env=dict(env, HPC_HANGKIT_CONFIG=""), path=None)

    @staticmethod
    def anchor(name, d):
        """The stdlib decoder alone: what parsing the same bytes costs at the floor."""
        try:
            if name in ("flightrec", "ncclras_json"):
                json.loads(d.decode("utf-8", "replace"))
            elif name == "config_toml":
                import tomllib
                tomllib.loads(d.decode("utf-8", "replace"))
            else:
                d.decode("utf-8", "replace").splitlines()
        except Exception:
            pass


def _peak_alloc(fn, allowed, d):
    """Peak bytes traced (tracemalloc) while ``fn(d)`` runs; its outcome is already counted."""
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            fn(d)
        except allowed:
            pass
        except Exception:  # noqa: BLE001 -- counted by the timed call
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def run(n, seed=1, crash_dir=None, out=sys.stdout, time_budget_s=None):
    """Fuzz ``n`` inputs spread over the targets; return {target: [crash dicts]}."""
    import faulthandler as fhmod
    import warnings

    fhmod.enable()
    warnings.simplefilter("ignore")
    rng = random.Random(seed)
    seeds = corpus()
    all_seeds = [s for v in seeds.values() for s in v]
    tmp = tempfile.mkdtemp(prefix="hk_fuzz_")
    tg = Targets(tmp)
    names = list(tg.table)
    per = max(1, n // len(names))
    crashes = {k: [] for k in names}
    t_start = time.perf_counter()
    import resource

    print("%-13s %8s %8s %8s %10s %10s %7s %9s" % ("target", "inputs", "expected", "crashes", "us/input",
                                                    "anchor us", "ratio", "RSS MiB"), file=out)
    total = 0
    for name in names:
        fn, allowed = tg.table[name]
        expected = 0
        t_ours = t_anchor = 0.0
        done = 0
        for i in range(per):
            if time_budget_s and time.perf_counter() - t_start > time_budget_s:
                break
            d = mutate(rng, seeds[name], all_seeds) if i else seeds[name][0]
            t0 = time.perf_counter()
            try:
                fn(d)
            except allowed:
                expected += 1
            except RecursionError as e:
                crashes[name].append({"input": d, "error": repr(e), "tb": traceback.format_exc()})
            except Exception as e:
                crashes[name].append({"input": d, "error": repr(e), "tb": traceback.format_exc()})
            t1 = time.perf_counter()
            tg.anchor(name, d)
            t2 = time.perf_counter()
            t_ours += t1 - t0
            t_anchor += t2 - t1
            done += 1
            if name in tg.memory_bound:  # again, untimed, under tracemalloc: the documented bound holds
                peak = _peak_alloc(fn, allowed, d)
                if peak > tg.memory_bound[name](len(d)):
                    crashes[name].append({"input": d, "error": "allocated %d bytes for a %d-byte input (bound %d)"
                                          % (peak, len(d), tg.memory_bound[name](len(d))),
                                          "tb": "MemoryBound: allocated %d bytes\n(no traceback)\n" % peak})
        total += done
        print("%-13s %8d %8d %8d %10.1f %10.1f %7.1f %9.0f" % (
            name, done, expected, len(crashes[name]), 1e6 * t_ours / max(done, 1), 1e6 * t_anchor / max(done, 1),
            t_ours / t_anchor if t_anchor else float("nan"),
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0), file=out)
        out.flush()
    n_crash = sum(len(v) for v in crashes.values())
    print("total: %d inputs, %d crashes (target 0)" % (total, n_crash), file=out)
    seen = set()
    for name, lst in crashes.items():
        for c in lst:
            key = (name, c["tb"].strip().splitlines()[-1], c["tb"].strip().splitlines()[-3])
            if key in seen:
                continue
            seen.add(key)
            path = ""
            if crash_dir:
                os.makedirs(crash_dir, exist_ok=True)
                path = os.path.join(crash_dir, "%s_%d.bin" % (name, len(seen)))
                with open(path, "wb") as fh:
                    fh.write(c["input"])
            print("\nCRASH in %s: %s%s\ninput (first 300 bytes): %r\n%s" % (
                name, c["error"], " (reproducer: %s)" % path if path else "", c["input"][:300], c["tb"]), file=out)
    return crashes


def main(argv=None):
    ap = argparse.ArgumentParser(description="fuzz every hpc-hangkit parser")
    ap.add_argument("--n", type=int, default=100000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--crash-dir")
    ap.add_argument("--mem-limit-mb", type=int, default=2048,
                    help="address-space limit (RLIMIT_AS) of this process: an unbounded allocation becomes "
                         "a MemoryError crash with its reproducer (0: no limit)")
    ap.add_argument("--quick", action="store_true", help="2,000 inputs (smoke test)")
    a = ap.parse_args(argv)
    n = 2000 if a.quick else a.n
    if a.mem_limit_mb > 0:
        import resource

        lim = a.mem_limit_mb << 20
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            lim = min(lim, hard)
        if soft == resource.RLIM_INFINITY or soft > lim:
            resource.setrlimit(resource.RLIMIT_AS, (lim, hard))
    print("fuzz: %d inputs, seed %d, address-space limit %s" % (
        n, a.seed, "%d MiB" % a.mem_limit_mb if a.mem_limit_mb > 0 else "none"))
    crashes = run(n, a.seed, a.crash_dir)
    return 1 if any(crashes.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
