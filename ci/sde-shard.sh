#!/usr/bin/env bash
# The SDE job of .github/workflows/sde-matrix.yml, one shard:
#
#   bash ci/sde-shard.sh CPUS OUT
#
# Installs the pinned Intel SDE with ci/install-sde.sh (sources in order: the
# cache restored at its default destination, $SDE_MIRROR_URL, Intel's URL) and
# runs `sdematrix run --backend sde --cpu CPUS` into OUT (results.json,
# junit.xml).  When no source gives SDE:
#
#   * SDE_REQUIRED=true (the repository variable): an error annotation, one
#     line per source in the step summary, exit 1;
#   * otherwise: ONE notice line on stdout, the same lines per source in the
#     step summary, nothing run, exit 0 -- the ptrace job still runs every
#     model on the runner's own CPU, and publish merges what there is.
#
# $GITHUB_STEP_SUMMARY (unset off GitHub) receives the per-source lines.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cpus="${1:?usage: ci/sde-shard.sh CPUS OUT}"
out="${2:?usage: ci/sde-shard.sh CPUS OUT}"
summary="${GITHUB_STEP_SUMMARY:-/dev/null}"
required="${SDE_REQUIRED:-false}"
case "$required" in true | 1 | yes) required=true ;; *) required=false ;; esac

sources="$(mktemp /tmp/sde-sources.XXXXXX)"
err="$(mktemp /tmp/sde-install.XXXXXX)"
trap 'rm -f "$sources" "$err"' EXIT
if ! sde="$(SDE_SOURCES_REPORT="$sources" bash "$here/install-sde.sh" 2>"$err")"; then
    why="$(tr '\n' ' ' <"$err" | sed 's/ *$//')"
    {
        echo "### Intel SDE not available for shard ${SHARD:-$cpus}"
        echo
        sed 's/^/- /' "$sources"
        echo
        if [ "$required" = true ]; then
            echo "SDE_REQUIRED is set: this job fails."
        else
            echo "SDE is optional here (set the repository variable SDE_REQUIRED=true to fail"
            echo "instead): the SDE cells did not run; the ptrace job ran every model."
        fi
    } >>"$summary"
    if [ "$required" = true ]; then
        echo "::error title=Intel SDE missing::$why"
        exit 1
    fi
    echo "::notice title=Intel SDE not available::SDE shard ${SHARD:-$cpus} skipped, nothing run ($(paste -sd';' "$sources" | sed 's/;/; /g'))"
    exit 0
fi
mkdir -p "$out"
exec sdematrix run --backend sde --sde-path "$sde" --cpu "$cpus" \
    --out "$out" --junit "$out/junit.xml" --jobs "${JOBS:-2}"
