#!/usr/bin/env bash
# Build a Debian bookworm base image without any container registry:
# debootstrap a minimal root file system from the Debian mirror and
# `docker import` it.  For machines (like ours) that reach the Debian mirror
# but no registry.  Usage: ci/make-base-image.sh [IMAGE_NAME]
set -euo pipefail
name="${1:-sdematrix-base:bookworm}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

# One builder at a time (parallel test workers, CI steps): the others wait
# here and then find the image.
exec 9>"/tmp/sdematrix-make-base-image.lock"
flock 9
if docker image inspect "$name" >/dev/null 2>&1; then
    echo "base image $name already present"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "make-base-image: debootstrap not installed (apt-get install debootstrap)" >&2; exit 2; }
root="$(mktemp -d /tmp/sdematrix-rootfs.XXXXXX)"
trap 'rm -rf "$root"' EXIT
log=/tmp/sdematrix-debootstrap.log
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$log" 2>&1 \
    || { tail -20 "$log" >&2; exit 1; }
# Same mirror inside the image, and no apt caches kept.
echo "deb $mirror bookworm main" > "$root/etc/apt/sources.list"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
tar -C "$root" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["/bin/bash"]' - "$name"
echo "built base image $name"
