"""hpc-hangkit settings: one object, layered, validated eagerly.

Layers (later wins)::

    built-in defaults  <  site TOML file  <  HANGKIT_* environment  <  overrides (CLI flags)

The TOML file is ``$HPC_HANGKIT_CONFIG`` if set (it must exist), else
``/etc/hpc-hangkit/config.toml`` if it exists.  Keys are flat
(``poll_interval_s = 15``) plus the tables ``[ncclras] path/address/timeout_s``
and ``[pyspy] path``.  Environment variables are ``HANGKIT_<SETTING>``
upper-cased (``HANGKIT_POLL_INTERVAL_S``, ``HANGKIT_NCCLRAS_TIMEOUT_S``).

Every value is checked when loaded; a bad one raises :class:`ConfigError`
naming the setting, the value and its source (``/etc/hpc-hangkit/config.toml
line 4``, ``env HANGKIT_POLL_INTERVAL_S``, ``command line``).
:meth:`Settings.to_env` is the only producer of the job environment.
Reference: docs/config.md.
"""
import dataclasses
import difflib
import math
import os
import re
from typing import Any, Dict, Mapping, Optional, Tuple

from hpc_hangkit import layout
from hpc_hangkit.boot import _hangkit_names as _rank_names

__all__ = ["ConfigError", "Settings", "load_settings", "SETTINGS", "boot_dir"]


class ConfigError(ValueError):
    """An invalid setting: the message names the setting, the value and its source."""

    def __init__(self, message, setting=None, value=None, source=None):
        ValueError.__init__(self, message)
        self.setting = setting
        self.value = value
        self.source = source


# --- value parsers: (raw, from_text) -> value; raise ValueError(why) ----------------

_TRUE = _rank_names.TRUE_WORDS
_FALSE = ("0", "false", "no", "off")


def _number(raw, text, integer=False):
    if isinstance(raw, bool):
        raise ValueError("expected a number, got a boolean")
    if text:
        s = str(raw).strip()
        try:
            v = int(s) if integer else float(s)
        except ValueError:
            raise ValueError("expected %s" % ("an integer" if integer else "a number"))
    elif integer:
        if not isinstance(raw, int):
            raise ValueError("expected an integer")
        v = raw
    else:
        if not isinstance(raw, (int, float)):
            raise ValueError("expected a number")
        v = float(raw) if abs(raw) < 1e308 else float("inf")  # huge TOML ints: "finite" check below
    if not integer and not math.isfinite(v):
        raise ValueError("expected a finite number")
    return v


def _positive_seconds(raw, text):
    v = _number(raw, text)
    if v <= 0:
        raise ValueError("must be > 0 seconds")
    return v


def _seconds_between(lo, hi):
    def parse(raw, text):
        v = _number(raw, text)
        if not lo <= v <= hi:
            raise ValueError("must be between %g and %g seconds" % (lo, hi))
        return v

    return parse


#: the setting epilog_budget_s: its default and its range (seconds); slurm/epilog, which
#: cannot import hpc_hangkit, holds a copy (tests/collect/test_collect_epilog.py compares)
EPILOG_BUDGET_DEFAULT_S = 60.0
EPILOG_BUDGET_RANGE_S = (5.0, 3600.0)


def epilog_budget_s(raw) -> float:
    """Seconds of the setting ``epilog_budget_s`` given as ``raw`` (environment text or a
    TOML number): the value if it is a number in :data:`EPILOG_BUDGET_RANGE_S`, else (None,
    empty, not a number, out of range) :data:`EPILOG_BUDGET_DEFAULT_S`. Never raises; for
    when the site config cannot be loaded (:func:`load_settings` reports that error)."""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return EPILOG_BUDGET_DEFAULT_S
    try:
        return float(_seconds_between(*EPILOG_BUDGET_RANGE_S)(raw, isinstance(raw, str)))
    except ValueError:
        return EPILOG_BUDGET_DEFAULT_S


def _count(minimum):
    def parse(raw, text):
        v = _number(raw, text, integer=True)
        if v < minimum:
            raise ValueError("must be >= %d" % minimum)
        return v

    return parse


def _string(raw, text):
    if not isinstance(raw, str):
        raise ValueError("expected a string")
    s = raw.strip()
    if not s:
        raise ValueError("must not be empty")
    return s


def _optional_string(parse):
    def p(raw, text):
        if raw is None or (isinstance(raw, str) and raw.strip() == ""):
            return None
        return parse(raw, text)

    return p


def _bool(raw, text):
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, str):
        s = raw.strip().lower()
        if s in _TRUE:
            return True
        if s in _FALSE:
            return False
    raise ValueError("expected true or false (1/0, yes/no, on/off)")


def _mode(raw, text):
    s = _string(raw, text).lower()
    if s not in ("off", "observe", "fail"):
        raise ValueError("must be one of off, observe, fail")
    return s


#: ``native_stacks`` values: where ``py-spy dump --native`` runs at capture
NATIVE_STACKS = ("auto", "all", "none")


def _native_stacks(raw, text):
    s = _string(raw, text).lower()
    if s not in NATIVE_STACKS:
        raise ValueError("must be one of %s" % ", ".join(NATIVE_STACKS))
    return s


def _signal(raw, text):
    from hpc_hangkit.boot import _hangkit_core

    s = _string(raw, text)
    try:
        num = _hangkit_core.signal_number(s)
    except ValueError as e:
        raise ValueError(str(e))
    return _hangkit_core.signal_name(num)


def _abs_path(raw, text):
    s = _string(raw, text)
    if not os.path.isabs(s):
        raise ValueError("must be an absolute path")
    if "\0" in s or "\n" in s:
        raise ValueError("must not contain NUL or newline")
    return os.path.normpath(s)


def _command(raw, text):
    s = _string(raw, text)
    if "\0" in s or "\n" in s:
        raise ValueError("must not contain NUL or newline")
    return s


def _storage_url(raw, text):
    s = _string(raw, text)
    if "\n" in s or "\0" in s:
        raise ValueError("must not contain NUL or newline")
    protocols = []
    for part in s.split("::"):
        m = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*)://", part)
        if m:
            protocols.append(m.group(1).lower())
        elif not part.startswith("/"):
            raise ValueError("must be an absolute path or an fsspec URL such as s3://bucket/prefix")
        else:
            protocols.append("file")
    from fsspec.registry import known_implementations, registry  # light: no backend imported

    for proto in protocols:
        if proto not in known_implementations and proto not in registry:
            close = difflib.get_close_matches(proto, list(known_implementations), 1)
            raise ValueError("unknown fsspec protocol %r%s" % (proto, " (did you mean %r?)" % close[0] if close else ""))
    return s


def _host_port(raw, text):
    s = _string(raw, text)
    host, sep, port = s.rpartition(":")
    if not sep or not host:
        raise ValueError("expected host:port")
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("port must be 1-65535")
    return s


def port_range(text: Optional[str]) -> Optional[Tuple[int, int]]:
    """``"28100-28999"`` -> ``(28100, 28999)``; None, ``""`` or ``"off"`` -> None (no
    per-job RAS address). Raises ValueError unless ``LO-HI`` with 1024 <= LO <= HI <= 65535
    (a port below 1024 needs root, and NCCL binds as the job's user). Pure."""
    if text is None or str(text).strip().lower() in ("", "off"):
        return None
    m = re.match(r"^\s*(\d+)\s*-\s*(\d+)\s*$", str(text))
    if not m:
        raise ValueError("expected LO-HI (e.g. 28100-28999) or off")
    lo, hi = int(m.group(1)), int(m.group(2))
    if not 1024 <= lo <= hi <= 65535:
        raise ValueError("ports must satisfy 1024 <= LO <= HI <= 65535")
    return lo, hi


def _port_range(raw, text):
    s = _string(raw, text)
    r = port_range(s)
    return "off" if r is None else "%d-%d" % r


@dataclasses.dataclass(frozen=True)
class _Spec:
    name: str
    default: Any
    parse: Any
    doc: str
    toml: Optional[tuple] = None  # (table, key) for keys that live in a table


#: every setting, in documentation order
SETTINGS = (
    _Spec("mode", "observe", _mode, "off | observe | fail: off arms nothing; observe logs and captures; fail also requeues"),
    _Spec("poll_interval_s", 15.0, _positive_seconds, "seconds between monitor polls"),
    _Spec("confirm_duration_s", 600.0, _positive_seconds,
          "wall-clock seconds stalled before a hang is confirmed (whatever a poll costs); must be > poll_interval_s"),
    _Spec("together_confirm_s", None, _optional_string(_positive_seconds),
          "seconds every rank must sit in the same distributed call with nothing moving before a TOGETHER "
          "hang is confirmed (unset: 2 x confirm_duration_s); must be > poll_interval_s"),
    _Spec("suspect_after_s", 60.0, _positive_seconds, "seconds stalled before the first 'suspected' warning"),
    _Spec("report_every_s", 120.0, _positive_seconds, "seconds between 'still suspected' reports"),
    _Spec("watchdog_period_s", _rank_names.DEFAULT_PERIOD_S, _positive_seconds,
          "seconds without checkpoint() before a rank's stack is dumped, and between repeated dumps"),
    _Spec("watchdog_signal", _rank_names.DEFAULT_SIGNAL, _signal, "signal for stall and on-demand dumps"),
    _Spec("scratch_dir", layout.DEFAULT_SCRATCH_DIR, _abs_path, "node-local scratch root (absolute path)"),
    _Spec("storage_url", None, _optional_string(_storage_url), "fsspec URL or absolute path where dumps are collected"),
    _Spec("max_hang_requeues", 1, _count(0), "hang requeues allowed per job in fail mode"),
    _Spec("epilog_budget_s", EPILOG_BUDGET_DEFAULT_S, _seconds_between(*EPILOG_BUDGET_RANGE_S),
          "seconds the Slurm epilog (the collector) may take in all; keep it + 2 s below slurm.conf PrologEpilogTimeout (EpilogTimeout from Slurm 25.05)"),
    _Spec("flight_recorder_buffer", 2000, _count(0), "PyTorch Flight Recorder entries per rank (0 = off)"),
    _Spec("ncclras_path", "ncclras", _command, "ncclras command", ("ncclras", "path")),
    _Spec("ncclras_address", None, _optional_string(_host_port), "NCCL RAS host:port (unset: NCCL's default)",
          ("ncclras", "address")),
    _Spec("ncclras_port_range", "28100-28999", _port_range,
          "ports the Slurm prolog picks each job's own NCCL_RAS_ADDR from (off: NCCL's default for all)",
          ("ncclras", "port_range")),
    _Spec("ncclras_timeout_s", 10.0, _positive_seconds, "seconds before an ncclras query is abandoned",
          ("ncclras", "timeout_s")),
    _Spec("pyspy_path", "py-spy", _command, "py-spy command", ("pyspy", "path")),
    _Spec("native_stacks", "auto", _native_stacks,
          "auto | all | none: which ranks get py-spy --native at capture (auto: suspects, one per "
          "waiting group, ranks in a call the roll call cannot name; every rank gets its Python stack)",
          ("pyspy", "native")),
    _Spec("auto_checkin", True, _bool, "hook torch.distributed collectives to call checkpoint() automatically "
          "(on by default; off per job with HANGKIT_AUTO_CHECKIN=0, per site with auto_checkin = false)"),
    _Spec("stack_samples", 5, _count(1), "K: a rank's position is its modal position over its last K dumps"),
)
_BY_NAME = {s.name: s for s in SETTINGS}
_BY_TABLE = {s.toml: s for s in SETTINGS if s.toml}
_TABLES = sorted({s.toml[0] for s in SETTINGS if s.toml})


#: settings whose variable is not HANGKIT_<NAME>: HANGKIT_SCRATCH_DIR is the job
#: attempt's own directory (docs/internals.md), not the node-wide root
_ENV_NAMES = {"scratch_dir": layout.ENV_SCRATCH_ROOT}
_ENV_TO_SETTING = {v: k for k, v in _ENV_NAMES.items()}


def env_name(setting):
    """``HANGKIT_<SETTING>`` for a setting name (``scratch_dir``: HANGKIT_SCRATCH_ROOT)."""
    return _ENV_NAMES.get(setting) or layout.ENV_PREFIX + setting.upper()


def boot_dir():
    """Absolute path of ``hpc_hangkit/boot`` (goes first on the job's PYTHONPATH)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), layout.BOOT_DIR_NAME)


@dataclasses.dataclass(frozen=True)
class Settings:
    """All hpc-hangkit settings (see docs/config.md); build with :func:`load_settings`.

    Times are in seconds (float).  ``sources`` maps each setting to where its
    value came from ("default", "<file> line <n>", "env HANGKIT_X", "command line").
    """

    mode: str
    poll_interval_s: float
    confirm_duration_s: float
    together_confirm_s: Optional[float]
    suspect_after_s: float
    report_every_s: float
    watchdog_period_s: float
    watchdog_signal: str
    scratch_dir: str
    storage_url: Optional[str]
    max_hang_requeues: int
    epilog_budget_s: float
    flight_recorder_buffer: int
    ncclras_path: str
    ncclras_address: Optional[str]
    ncclras_port_range: str
    ncclras_timeout_s: float
    pyspy_path: str
    native_stacks: str
    auto_checkin: bool
    stack_samples: int
    sources: Dict[str, str] = dataclasses.field(default_factory=dict, compare=False, repr=False)
    config_path: Optional[str] = dataclasses.field(default=None, compare=False, repr=False)

    @classmethod
    def defaults(cls) -> "Settings":
        """The built-in defaults only (no file, no environment)."""
        return cls(sources={s.name: "default" for s in SETTINGS}, **{s.name: s.default for s in SETTINGS})

    @property
    def confirm_polls(self) -> int:
        """Polls in the confirm window when polls run on time: ceil(confirm_duration_s /
        poll_interval_s). Informational (history sizes, logs): the detector's window is time."""
        return max(1, int(math.ceil(self.confirm_duration_s / self.poll_interval_s - 1e-9)))

    @property
    def effective_confirm_s(self) -> float:
        """Seconds from the stall to its confirmation when polls run on time:
        confirm_polls * poll_interval_s (see :class:`hpc_hangkit.detect.detector.Detector`)."""
        return self.confirm_polls * self.poll_interval_s

    def as_dict(self) -> Dict[str, Any]:
        """Setting name -> value (no sources)."""
        return {s.name: getattr(self, s.name) for s in SETTINGS}

    @property
    def effective_together_confirm_s(self) -> float:
        """Seconds before a TOGETHER hang is confirmed: ``together_confirm_s``, or 2 x
        ``confirm_duration_s`` when unset."""
        return self.together_confirm_s if self.together_confirm_s is not None else 2 * self.confirm_duration_s

    def to_env(self, job_scratch: str, base_env: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        """The full environment of a job's processes (the ONLY producer of it).

        job_scratch: the per-job, per-attempt node-local directory
        (``layout.job_scratch_dir``), exported as HANGKIT_SCRATCH_DIR.
        base_env: environment to start from (default os.environ; copied, not
        modified).  Sets HANGKIT_MODE and every setting as HANGKIT_<NAME>
        (unset ones removed), prepends ``hpc_hangkit/boot`` to PYTHONPATH and
        sets TORCH_FR_BUFFER_SIZE.  Mode off: HANGKIT_MODE=off and no arming
        variables (boot dir removed from PYTHONPATH).  Always drops
        HANGKIT_ARMED_PID (it belongs to one process).
        Raises ConfigError if job_scratch is not an absolute path.
        """
        env = dict(os.environ if base_env is None else base_env)
        env.pop(layout.ENV_ARMED_PID, None)
        bdir = boot_dir()
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.normpath(p) != bdir]
        if self.mode == "off":
            for s in SETTINGS:
                env.pop(env_name(s.name), None)
            env[layout.ENV_MODE] = "off"
            env.pop(layout.ENV_SCRATCH_DIR, None)
            if parts:
                env["PYTHONPATH"] = os.pathsep.join(parts)
            else:
                env.pop("PYTHONPATH", None)
            return env
        if not isinstance(job_scratch, str) or not os.path.isabs(job_scratch):
            raise ConfigError("job scratch directory %r must be an absolute path" % (job_scratch,),
                              "scratch_dir", job_scratch, "to_env")
        for s in SETTINGS:
            v = getattr(self, s.name)
            key = env_name(s.name)
            if v is None:
                env.pop(key, None)
            elif isinstance(v, bool):
                env[key] = "1" if v else "0"
            else:
                env[key] = str(v)
        env[layout.ENV_SCRATCH_DIR] = os.path.normpath(job_scratch)
        env["PYTHONPATH"] = os.pathsep.join([bdir] + parts)
        env[layout.TORCH_FR_BUFFER_ENV] = str(self.flight_recorder_buffer)
        return env


# --- TOML ---------------------------------------------------------------------------

def _toml_loads(text):
    try:
        import tomllib  # Python >= 3.11
    except ImportError:  # pragma: no cover - Python < 3.11
        import tomli as tomllib
    return tomllib.loads(text), tomllib.TOMLDecodeError


def _key_line(text, table, key):
    """1-based line of ``key = ...`` inside ``[table]`` (None: top level), or None."""
    current = None
    pat = re.compile(r"""^\s*(?:"%s"|'%s'|%s)\s*=""" % ((re.escape(key),) * 3))
    dotted = re.compile(r"""^\s*%s\s*\.\s*%s\s*=""" % (re.escape(table or ""), re.escape(key))) if table else None
    for n, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*\[\s*([^\]\[]+?)\s*\]", line)
        if m:
            current = m.group(1).strip().strip("\"'")
            continue
        if current == table and pat.match(line):
            return n
        if dotted is not None and current is None and dotted.match(line):
            return n
    return None


def _did_you_mean(word, candidates):
    close = difflib.get_close_matches(word, candidates, 1, 0.6)
    return " (did you mean %r?)" % close[0] if close else ""


def _read_toml(path):
    """{setting: (raw value, source)} from a TOML file."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ConfigError("cannot read config file %s: %s" % (path, e.strerror or e), None, None, path)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError("config file %s is not UTF-8 (byte offset %d)" % (path, e.start), None, None, path)
    try:
        doc = _toml_loads(text)[0]
    except Exception as e:  # tomllib.TOMLDecodeError names line and column
        raise ConfigError("config file %s is not valid TOML: %s" % (path, e), None, None, path)
    out = {}

    def src(table, key):
        n = _key_line(text, table, key)
        return "%s line %d" % (path, n) if n else path

    flat_names = [s.name for s in SETTINGS]
    for key, value in doc.items():
        if key in _TABLES and isinstance(value, dict):
            table_keys = [k for (t, k) in _BY_TABLE if t == key]
            for sub, v in value.items():
                spec = _BY_TABLE.get((key, sub))
                if spec is None:
                    raise ConfigError("%s: unknown key %r in [%s]%s (known: %s)" % (
                        src(key, sub), sub, key, _did_you_mean(sub, table_keys), ", ".join(table_keys)),
                        "%s.%s" % (key, sub), v, src(key, sub))
                if spec.name in out:
                    raise ConfigError("%s: %s is set twice (as %s and [%s] %s)" % (
                        src(key, sub), spec.name, spec.name, key, sub), spec.name, v, src(key, sub))
                out[spec.name] = (v, src(key, sub))
            continue
        if isinstance(value, dict):
            raise ConfigError("%s: unknown table [%s]%s (known tables: %s)" % (
                src(None, key), key, _did_you_mean(key, _TABLES), ", ".join(_TABLES)), key, value, path)
        if key not in _BY_NAME:
            raise ConfigError("%s: unknown setting %r%s" % (
                src(None, key), key, _did_you_mean(key, flat_names + _TABLES)), key, value, src(None, key))
        if key in out:
            raise ConfigError("%s: %s is set twice" % (src(None, key), key), key, value, src(None, key))
        out[key] = (value, src(None, key))
    return out


def _config_path(env, path):
    if path is not None:
        return path
    p = env.get(layout.CONFIG_PATH_ENV)
    if p:
        if not os.path.exists(p):
            raise ConfigError("config file %s (from env %s) does not exist" % (p, layout.CONFIG_PATH_ENV),
                              None, p, "env " + layout.CONFIG_PATH_ENV)
        return p
    return layout.SITE_CONFIG_PATH if os.path.exists(layout.SITE_CONFIG_PATH) else None


def load_settings(env: Optional[Mapping[str, str]] = None, path: Optional[str] = None,
                  overrides: Optional[Mapping[str, Any]] = None) -> Settings:
    """Build the Settings: defaults < TOML file < HANGKIT_* env < overrides.

    env: environment to read (default os.environ).  path: TOML file (default
    $HPC_HANGKIT_CONFIG, which must exist, else /etc/hpc-hangkit/config.toml
    if it exists).  overrides: {setting: value} from command-line flags (a
    str is parsed like an environment value; None means "not given").
    Raises ConfigError (a ValueError) naming setting, value and source for
    any invalid value, unknown TOML key, misspelled HANGKIT_* variable, or
    confirm_duration_s <= poll_interval_s.
    """
    env = os.environ if env is None else env
    layers = []  # (setting, raw, source, from_text)
    cfg = _config_path(env, path)
    if cfg is not None:
        for name, (raw, source) in _read_toml(cfg).items():
            layers.append((name, raw, source, False))
    names = [s.name for s in SETTINGS]
    for key in sorted(env):
        if not key.startswith(layout.ENV_PREFIX) or key in layout.INTERNAL_ENV:
            continue
        if key == layout.ENV_SCRATCH_DIR:  # the job attempt's own directory, not a setting,
            try:                           # but still never a relative or NUL/newline path
                _abs_path(env[key], env[key])
            except ValueError as e:
                raise ConfigError("env %s: %r %s" % (key, env[key], e), key, env[key], "env " + key)
            continue
        if key in _ENV_TO_SETTING:
            layers.append((_ENV_TO_SETTING[key], env[key], "env " + key, True))
            continue
        name = key[len(layout.ENV_PREFIX):].lower()
        if name in _BY_NAME and name not in _ENV_NAMES:
            layers.append((name, env[key], "env " + key, True))
            continue
        close = difflib.get_close_matches(name, names, 1, 0.75)
        if close:  # a typo of a real setting would silently do nothing
            raise ConfigError("env %s=%r: unknown setting (did you mean %s?)" % (key, env[key], env_name(close[0])),
                              name, env[key], "env " + key)
        # other HANGKIT_* variables belong to other components: ignored
    for name, raw in (overrides or {}).items():
        if raw is None:
            continue
        if name not in _BY_NAME:
            raise ConfigError("command line: unknown setting %r%s" % (name, _did_you_mean(name, names)),
                              name, raw, "command line")
        layers.append((name, raw, "command line", isinstance(raw, str)))

    values = {s.name: s.default for s in SETTINGS}
    sources = {s.name: "default" for s in SETTINGS}
    for name, raw, source, text in layers:
        spec = _BY_NAME[name]
        try:
            values[name] = spec.parse(raw, text)
        except ValueError as e:
            raise ConfigError("%s: %s = %r is invalid: %s" % (source, name, raw, e), name, raw, source)
        sources[name] = source
    if not values["confirm_duration_s"] > values["poll_interval_s"]:
        src = sources["confirm_duration_s"] if sources["confirm_duration_s"] != "default" else sources["poll_interval_s"]
        raise ConfigError("%s: confirm_duration_s (%r, from %s) must be > poll_interval_s (%r, from %s)" % (
            src, values["confirm_duration_s"], sources["confirm_duration_s"], values["poll_interval_s"],
            sources["poll_interval_s"]), "confirm_duration_s", values["confirm_duration_s"], src)
    tc = values["together_confirm_s"]
    if tc is not None and not tc > values["poll_interval_s"]:
        src = sources["together_confirm_s"]
        raise ConfigError("%s: together_confirm_s (%r) must be > poll_interval_s (%r, from %s)" % (
            src, tc, values["poll_interval_s"], sources["poll_interval_s"]), "together_confirm_s", tc, src)
    return Settings(sources=sources, config_path=cfg, **values)
