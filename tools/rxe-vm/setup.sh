#!/usr/bin/env bash
# Prepare everything the Soft-RoCE VM needs, idempotently:
#   1. Debian packages (installed with apt-get only when missing);
#   2. Debian's stock kernel package (the one linux-image-amd64 points at), fetched with
#      `apt-get download` and unpacked into the cache -- never installed, /boot and /lib/modules
#      are left alone -- plus its uncompressed vmlinux, which QEMU boots through the PVH entry;
#   3. a busybox initramfs holding the kernel modules the guest needs before its root exists.
#
# Environment:
#   RXE_VM_CACHE  cache directory (default /var/tmp/mlx5-direct-rxe-vm)
#   RXE_VM_KPKG   kernel package to use instead of linux-image-amd64's dependency
#
# Prints nothing but errors and a final "ready" line on stderr; a second run takes well under a
# second.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${RXE_VM_CACHE:-/var/tmp/mlx5-direct-rxe-vm}
log() { printf 'rxe-vm setup: %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# -- 1. packages -----------------------------------------------------------------------------
packages=(qemu-system-x86 rdma-core ibverbs-utils ibverbs-providers libibverbs-dev
          librdmacm-dev rdmacm-utils iproute2 kmod busybox-static cpio xz-utils python3)
apt_updated=false
apt_update() { $apt_updated || { apt-get update -qq; apt_updated=true; }; }
installed() { dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^ii'; }
missing=()
for p in "${packages[@]}"; do installed "$p" || missing+=("$p"); done
if ((${#missing[@]})); then
  [ "$(id -u)" = 0 ] || die "missing packages ${missing[*]}; run this script as root once"
  log "installing ${missing[*]}"
  apt_update
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# -- 2. kernel -------------------------------------------------------------------------------
mkdir -p "$cache"
if [ -n "${RXE_VM_KPKG:-}" ]; then
  kpkg=$RXE_VM_KPKG
elif [ -s "$cache/kernel.pkg" ]; then
  kpkg=$(<"$cache/kernel.pkg")
else
  apt_update
  kpkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
         sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\)$/\1/p' | head -n1)
  [ -n "$kpkg" ] || die "cannot tell which kernel package linux-image-amd64 depends on"
fi
kver=${kpkg#linux-image-}
kroot=$cache/kernel-$kver
if [ ! -s "$kroot/lib/modules/$kver/modules.dep" ]; then
  log "fetching $kpkg (unpacked into $kroot, not installed)"
  apt_update
  dl=$(mktemp -d "$cache/dl.XXXXXX")
  (cd "$dl" && apt-get download -qq "$kpkg" 2>/dev/null) || die "apt-get download $kpkg failed"
  rm -rf "$kroot"
  dpkg-deb -x "$dl"/*.deb "$kroot"
  rm -rf "$dl"
  depmod -b "$kroot" "$kver"
fi
[ -e "$kroot/boot/vmlinuz-$kver" ] || die "$kroot/boot/vmlinuz-$kver is missing"

# The bzImage carries an xz-compressed ELF; QEMU can boot that ELF directly (PVH note), which
# skips the firmware and the in-guest decompression: seconds saved on every TCG boot.
if [ ! -s "$cache/vmlinux-$kver" ]; then
  python3 - "$kroot/boot/vmlinuz-$kver" "$cache/vmlinux-$kver.part" <<'PY' || true
import lzma, sys
blob = open(sys.argv[1], "rb").read()
start = blob.find(b"\xfd7zXZ\x00")
if start < 0:
    sys.exit(1)
elf = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(blob[start:])
if elf[:4] != b"\x7fELF":
    sys.exit(1)
open(sys.argv[2], "wb").write(elf)
PY
  if [ -s "$cache/vmlinux-$kver.part" ]; then
    mv "$cache/vmlinux-$kver.part" "$cache/vmlinux-$kver"
  else
    rm -f "$cache/vmlinux-$kver.part"
    log "could not extract vmlinux; the VM will boot the bzImage (slower)"
  fi
fi

# -- 3. initramfs ----------------------------------------------------------------------------
initrd=$cache/initramfs-$kver.cpio.gz
if [ ! -s "$initrd" ] || [ "$here/initramfs-init" -nt "$initrd" ] || [ "$here/setup.sh" -nt "$initrd" ]; then
  log "building $initrd"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work"/{bin,dev,proc,sys,lib/modules}
  cp "$(command -v busybox)" "$work/bin/busybox"
  install -m 0755 "$here/initramfs-init" "$work/init"
  # Modules, in load order (modprobe --show-depends lists dependencies first): virtio
  # transport and console, 9p root, overlayfs, the veth pair and Soft-RoCE with uverbs
  # (rxe computes the ICRC through the crypto API's "crc32", a dependency modprobe cannot see).
  for m in virtio_pci virtio_console 9pnet_virtio 9p overlay veth crc32_generic rdma_rxe ib_uverbs; do
    modprobe -d "$kroot" -S "$kver" --show-depends "$m" 2>/dev/null |
      awk '$1 == "insmod" { print $2 }'
  done | awk '!seen[$0]++' >"$work/order"
  [ -s "$work/order" ] || die "no modules found in $kroot for $kver"
  grep -q '/rdma_rxe.ko' "$work/order" || die "$kpkg has no rdma_rxe module"
  while read -r ko; do
    cp "$ko" "$work/lib/modules/"
    echo "/lib/modules/${ko##*/}" >>"$work/modules.order"
  done <"$work/order"
  rm "$work/order"
  (cd "$work" && find . -print | cpio -o -H newc --quiet | gzip -1) >"$initrd.part"
  mv "$initrd.part" "$initrd"
fi

echo "$kpkg" >"$cache/kernel.pkg"
log "ready: kernel $kver, cache $cache"
