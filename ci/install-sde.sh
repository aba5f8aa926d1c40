#!/usr/bin/env bash
# Install the pinned Intel SDE into DEST (default: $HOME/.cache/sdematrix/sde)
# and print the sde64 path.  Refuses a tarball whose SHA-256 differs from the
# pin.  A tarball already present (SDE_TARBALL=path, e.g. a CI cache or a file
# placed in a Docker build context) is verified the same way instead of
# downloading.  Exit 2 on a checksum mismatch, 1 on a download failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
. "$here/sde-version.env"
url="${SDE_URL_OVERRIDE:-$SDE_URL}"
sha="${SDE_SHA256_OVERRIDE:-$SDE_SHA256}"
dest="${1:-${HOME}/.cache/sdematrix/sde-${SDE_VERSION}}"

if [ -x "$dest/sde64" ]; then
    echo "$dest/sde64"
    exit 0
fi
tarball="${SDE_TARBALL:-}"
if [ -z "$tarball" ]; then
    tarball="$(mktemp /tmp/sde.XXXXXX.tar.xz)"
    trap 'rm -f "$tarball"' EXIT
    curl -fsSL --retry 3 -o "$tarball" "$url" || { echo "install-sde: download failed: $url" >&2; exit 1; }
fi
got="$(sha256sum "$tarball" | cut -d' ' -f1)"
if [ "$got" != "$sha" ]; then
    echo "install-sde: SHA-256 mismatch for $url: got $got, pinned $sha" >&2
    exit 2
fi
mkdir -p "$dest"
tar -C "$dest" --strip-components=1 -xJf "$tarball"
"$dest/sde64" -version >/dev/null 2>&1 || { echo "install-sde: $dest/sde64 does not run" >&2; exit 1; }
echo "$dest/sde64"
