#!/usr/bin/env bash
# By hand (not part of the test command): the conformance crate built before libibverbs-dev is
# installed picks the headers up on the next build after the install, with the real package
# installed by the real dpkg. `tests/it/rerun.rs` checks the same automatically with headers
# it copies; this runs dpkg itself, whose unpack decides the modification times (the files keep
# the package's, the directory gets the install's).
#
# The package goes into a private root (dpkg --root), not into the system: the machine's own
# headers, and every other build on it, are never touched. The crate is built in a scratch
# target directory with MLX5_CONFORMANCE_INCLUDE=ROOT/usr/include (build.rs), before and after
# the install.
#
# Usage: conformance/check-rerun-after-install.sh     (needs dpkg, apt-get download, network
#        for the .deb unless LIBIBVERBS_DEV_DEB=path/to/libibverbs-dev_*.deb is given)
set -euo pipefail
cd "$(dirname "$0")/.."

scratch="${CARGO_TARGET_DIR:-$PWD/target}/conformance-rerun-dpkg"
root="$scratch/root"
rm -rf "$root"
mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates" "$root/usr/include"
touch "$root/var/lib/dpkg/status"

deb="${LIBIBVERBS_DEV_DEB:-}"
if [ -z "$deb" ]; then
  (cd "$scratch" && apt-get download libibverbs-dev >/dev/null 2>&1) || {
    echo "apt-get download libibverbs-dev failed; give LIBIBVERBS_DEV_DEB=path" >&2
    exit 1
  }
  deb=$(ls -t "$scratch"/libibverbs-dev_*.deb | head -n 1)
fi
echo "== package: $deb"

# The cfgs the crate's build script set, from cargo's build-script-executed message.
cfgs() {
  CARGO_TARGET_DIR="$scratch" MLX5_CONFORMANCE_INCLUDE="$root/usr/include" \
    cargo build -p mlx5-conformance --lib --message-format=json 2>/dev/null |
    grep '"reason":"build-script-executed"' | grep 'mlx5-conformance' |
    sed 's/.*"cfgs":\[\([^]]*\)\].*/\1/'
}

echo "== 1. build before the install"
before=$(cfgs)
echo "   build script cfgs: [$before]"
[ "$before" = '"oracle_missing"' ] || { echo "FAILED: expected oracle_missing" >&2; exit 1; }

echo "== 2. dpkg --root installs the package"
sleep 1 # the install must be later than the build's second
dpkg --root="$root" --force-depends --force-not-root --force-script-chrootless -i "$deb" >/dev/null
stat -c '   %y %n' "$root/usr/include/infiniband" "$root/usr/include/infiniband/mlx5dv.h"

echo "== 3. build after the install"
after=$(cfgs)
echo "   build script cfgs: [$after]"
[ -z "$after" ] || { echo "FAILED: the build kept its header-missing build" >&2; exit 1; }
echo "ok: the build after the install found the headers (the directory's time changed, the files' did not)"
