#!/usr/bin/env bash
# Fill ci/wheelhouse/ with wheels for the image's requirements, using this
# machine's pip (for hosts whose containers reach no package index).  The
# wheels are for CPython 3.11 on x86_64 glibc (the Debian bookworm image).
# Idempotent: pip skips wheels already downloaded.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
log="$(mktemp /tmp/sdematrix-wheelhouse.XXXXXX.log)"
trap 'rm -f "$log"' EXIT
if ! python3 -m pip download --only-binary=:all: --python-version 3.11 \
        --implementation cp --abi cp311 --abi abi3 --abi none \
        --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_17_x86_64 --platform any \
        -d "$here/wheelhouse" -r "$here/requirements-image.txt" >"$log" 2>&1; then
    echo "build-wheelhouse: pip download failed:" >&2
    tail -5 "$log" >&2
    exit 1
fi
echo "wheels in ci/wheelhouse: $(find "$here/wheelhouse" -maxdepth 1 -name "*.whl" | wc -l)"
