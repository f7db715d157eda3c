#!/bin/sh
# tools/venv.sh DIR - make DIR a Python virtual environment (if it is not one
# already), from the system python3, and print nothing else on success.
#
# Why: Debian's python3 is "externally managed" (PEP 668): `pip install` into it
# stops with "error: externally-managed-environment". A virtual environment is
# where hpc-hangkit and torch go instead, for the README's demo (DIR of your
# choice), the test suite (tests/run_all.sh) and a site install (/opt/hpc-hangkit,
# whose wrappers Slurm calls: docs/admin.md).
#
# A fresh Debian may lack the venv module's pip (package python3-venv): as root,
# this installs it with apt-get; otherwise it says which package to install.
# Env: PYTHON (default python3) - the interpreter the environment is made from.
set -eu
[ $# -eq 1 ] || { echo "usage: tools/venv.sh DIR" >&2; exit 2; }
DIR=$1
PY=${PYTHON:-python3}
if [ -x "$DIR/bin/python" ] && "$DIR/bin/python" -m pip --version >/dev/null 2>&1; then
	exit 0
fi
command -v "$PY" >/dev/null || { echo "tools/venv.sh: no $PY on PATH (apt-get install python3)" >&2; exit 1; }
if ! "$PY" -c 'import ensurepip, venv' 2>/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "tools/venv.sh: installing python3-venv (the venv module's pip)" >&2
		DEBIAN_FRONTEND=noninteractive apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
	else
		echo "tools/venv.sh: $PY has no venv/ensurepip: apt-get install python3-venv (as root)" >&2
		exit 1
	fi
fi
"$PY" -m venv "$DIR"
"$DIR/bin/python" -m pip --version >/dev/null
