#!/usr/bin/env bash
# tests/fresh_debian.sh SUITE [PYTEST ARGS...] - the README's two commands, run as a new
# user would, in a fresh Debian SUITE (bookworm = 12, trixie = 13) that has nothing but
# its system python3: (1) the demo, which must print its roll call naming rank 1;
# (2) `bash tests/run_all.sh --slurm none PYTEST ARGS` (its apt and pip install steps,
# then the unit tests given; default: -m "not slurm" tests/parse tests/arm/test_config.py
# tests/slurm/test_rasport.py). The cluster tests are the host's (run_all.sh --slurm).
#
# The root is a copy of a pristine one cached at $HK_ROOTS/fresh-<suite> (mmdebstrap
# --variant=apt with python3 and ca-certificates only, from apt's mirror), thrown away
# afterwards. The checkout goes in as `git archive HEAD` (committed files only). This
# machine's pip configuration and local wheel directories are bind-mounted read-only,
# so torch comes from local disk (PIP_* variables pass through). Run as root.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/.." && pwd)
[ "$(id -u)" = 0 ] || { echo "fresh_debian.sh: must run as root" >&2; exit 1; }
SUITE=${1:?usage: tests/fresh_debian.sh bookworm|trixie [PYTEST ARGS...]}; shift
[ $# -gt 0 ] || set -- -m "not slurm" tests/parse tests/arm/test_config.py tests/slurm/test_rasport.py
ROOTS=${HK_ROOTS:-/var/cache/hpc-hangkit/roots}
PRISTINE=$ROOTS/fresh-$SUITE
log() { printf '[fresh %s %s] %s\n' "$SUITE" "$(date -u +%H:%M:%S)" "$*" >&2; }

if [ ! -x "$PRISTINE/usr/bin/python3" ]; then
	MIRROR=${HK_MIRROR:-$(bash "$REPO/slurm/testbed/inroot.sh" --mirror)}
	log "building the pristine root $PRISTINE from $MIRROR"
	rm -rf "$PRISTINE.tmp"
	mmdebstrap --variant=apt --include=python3,ca-certificates "$SUITE" "$PRISTINE.tmp" "$MIRROR" >&2
	mv "$PRISTINE.tmp" "$PRISTINE"
fi
WORK=$(mktemp -d /var/tmp/hk-fresh-"$SUITE".XXXXXX)
trap 'rm -rf --one-file-system "$WORK"' EXIT
R=$WORK/root
# the new user inside the fresh root is its root user: their home there, not this machine's
UHOME=/root
cp -a "$PRISTINE" "$R"
mkdir -p "$R$UHOME/hpc-hangkit"
git -C "$REPO" archive HEAD | tar -x -C "$R$UHOME/hpc-hangkit"
cp -L /etc/resolv.conf "$R/etc/resolv.conf" 2>/dev/null || true
# what the Debian installer writes: the machine's name on 127.0.1.1 (mmdebstrap writes no
# /etc/hosts for bookworm, and one without the name for trixie; torchrun resolves it)
[ -e "$R/etc/hosts" ] || printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$R/etc/hosts"
grep -qw "$(uname -n)" "$R/etc/hosts" || printf '127.0.1.1\t%s\n' "$(uname -n)" >> "$R/etc/hosts"

# the machine's pip set-up, as pip itself reports it (`pip config debug`): the config
# files that exist, and every local path their values or PIP_* variables name (a
# file:// index ".../simple" links to "../files": bind its parent; the CA bundle, wheels)
PIPINFO=$(python3 -m pip config debug 2>/dev/null || true)
BINDS=""
# (a value may hold several paths: PIP_FIND_LINKS='/a /b', extra-index-url: file:///x file:///y)
for d in $(printf '%s\n' "$PIPINFO" | sed -n 's/^ *\(\/[^,]*\), exists: True$/\1/p') \
	$(printf '%s\n' "$PIPINFO" | sed -n "s|^ *[A-Za-z_.-]*[:=] *'\{0,1\}\([^']*\)'\{0,1\}$|\1|p" | tr ' ' '\n' |
		sed -n 's|^\(file://\)\{0,1\}\(/.*\)|\2|p' | sed 's|/simple/*$||' | sort -u); do
	[ -e "$d" ] && case " $BINDS " in *" $d "*) ;; *) BINDS="$BINDS $d" ;; esac
done
DEMO=$(grep -m1 '^sh tools/venv.sh' "$REPO/README.md")
TEST=$(grep -m1 '^bash tests/run_all.sh' "$REPO/README.md")
ARGS=$(printf '%q ' "$@")
# what the new user types, and the checks: the demo ends with exit 3 (hang confirmed,
# --mode fail ended the job) and a roll call naming rank 1
# (the PIP_* variables pass through, quoted: a value may hold spaces)
{ env | grep '^PIP_' | while IFS='=' read -r k v; do printf 'export %s=%q\n' "$k" "$v"; done; } > "$R$UHOME/readme-commands.sh"
cat >> "$R$UHOME/readme-commands.sh" <<EOS
cd $UHOME/hpc-hangkit
echo "== 1: \$ $DEMO"
$DEMO > $UHOME/demo.out 2>&1
rc=\$?
tail -n 60 $UHOME/demo.out
echo "== demo exit \$rc"
[ \$rc = 3 ] && grep -q "rank 1" /tmp/hk-demo/hang_detector/report.txt || { echo "== demo FAILED"; exit 1; }
echo "== demo OK: hang confirmed, roll call names rank 1"
echo "== 2: \$ $TEST --slurm none $ARGS"
$TEST --slurm none $ARGS 2>&1 | tail -n 25
EOS
log "command 1: $DEMO"
log "command 2: $TEST --slurm none $ARGS"
export BINDS
set +e
unshare --mount --propagation private /bin/sh -c '
	set -e
	R=$1; shift
	mount -t proc proc "$R/proc"; mount --rbind /dev "$R/dev"
	for b in $BINDS; do
		if [ -d "$b" ]; then mkdir -p "$R$b"; else mkdir -p "$(dirname "$R$b")"; touch "$R$b"; fi
		mount --bind "$b" "$R$b"; mount -o remount,bind,ro "$R$b" 2>/dev/null || true
	done
	exec chroot "$R" "$@"
' sh "$R" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME="$UHOME" LANG=C.UTF-8 \
	bash -o pipefail "$UHOME/readme-commands.sh"
rc=$?
log "exit $rc"
exit $rc
