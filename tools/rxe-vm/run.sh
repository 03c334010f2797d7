#!/usr/bin/env bash
# run.sh 'COMMAND' -- boot a throw-away VM running Debian's stock kernel under QEMU, with two
# Soft-RoCE devices (rxe0 on veth0 = 192.0.2.1, rxe1 on veth1 = 192.0.2.2), run COMMAND in it
# with bash, in the current directory, and exit with COMMAND's status.
#
# The guest's root is the host's / (read-only 9p under a tmpfs overlay), so binaries built on
# the host run unchanged against the real kernel verbs stack (ib_core, ib_uverbs, rdma_rxe).
# COMMAND's stdout and stderr are streamed to this script's stdout and stderr.
#
# Environment:
#   RXE_VM_TIMEOUT=600    seconds before the VM is killed (exit 124)
#   RXE_VM_MEM=512        guest memory, MiB           RXE_VM_SMP=2   guest CPUs
#   RXE_VM_NDEV=2         Soft-RoCE devices: 2, 1 (rxe0 only) or 0
#   RXE_VM_ENV="A B"      host environment variables to pass into the guest
#   RXE_VM_RWDIRS="/d"    host directories the guest may write (writes reach the host)
#   RXE_VM_ACCEL=auto     auto | tcg | kvm (auto: kvm only with real VT-x/AMD-V)
#   RXE_VM_VERBOSE=1      guest setup trace and console log on stderr
#   RXE_VM_CACHE          as for setup.sh
# Exit status: COMMAND's; 124 timeout; 125 the VM did not produce a result (console tail
# printed); 126 Soft-RoCE setup failed in the guest; 2 usage or setup error.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${RXE_VM_CACHE:-/var/tmp/mlx5-direct-rxe-vm}
[ $# -ge 1 ] || { echo "usage: $0 'COMMAND'" >&2; exit 2; }
"$here/setup.sh" || { echo "rxe-vm: setup failed" >&2; exit 2; }
kpkg=$(<"$cache/kernel.pkg"); kver=${kpkg#linux-image-}
kernel=$cache/kernel-$kver/boot/vmlinuz-$kver
[ -s "$cache/vmlinux-$kver" ] && kernel=$cache/vmlinux-$kver
initrd=$cache/initramfs-$kver.cpio.gz

run=$(mktemp -d /tmp/rxe-vm.XXXXXX)
tailer=
cleanup() { [ -n "$tailer" ] && kill "$tailer" 2>/dev/null; rm -rf "$run"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

printf '%s' "$*" >"$run/cmd"
cp "$here/guest-init" "$run/guest-init"
{
  printf 'RXE_VM_CWD=%q\nRXE_VM_NDEV=%q\nRXE_VM_VERBOSE=%q\n' \
    "$PWD" "${RXE_VM_NDEV:-2}" "${RXE_VM_VERBOSE:-}"
  for v in ${RXE_VM_ENV:-}; do
    [ -n "${!v+set}" ] && printf 'export %s=%q\n' "$v" "${!v}"
  done
} >"$run/env"
: >"$run/rwdirs"
rw=()
n=0
for d in ${RXE_VM_RWDIRS:-}; do
  d=$(realpath -e "$d") || { echo "rxe-vm: no such directory: $d" >&2; exit 2; }
  echo "$d" >>"$run/rwdirs"
  rw+=(-virtfs "local,path=$d,mount_tag=rw$n,security_model=none,multidevs=remap")
  n=$((n + 1))
done

accel=${RXE_VM_ACCEL:-auto}
if [ "$accel" = auto ]; then
  # /dev/kvm alone is not enough: on a PVM host (these build machines) it only runs
  # PVM-enabled guest kernels, so use KVM only when the CPU advertises VT-x or AMD-V.
  accel=tcg
  grep -qwE 'vmx|svm' /proc/cpuinfo && [ -w /dev/kvm ] && accel=kvm
fi
case $accel in
  tcg) accel_args=(-accel tcg,thread=multi -cpu max) ;;
  kvm) accel_args=(-accel kvm -cpu host) ;;
  *) echo "rxe-vm: RXE_VM_ACCEL must be auto, tcg or kvm" >&2; exit 2 ;;
esac

: >"$run/out"; : >"$run/err"
timeout_s=${RXE_VM_TIMEOUT:-600}
timeout --foreground -k 5 "$timeout_s" qemu-system-x86_64 "${accel_args[@]}" \
  -m "${RXE_VM_MEM:-512}" -smp "${RXE_VM_SMP:-2}" \
  -nodefaults -no-user-config -nographic -no-reboot -monitor none \
  -serial "file:$run/console" \
  -kernel "$kernel" -initrd "$initrd" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 oops=panic tsc=reliable no_timer_check rxevm.modules=$cache/kernel-$kver/lib/modules/$kver" \
  -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
  -virtfs "local,path=$run,mount_tag=ctl,security_model=none" \
  "${rw[@]}" \
  -device virtio-serial-pci \
  -chardev "file,id=out,path=$run/out" -device virtserialport,chardev=out,name=rxe-vm.out \
  -chardev "file,id=err,path=$run/err" -device virtserialport,chardev=err,name=rxe-vm.err \
  </dev/null >/dev/null 2>"$run/qemu.err" &
qemu=$!
# stream the guest's output while it runs
tail -q -n +1 -s 0.2 -f --pid=$qemu "$run/out" &
tailer=$!
tail -q -n +1 -s 0.2 -f --pid=$qemu "$run/err" >&2 &
tailer="$tailer $!"
wait $qemu
qrc=$?
wait $tailer 2>/dev/null
tailer=

if [ -n "${RXE_VM_VERBOSE:-}" ]; then
  echo "---- rxe-vm guest console ----" >&2; cat "$run/console" >&2
fi
if [ -s "$run/rc" ]; then
  exit "$(<"$run/rc")"
fi
if [ $qrc = 124 ] || [ $qrc = 137 ]; then
  echo "rxe-vm: timed out after ${timeout_s}s (RXE_VM_TIMEOUT)" >&2
  exit 124
fi
echo "rxe-vm: the VM ended without a result (qemu status $qrc)" >&2
cat "$run/qemu.err" >&2
echo "---- last lines of the guest console ----" >&2
tail -n 30 "$run/console" >&2
exit 125
