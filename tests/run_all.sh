#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12/13 machine (run as root):
#   installs what the tests need (apt + pip), brings up the 2-node Slurm test
#   cluster (slurm/testbed/up.sh), runs pytest, tears the cluster down.
# Extra arguments go to pytest, e.g.  bash tests/run_all.sh -k rollcall
#
#   --slurm LIST   Slurm releases the cluster tests run on, comma-separated:
#                  native (this machine's Slurm: the whole suite runs here),
#                  22.05, 24.11, 26.05 (the cluster tests, -m slurm, also run on
#                  that release, in its Debian root: slurm/testbed/inroot.sh),
#                  all = native and every other of the three; none = no
#                  cluster (pytest runs what it is given, e.g. -m "not slurm").
#                  Default: native.
#
# Python: $PYTHON if set (used as it is); else a virtual environment at $HK_VENV
# (default /opt/hpc-hangkit-test, made from python3 by tools/venv.sh, installing
# python3-venv if missing) where everything is installed: the tests run in what a
# user's `pip install -e '.[test]'` gives, and `pip check` holds there (packages
# installed into the system interpreter by others cannot break it).
set -euo pipefail
# closed stdin: as in slurm/testbed/up.sh, for pytest and the sruns its tests start
[ -e /proc/$$/fd/0 ] || exec </dev/null
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
RELEASES=native
if [ "${1:-}" = --slurm ]; then
  [ $# -ge 2 ] || { echo "run_all.sh: --slurm needs a list (native,22.05,24.11,26.05 or all)" >&2; exit 2; }
  RELEASES=$2; shift 2
fi
PY=${PYTHON:-}
if [ -z "$PY" ]; then
  HK_VENV=${HK_VENV:-/opt/hpc-hangkit-test}
  sh tools/venv.sh "$HK_VENV"
  PY=$HK_VENV/bin/python
  export VIRTUAL_ENV=$HK_VENV PATH=$HK_VENV/bin:$PATH   # activated, as a user's: py-spy, hpc-hangkit on PATH
fi

step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

step "apt packages"
APT_PKGS="gcc make procps util-linux iproute2 munge slurmctld slurmd slurm-client libslurm-dev chromium"
if command -v apt-get >/dev/null; then
  missing=$(for p in $APT_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || echo "$p"; done)
  if [ -n "$missing" ]; then
    # policy-rc.d: keep package scripts from starting daemons; the testbed starts its own
    if [ ! -e /usr/sbin/policy-rc.d ]; then printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; fi
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $missing >/dev/null
  fi
fi

step "pip packages"
"$PY" -m pip install -q torch==2.13.0        # CPU wheel (unpinned torch would pull a CUDA build)
"$PY" -m pip install -q -e '.[test]'
"$PY" -m pip check

NATIVE=$(slurmd -V 2>/dev/null | awk '{print $NF}' | cut -d. -f1,2 || true)
case ",$RELEASES," in *,all,*) RELEASES="native,22.05,24.11,26.05" ;; esac
OTHERS=$(echo "$RELEASES" | tr ',' '\n' | grep -v -x -e native -e none -e "$NATIVE" | sort -u | tr '\n' ' ' || true)
SUMMARY=()
pytest_summary() { # label logfile: keep pytest's last line
  SUMMARY+=("$1: $(grep -E '(passed|failed|error)' "$2" | tail -n1)")
}

rc=0
if [ "$RELEASES" = none ]; then
  step "pytest (no Slurm cluster)"
  "$PY" -m pytest -q -p no:cacheprovider -o addopts="" "$@" || rc=1
  OTHERS=""
elif echo ",$RELEASES," | grep -q -e ",native," -e ",$NATIVE,"; then
  if [ -f slurm/testbed/up.sh ]; then
    step "2-node Slurm test cluster (Slurm $NATIVE, native)"
    trap 'bash slurm/testbed/down.sh >/dev/null 2>&1 || true' EXIT
    HK_PYTHON="$PY" bash slurm/testbed/up.sh
  fi
  step "pytest"
  log=$(mktemp)
  "$PY" -m pytest -q -p no:cacheprovider -o addopts="" "$@" 2>&1 | tee "$log" || rc=1
  pytest_summary "Slurm $NATIVE (native), whole suite" "$log"
  rm -f "$log"
  bash slurm/testbed/down.sh >/dev/null 2>&1 || true
fi
# the interpreter by its real path: that is the path bind-mounted into the roots
[ -z "$OTHERS" ] || PY=$("$PY" -c 'import sys; print(sys.executable)')
for rel in $OTHERS; do
  step "cluster tests on Slurm $rel (Debian root)"
  if ! HK_SLURM=$rel HK_PYTHON="$PY" bash slurm/testbed/up.sh; then
    SUMMARY+=("Slurm $rel: cluster did not come up"); rc=1; continue
  fi
  log=$(mktemp)
  HK_SLURM=$rel bash slurm/testbed/inroot.sh "$rel" "$PY" -m pytest -q -p no:cacheprovider -o addopts="" \
    -m slurm tests/slurm "$@" 2>&1 | tee "$log" || rc=1
  pytest_summary "Slurm $rel (Debian root), cluster tests" "$log"
  rm -f "$log"
  HK_SLURM=$rel bash slurm/testbed/down.sh >/dev/null 2>&1 || true
done
step "summary"
[ ${#SUMMARY[@]} -eq 0 ] || printf '%s\n' "${SUMMARY[@]}"
exit $rc
