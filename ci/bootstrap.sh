#!/usr/bin/env bash
# Install everything this project needs on a fresh Debian 12 machine (as root,
# or with sudo available): the toolchain, qemu-user, Docker (engine + CLI),
# debootstrap (the registry-free base image), Chromium for the report test,
# valgrind, and the package itself (editable, with the test
# extra).  Idempotent.  A machine that already has a Docker engine keeps it
# (docker.io would conflict with Docker's own packages).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
pkgs=(gcc libc6-dev binutils make qemu-user debootstrap chromium valgrind xz-utils curl clang libclang-rt-14-dev openssl libssl-dev)
# the exec corpus (tests/integration/test_corpus.py): programs the distribution ships
pkgs+=(gzip bzip2 zstd lz4 python3 perl mawk sqlite3 jq libc-bin coreutils)
# other projects' AES-GCM dispatchers (tests/integration/test_distro_gcm_libs.py)
pkgs+=(libgcrypt20 libnettle8 libgnutls30 libsodium23)
# a dispatcher in JIT code (tests/integration/test_openjdk.py): HotSpot
pkgs+=(openjdk-17-jre-headless)
# a JIT whose code generator follows CPUID (tests/integration/test_luajit.py)
pkgs+=(luajit)
command -v dockerd >/dev/null || pkgs+=(docker.io)   # the engine; a bare client (often preinstalled) is not enough
missing=()
for p in "${pkgs[@]}"; do
    dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Debian's own python3 refuses system-wide pip installs (PEP 668) unless told.
# setuptools >= 77 and cffi in the interpreter itself: `python3 setup.py
# build_ext --inplace` (the in-place developer build) reads pyproject.toml's
# PEP 639 licence fields with the installed setuptools, not an isolated one.
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q "setuptools>=77" "cffi>=1.16"
PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q -e ".[test]"
