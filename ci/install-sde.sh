#!/usr/bin/env bash
# Install the pinned Intel SDE into DEST (default: $HOME/.cache/sdematrix/sde-VERSION)
# and print the sde64 path.
#
# Where the tarball comes from, first hit wins:
#   1. DEST already holds sde64 (a CI cache restored there): nothing to do;
#   2. SDE_TARBALL=path: a tarball placed by hand, a Docker build context, ...;
#   3. SDE_MIRROR_URL: a copy of the pinned tarball anywhere curl reaches
#      (https://, file://);
#   4. Intel's URL from ci/sde-version.env (SDE_URL_OVERRIDE replaces it).
# Whatever the source, the file must be an xz archive (magic FD 37 7A 58 5A 00)
# -- Intel's mirror answers non-browser clients with a 403 HTML page or an
# empty 202 -- of plausible size (a download must be at least SDE_MIN_BYTES
# when the pinned hash is used), and must match the pinned SHA-256
# (SDE_SHA256_OVERRIDE replaces the pin, e.g. for another version's kit).
#
# On failure: ONE line on stderr saying what each source gave and how to
# proceed.  With SDE_SOURCES_REPORT=FILE, also one line per source in FILE
# ("cache: ...", "SDE_MIRROR_URL: ...", "Intel: ..."), for a CI step summary.  Exit 1: nothing could be fetched (network/HTTP); 3: something was
# fetched but it is not the SDE archive (HTML, empty, truncated); 2: an xz
# archive with the wrong SHA-256 (or an SDE_TARBALL that is not one); the
# highest of these over the sources tried.  Exit 1 also when the unpacked
# sde64 does not run.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=/dev/null
. "$here/sde-version.env"
url="${SDE_URL_OVERRIDE:-$SDE_URL}"
sha="${SDE_SHA256_OVERRIDE:-$SDE_SHA256}"
# The size floor is a property of the pinned release; a kit pinned by an
# override hash is only held to "non-empty xz".
if [ "$sha" = "$SDE_SHA256" ]; then min_bytes="${SDE_MIN_BYTES_OVERRIDE:-$SDE_MIN_BYTES}"; else min_bytes="${SDE_MIN_BYTES_OVERRIDE:-1}"; fi
dest="${1:-${HOME}/.cache/sdematrix/sde-${SDE_VERSION}}"
name="sde-external-${SDE_VERSION}-lin.tar.xz"
how="put the pinned tarball ($name, sha256 $sha) at SDE_TARBALL=path, restore $dest from a cache, or set SDE_MIRROR_URL to a copy of it (same SHA-256 pin)"

# note SOURCE WHAT: one line of the per-source report (when asked for)
note() {
    if [ -n "${SDE_SOURCES_REPORT:-}" ]; then echo "$1: $2" >>"$SDE_SOURCES_REPORT"; fi
}

if [ -x "$dest/sde64" ]; then
    note cache "hit: $dest/sde64"
    echo "$dest/sde64"
    exit 0
fi
note cache "no SDE kit at $dest (no cache entry restored there)"

# check FILE: prints nothing and returns 0 when FILE is the pinned archive;
# otherwise prints why and returns 3 (not the archive) or 2 (wrong hash).
check() {
    local f="$1" size magic got
    size="$(stat -c %s "$f" 2>/dev/null || echo 0)"
    if [ "$size" -eq 0 ]; then echo "empty file (0 bytes)"; return 3; fi
    magic="$(head -c 6 "$f" | od -An -tx1 | tr -d ' \n')"
    if [ "$magic" != "fd377a585a00" ]; then
        if head -c 512 "$f" | grep -qi '<html\|<!doctype'; then
            echo "an HTML page ($size bytes), not an xz archive"
        else
            echo "not an xz archive ($size bytes, starts with ${magic:-nothing})"
        fi
        return 3
    fi
    if [ "$size" -lt "$min_bytes" ]; then
        echo "an xz file of only $size bytes (the pinned kit is >= $min_bytes): truncated"
        return 3
    fi
    got="$(sha256sum "$f" | cut -d' ' -f1)"
    if [ "$got" != "$sha" ]; then echo "an xz archive with a SHA-256 mismatch: got $got, pinned $sha"; return 2; fi
    return 0
}

tarball=""
worst=0
report=""
if [ -n "${SDE_TARBALL:-}" ]; then
    if [ ! -f "$SDE_TARBALL" ]; then
        note SDE_TARBALL "$SDE_TARBALL does not exist"
        echo "install-sde: SDE_TARBALL=$SDE_TARBALL does not exist; $how" >&2
        exit 2
    fi
    # A local file is not a download: no size floor (it was placed on purpose).
    why="$(min_bytes=1 check "$SDE_TARBALL")" || {
        rc=$?
        note SDE_TARBALL "$SDE_TARBALL is $why"
        [ "$rc" -eq 2 ] && echo "install-sde: SHA-256 mismatch for SDE_TARBALL=$SDE_TARBALL: ${why#an xz archive with a SHA-256 mismatch: }; $how" >&2 \
            || echo "install-sde: SDE_TARBALL=$SDE_TARBALL is $why; $how" >&2
        exit 2
    }
    tarball="$SDE_TARBALL"
else
    tmp="$(mktemp -d /tmp/install-sde.XXXXXX)"
    trap 'rm -rf "$tmp"' EXIT
    sources=()
    labels=()
    if [ -n "${SDE_MIRROR_URL:-}" ]; then
        sources+=("$SDE_MIRROR_URL")
        labels+=(SDE_MIRROR_URL)
    else
        note SDE_MIRROR_URL "not set (a repository variable naming a copy of $name)"
    fi
    sources+=("$url")
    labels+=(Intel)
    i=0
    for src in "${sources[@]}"; do
        label="${labels[$i]}"
        i=$((i + 1))
        f="$tmp/$i.tar.xz"
        code="$(curl -sL --retry 3 -o "$f" -w '%{http_code}' "$src" 2>/dev/null)" && rc=0 || rc=$?
        if [ "$rc" -ne 0 ]; then
            report+="${report:+; }$src: download failed (curl exit $rc, HTTP ${code:-none})"
            note "$label" "$src: download failed (curl exit $rc, HTTP ${code:-none})"
            [ "$worst" -lt 1 ] && worst=1
            continue
        fi
        case "$code" in 2??|000) ;; *)
            report+="${report:+; }$src: HTTP $code"
            note "$label" "$src: HTTP $code"
            [ "$worst" -lt 1 ] && worst=1
            continue ;;
        esac
        why="$(check "$f")" && { tarball="$f"; note "$label" "$src: the pinned kit"; break; } || rc=$?
        if [ "$code" = 000 ]; then what="the file"; else what="the HTTP $code answer"; fi
        report+="${report:+; }$src: $what is $why"
        note "$label" "$src: $what is $why"
        if [ "$rc" -eq 2 ]; then worst=2; elif [ "$worst" -ne 2 ]; then worst=3; fi
    done
    if [ -z "$tarball" ]; then
        echo "install-sde: no usable SDE tarball ($report); $how" >&2
        exit "$worst"
    fi
fi

mkdir -p "$dest"
tar -C "$dest" --strip-components=1 -xJf "$tarball"
"$dest/sde64" -version >/dev/null 2>&1 || { echo "install-sde: $dest/sde64 does not run" >&2; exit 1; }
echo "$dest/sde64"
