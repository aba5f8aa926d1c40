#!/usr/bin/env bash
# Fill ci/wheelhouse/ with wheels for the image's requirements, using this
# machine's pip (for hosts whose containers reach no package index).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python3 -m pip download --only-binary=:all: --python-version 3.11 \
    --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 --platform any \
    -d "$here/wheelhouse" -r "$here/requirements-image.txt" >/dev/null 2>&1
ls "$here/wheelhouse"/*.whl | wc -l | xargs echo "wheels in ci/wheelhouse:"
