#!/usr/bin/env bash
# Build, once per machine, a qemu-system-x86_64 (TCG only) with CPUID faulting
# (ci/faultvm/qemu-cpuid-fault.patch) from Debian's own qemu source -- the
# version apt knows for qemu-system-x86 -- and install it as
#     $1/bin/qemu-system-x86_64      (stripped, ~17 MB)
#     $1/share/                      (SeaBIOS and the option ROMs -kernel needs)
# Source: the .dsc and tarballs from the Debian pool; dpkg-source checks the
# tarballs against the .dsc's checksums.  Everything else happens in a scratch
# directory that is removed afterwards.  Prints one line per stage with its
# wall time; any failure ends the script non-zero with one line saying which
# stage failed.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${1:?usage: build-qemu.sh DESTDIR}"
mirror="${SDEMATRIX_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
die() { echo "fault-vm: FAIL: building QEMU: $*" >&2; exit 1; }
t0=$SECONDS
stage() { echo "fault-vm: build-qemu: $* ($((SECONDS - t0)) s)"; }

# the source version: "Source: qemu (1:7.2+dfsg-7+deb12u18)" on a binNMU
info="$(apt-cache show --no-all-versions qemu-system-x86 2>/dev/null || true)"
src_ver="$(sed -n 's/^Source: qemu (\(.*\))$/\1/p' <<<"$info" | head -n 1)"
[ -n "$src_ver" ] || src_ver="$(sed -n 's/^Version: //p' <<<"$info" | head -n 1)"
[ -n "$src_ver" ] || die "apt knows no qemu-system-x86 (apt-get update?)"
nover="${src_ver#*:}"                # the pool's file names have no epoch
upstream="${nover%-*}"
work="$(mktemp -d "${TMPDIR:-/tmp}/sdematrix-qemu-build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
cd "$work"
for f in "qemu_${nover}.dsc" "qemu_${upstream}.orig.tar.xz" "qemu_${nover}.debian.tar.xz"; do
    curl -sSf --retry 3 -o "$f" "$mirror/pool/main/q/qemu/$f" \
        || die "cannot download $mirror/pool/main/q/qemu/$f"
done
stage "downloaded Debian qemu $src_ver source"
dpkg-source -x "qemu_${nover}.dsc" src >/dev/null 2>dpkg-source.err \
    || die "dpkg-source -x: $(tail -n 1 dpkg-source.err)"
patch -s -d src -p1 <"$here/qemu-cpuid-fault.patch" || die "the CPUID faulting patch does not apply to qemu $src_ver"
stage "unpacked (Debian patches + CPUID faulting patch applied)"
mkdir build && cd build
# TCG only, one target, no docs/GUI/network backends: what the fault VM uses
# (-kernel/-initrd boot, serial console, virtio-9p for the host's root).
nice ../src/configure --target-list=x86_64-softmmu --without-default-features \
    --enable-tcg --enable-virtfs --enable-attr --enable-cap-ng --enable-fdt=system \
    --disable-docs --disable-werror --disable-debug-info >configure.log 2>&1 \
    || die "configure: $(grep -m1 -i error configure.log || tail -n 1 configure.log)"
stage "configured"
nice ninja -j"$(nproc)" qemu-system-x86_64 >ninja.log 2>&1 \
    || die "ninja: $(grep -m1 -i 'error' ninja.log || tail -n 1 ninja.log)"
stage "compiled"
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp/bin" "$dest.tmp/share"
strip -o "$dest.tmp/bin/qemu-system-x86_64" qemu-system-x86_64
# Firmware: Debian's dfsg source has no prebuilt ROMs; take SeaBIOS and the
# linuxboot option ROM from the Debian packages (extracted, not installed).
cd "$work"
apt-get download seabios qemu-system-data >/dev/null 2>apt.err || die "apt-get download seabios qemu-system-data: $(tail -n 1 apt.err)"
for d in seabios_*.deb qemu-system-data_*.deb; do dpkg-deb -x "$d" fw; done
for f in bios-256k.bin; do cp -L "fw/usr/share/seabios/$f" "$dest.tmp/share/" || die "no $f in seabios"; done
for f in linuxboot_dma.bin kvmvapic.bin; do cp -L "fw/usr/share/qemu/$f" "$dest.tmp/share/" || die "no $f in qemu-system-data"; done
"$dest.tmp/bin/qemu-system-x86_64" --version | head -n 1 >"$dest.tmp/VERSION" || die "the built QEMU does not run"
echo "$src_ver + $(sha256sum "$here/qemu-cpuid-fault.patch" | cut -c1-16)" >>"$dest.tmp/VERSION"
rm -rf "$dest" && mv "$dest.tmp" "$dest"
stage "installed $(head -n 1 "$dest/VERSION") in $dest"
