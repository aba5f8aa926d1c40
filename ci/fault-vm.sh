#!/usr/bin/env bash
# Prove the ptrace backend's "fault" CPUID mode on a host WITHOUT CPUID
# faulting (AMD, or a hypervisor that hides it): boot a small Intel-personality
# VM -- qemu-system-x86_64 in TCG mode with CPUID faulting emulated
# (ci/faultvm/qemu-cpuid-fault.patch), `-cpu max,vendor=GenuineIntel`,
# Debian's own kernel, a busybox initramfs, the host's root shared read-only
# over virtio-9p under a tmpfs overlay -- and run, inside it, the fault-mode
# tests and a small fault-mode `sdematrix run` (ci/faultvm/guest.sh).
#
#   ci/fault-vm.sh           skip (exit 0, with the reason) where this host has
#                            CPUID faulting: the main suite ran fault mode natively
#   ci/fault-vm.sh --force   run the VM anyway
#
# Cached under ~/.cache/sdematrix/faultvm (override: $SDEMATRIX_CACHE_DIR):
# the patched QEMU (built once, keyed by the patch, the build script and
# Debian's qemu version) and the kernel extracted from linux-image-amd64's
# .deb (not installed).  Exit 0 when everything in the guest passed; any
# failure to build, boot or pass is non-zero with one "fault-vm: FAIL:" line.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
repo="$(pwd -P)"
here="$repo/ci/faultvm"
force=0
case "${1:-}" in
    --force) force=1 ;;
    "") ;;
    *) echo "fault-vm: usage: ci/fault-vm.sh [--force]" >&2; exit 2 ;;
esac
cache="${SDEMATRIX_CACHE_DIR:-$HOME/.cache/sdematrix}/faultvm"
scale="${SDEMATRIX_FAULTVM_TIMEOUT_SCALE:-20}"   # TCG runs the guest 10-30x slower
smp="${SDEMATRIX_FAULTVM_SMP:-$(nproc)}"
limit="${SDEMATRIX_FAULTVM_LIMIT:-1200}"          # seconds for the whole guest run
t0=$SECONDS
say() { echo "fault-vm: $* ($((SECONDS - t0)) s)"; }
die() { echo "fault-vm: FAIL: $*" >&2; exit 1; }

why="$(PYTHONPATH="$repo/src" python3 -c \
    'from sdematrix.backends.ptrace.backend import cpuid_faulting_available as f; print(f())')" \
    || die "cannot ask this host about CPUID faulting (python3 -c 'import sdematrix' failed)"
if [ "$why" = "True" ] && [ "$force" -eq 0 ]; then
    echo "fault-vm: skipped: this host has CPUID faulting, so the main suite already ran the fault-mode tests natively (ci/fault-vm.sh --force runs the VM anyway)"
    exit 0
fi
[ "$why" = "True" ] || say "this host has no CPUID faulting ($why): proving fault mode in the VM"
case "$repo" in *[[:space:]]*) die "the repository path has white space: $repo" ;; esac
[ -x "$repo/src/sdematrix/_bin/vc-tracer" ] || die "no $repo/src/sdematrix/_bin/vc-tracer (build the project first)"

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
need() {  # install the Debian packages in "$@" that are missing
    local missing=() p
    for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ "${#missing[@]}" -eq 0 ] && return 0
    say "installing ${missing[*]}"
    { $SUDO apt-get update -qq && $SUDO env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/dev/null 2>&1 \
        || die "cannot install ${missing[*]}"
}
need busybox-static xz-utils

# -- the patched QEMU --------------------------------------------------------
qemu_ver="$(apt-cache show --no-all-versions qemu-system-x86 2>/dev/null | sed -n 's/^Version: //p' | head -n 1)"
key="$(cat "$here/qemu-cpuid-fault.patch" "$here/build-qemu.sh" | sha256sum | cut -c1-16)"
qdir="$cache/qemu-${qemu_ver//[^A-Za-z0-9.+-]/_}-$key"
if [ ! -x "$qdir/bin/qemu-system-x86_64" ]; then
    say "building QEMU with CPUID faulting (once per machine) into $qdir"
    need curl dpkg-dev patch gcc make pkg-config ninja-build meson libglib2.0-dev \
        libpixman-1-dev libcap-ng-dev libattr1-dev libfdt-dev binutils
    mkdir -p "$cache"
    bash "$here/build-qemu.sh" "$qdir" || exit 1    # it printed the FAIL line
fi
qemu="$qdir/bin/qemu-system-x86_64"
say "QEMU: $(head -n 1 "$qdir/VERSION")"

# -- Debian's kernel, extracted from the package (not installed) ---------------
kpkg="$(apt-cache depends linux-image-amd64 2>/dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -n 1)"
[ -n "$kpkg" ] || die "apt knows no linux-image-amd64 (apt-get update?)"
kdir="$cache/$kpkg"
# virtio-pci, virtio-9p and overlayfs are modules in Debian's kernel; the
# order is their dependency order (init retries anyway)
mods="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci netfs fscache 9pnet 9pnet_virtio 9p overlay"
if [ ! -f "$kdir/vmlinuz" ]; then
    say "extracting $kpkg"
    tmp="$(mktemp -d)"
    (cd "$tmp" && apt-get download "$kpkg" >/dev/null 2>apt.err) \
        || { rm -rf "$tmp"; die "apt-get download $kpkg failed"; }
    dpkg-deb -x "$tmp"/"$kpkg"_*.deb "$tmp/x" || { rm -rf "$tmp"; die "cannot unpack $kpkg"; }
    rm -rf "$kdir.tmp" && mkdir -p "$kdir.tmp/modules"
    cp "$tmp"/x/boot/vmlinuz-* "$kdir.tmp/vmlinuz"
    for m in $mods; do
        f="$(find "$tmp/x/lib/modules" -name "$m.ko" | head -n 1)"
        [ -n "$f" ] || { rm -rf "$tmp"; die "$kpkg has no $m.ko"; }
        cp "$f" "$kdir.tmp/modules/"
    done
    rm -rf "$tmp" "$kdir" && mv "$kdir.tmp" "$kdir"
fi
say "kernel: $kpkg"

# -- the initramfs (busybox + init + modules), cheap: rebuilt every run --------
work="$(mktemp -d "${TMPDIR:-/tmp}/sdematrix-faultvm.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ir="$work/initramfs"
mkdir -p "$ir/bin" "$ir/proc" "$ir/sys" "$ir/dev" "$ir/modules"
busybox="$(command -v busybox || true)"
if [ -z "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
    die "no static busybox (Debian package busybox-static)"
fi
cp "$busybox" "$ir/bin/busybox"
cp "$here/init" "$ir/init" && chmod 755 "$ir/init"
cp "$kdir"/modules/*.ko "$ir/modules/"
echo "$mods" >"$ir/modules.list"
# the guest runs this host's python3 (pyenv, a venv...): its directory first
py="$(python3 -c 'import sys; print(sys.executable)')"
printf 'export PATH=%q\n' "$(dirname "$py"):$PATH" >"$ir/faultvm.env"
(cd "$ir" && find . | "$busybox" cpio -o -H newc 2>/dev/null | gzip -1 >"$work/initrd.gz") \
    || die "cannot pack the initramfs"

# -- boot -------------------------------------------------------------------------
log="$work/console.log"
say "booting the guest: TCG, -cpu max,vendor=GenuineIntel, $smp vCPU, timeout scale $scale"
set +e
timeout "$limit" "$qemu" -L "$qdir/share" -machine pc,accel=tcg -cpu max,vendor=GenuineIntel \
    -smp "$smp" -m 3072 -nodefaults -display none -serial stdio -monitor none -no-reboot \
    -kernel "$kdir/vmlinuz" -initrd "$work/initrd.gz" \
    -append "console=ttyS0 quiet loglevel=3 panic=-1 rdinit=/init faultvm.repo=$repo faultvm.scale=$scale" \
    -virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap" \
    </dev/null 2>"$work/qemu.err" | sed -u 's/\r$//' | tee "$log"
qrc=${PIPESTATUS[0]}
set -e
[ "$qrc" -ne 124 ] || die "the guest did not finish within $limit s (SDEMATRIX_FAULTVM_LIMIT)"
rc="$(sed -n 's/^faultvm-exit: //p' "$log" | tail -n 1)"
if [ -z "$rc" ]; then
    err="$(tail -n 1 "$work/qemu.err" 2>/dev/null)"
    die "the VM did not boot to the test runner (qemu exit $qrc${err:+: $err}); last console line: $(grep -v '^\s*$' "$log" | tail -n 1)"
fi
case "$rc" in
    boot:*) die "the VM failed to boot: ${rc#boot: }" ;;
    0) say "passed: fault mode proven in the Intel-personality VM" ;;
    *) die "$(grep '^fault-vm: FAIL:' "$log" | tail -n 1 | sed 's/^fault-vm: FAIL: //') (guest exit $rc)" ;;
esac
