#!/usr/bin/env bash
# slurm/testbed/inroot.sh RELEASE CMD [ARG...] - run CMD inside the Debian root that
# carries Slurm RELEASE (22.05: bookworm, 24.11: trixie, 26.05: sid), building the root
# first if it is missing. This is how the test cluster runs a Slurm release the
# machine does not have: `HK_SLURM=24.11 bash slurm/testbed/up.sh` re-runs itself here.
#
# The root: $HK_ROOTS/<release> (default /var/cache/hpc-hangkit/roots), made by
# mmdebstrap (apt-get installs it when missing) from the Debian mirror that apt
# uses on this machine, with Debian's own munge, slurmctld, slurmd, slurm-client,
# libslurm-dev (so the SPANK plugin is compiled against that release's spank.h),
# gcc and make, and the shared libraries a CPython build needs.
#
# CMD runs as root in a private mount namespace, chrooted into the root, where
# these host paths are bind-mounted at the same path: the checkout, the
# interpreter's prefix (HK_PYTHON, default python3 on PATH: it must not live under
# /usr, which is the root's own: a pyenv or /opt interpreter with torch and
# mpi4py), and $HK_ROOT. /proc and /dev are the host's; /run and /tmp are the
# root's own, so its munged (socket in the root's /run/munge) and daemons never
# meet the host's. The daemons CMD starts keep the namespace alive; every later
# inroot.sh call sets up the same view. The host network is shared: each
# release's cluster has its own ports (up.sh's defaults per release).
#
# Env: HK_ROOTS, HK_PYTHON, HK_ROOT (default /var/tmp/hk-slurm-<release>), HK_MIRROR
# (default: the first Debian mirror in apt's sources), HK_CTLD_PORT/HK_SLURMD_PORT
# (default 7017/7018 for 24.11, 7117/7118 for 26.05, 7217/7218 for 22.05).
# CMD starts in the checkout.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
apt_mirror() { # the first Debian archive URI of apt's sources (deb822 or one-line)
	local u
	u=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i = 2; i <= NF; i++) print $i}' |
		grep -v -- '-security' | grep '/debian/\?$' | head -n1)
	[ -n "$u" ] || u=$(awk '$1 == "deb" && $2 !~ /^\[/ {print $2} $1 == "deb" && $2 ~ /^\[/ {print $3}' \
		/etc/apt/sources.list 2>/dev/null | grep -v -- '-security' | grep '/debian/\?$' | head -n1)
	[ -n "$u" ] || { echo "inroot.sh: no Debian mirror in apt's sources; set HK_MIRROR" >&2; return 1; }
	echo "$u"
}
if [ "${1:-}" = --mirror ]; then apt_mirror; exit; fi   # (for tests/fresh_debian.sh)
[ "$(id -u)" = 0 ] || { echo "inroot.sh: must run as root" >&2; exit 1; }
[ $# -ge 2 ] || { echo "usage: inroot.sh RELEASE CMD [ARG...]" >&2; exit 2; }
REL=$1; shift
log() { printf '[inroot %s] %s\n' "$REL" "$*" >&2; }

suite_of() { # release -> Debian suite
	case "$1" in
	22.05) echo bookworm ;; 24.11) echo trixie ;; 26.05) echo sid ;;
	*) echo "inroot.sh: unknown Slurm release $1 (known: 22.05 bookworm, 24.11 trixie, 26.05 sid)" >&2
	   return 1 ;;
	esac
}
SUITE=$(suite_of "$REL")
ROOTS=${HK_ROOTS:-/var/cache/hpc-hangkit/roots}
RFS=$ROOTS/$REL
export HK_ROOT=${HK_ROOT:-/var/tmp/hk-slurm-$REL}
# each release's cluster has its own ports (the native one uses 6817..)
case "$REL" in 22.05) dp=7217 ;; 24.11) dp=7017 ;; 26.05) dp=7117 ;; esac
export HK_CTLD_PORT=${HK_CTLD_PORT:-$dp} HK_SLURMD_PORT=${HK_SLURMD_PORT:-$((dp + 1))}

PKGS=munge,slurmctld,slurmd,slurm-client,libslurm-dev,gcc,make,libc6-dev,procps,util-linux,mount,iproute2,python3
# what a CPython built elsewhere (pyenv) links against, under trixie's names
PKGS=$PKGS,libssl3t64,libffi8,zlib1g,libbz2-1.0,liblzma5,libsqlite3-0,libreadline8t64,libncursesw6,libuuid1
[ "$SUITE" = bookworm ] && PKGS=${PKGS//t64/}

if [ ! -x "$RFS/usr/sbin/slurmctld" ]; then
	command -v mmdebstrap >/dev/null || { log "apt-get install mmdebstrap";
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq mmdebstrap >/dev/null; }
	MIRROR=${HK_MIRROR:-$(apt_mirror)}
	log "building $RFS: Debian $SUITE from $MIRROR (a few minutes, once)"
	mkdir -p "$ROOTS"
	rm -rf "$RFS.tmp"
	# Check-Valid-Until off: an unstable suite served by a mirror that is a
	# snapshot carries an expired Release date (the packages are still signed)
	mmdebstrap --variant=apt --aptopt='Acquire::Check-Valid-Until "false"' --include="$PKGS" \
		"$SUITE" "$RFS.tmp" "$MIRROR" >&2
	mv "$RFS.tmp" "$RFS"
fi
have=$(chroot "$RFS" dpkg-query -W -f '${Version}' slurmd)
case "$have" in "$REL".*) ;; *) echo "inroot.sh: $RFS has Slurm $have, not $REL" >&2; exit 1 ;; esac

# mmdebstrap writes no /etc/hosts: give the root the installer's localhost lines
# and this machine's name (srun and munged look their own host up)
grep -qw localhost "$RFS/etc/hosts" 2>/dev/null ||
	printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >> "$RFS/etc/hosts"
grep -qw "$(hostname)" "$RFS/etc/hosts" || printf '127.0.1.1\t%s\n' "$(hostname)" >> "$RFS/etc/hosts"
PY=${HK_PYTHON:-${PYTHON:-python3}}
PY=$("$PY" -c 'import sys; print(sys.executable)')
PREFIXES=$("$PY" -c 'import sys; print(sys.base_prefix); print(sys.prefix)' | sort -u)
for p in $PREFIXES; do
	case "$p" in /usr|/usr/*|/) echo "inroot.sh: $PY lives in $p, which is the root's own:" \
		"use an interpreter outside /usr (pyenv, /opt) with torch and mpi4py (HK_PYTHON)" >&2; exit 1 ;; esac
done
mkdir -p "$HK_ROOT"

# bind each host path at the same path inside the root, then chroot
exec unshare --mount --propagation private /bin/sh -c '
	set -e
	R=$1; shift; n=$1; shift
	# the root is a mount point, so the nodes can make their own mounts private in it
	mount --bind "$R" "$R"
	mount -t proc proc "$R/proc"
	mount --rbind /dev "$R/dev"
	i=0
	while [ $i -lt "$n" ]; do
		mkdir -p "$R$1"; mount --bind "$1" "$R$1"; shift; i=$((i + 1))
	done
	exec chroot "$R" /bin/sh -c "cd \"\$0\" && exec \"\$@\"" "$@"
' sh "$RFS" "$(( $(echo "$PREFIXES" | wc -l) + 2 ))" $PREFIXES "$REPO" "$HK_ROOT" \
	"$REPO" env -u HK_SLURM -u HK_ETC -u SLURM_CONF HK_IN_ROOT="$REL" HK_ROOT="$HK_ROOT" HK_PYTHON="$PY" \
	HK_CTLD_PORT="$HK_CTLD_PORT" HK_SLURMD_PORT="$HK_SLURMD_PORT" "$@"
