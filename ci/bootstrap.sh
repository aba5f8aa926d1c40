#!/usr/bin/env bash
# Install everything this project needs on a fresh Debian 12 machine (as root,
# or with sudo available): the toolchain, qemu-user, Docker, debootstrap,
# Chromium for the report test, and the package itself (editable, with the
# test and report extras).  Idempotent.
set -euo pipefail
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(gcc libc6-dev binutils make qemu-user docker.io debootstrap chromium valgrind xz-utils curl)
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
python3 -m pip install -q -e ".[test]"
