#!/usr/bin/env bash
# The whole test suite, from a fresh Debian 12/13 machine (run as root):
#   installs what the tests need (apt + pip), brings up the 2-node Slurm test
#   cluster (slurm/testbed/up.sh), runs pytest, tears the cluster down.
# Extra arguments go to pytest, e.g.  bash tests/run_all.sh -k rollcall
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
PY=${PYTHON:-python3}

step() { printf '\n== %s (%s)\n' "$*" "$(date -u +%H:%M:%S)"; }

step "apt packages"
APT_PKGS="gcc make procps util-linux iproute2 munge slurmctld slurmd slurm-client libslurm-dev"
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

if [ -x slurm/testbed/up.sh ] || [ -f slurm/testbed/up.sh ]; then
  step "2-node Slurm test cluster"
  trap 'bash slurm/testbed/down.sh >/dev/null 2>&1 || true' EXIT
  HK_PYTHON="$PY" bash slurm/testbed/up.sh
fi

step "pytest"
"$PY" -m pytest -q -p no:cacheprovider -o addopts="" "$@"
