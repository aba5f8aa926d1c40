#!/usr/bin/env bash
# The publish job of .github/workflows/sde-matrix.yml: merges whatever the
# shards produced.
#
#   bash ci/publish.sh RESULTS
#
# RESULTS holds one directory per downloaded artifact: results-sde-<shard>/
# and results-ptrace-<shard>/.  Per backend with at least one shard that left
# results.json: RESULTS/<backend>/ gets the merged results.json, junit.xml,
# report.html and summary.md; RESULTS/junit.xml merges every backend's JUnit.
# A backend with no results (SDE unavailable and optional, or its shards
# died) is one line in the summary, not a failure; nothing from any backend
# at all is one (exit 1).  The step summary gets each backend's summary.
set -euo pipefail
results="${1:?usage: ci/publish.sh RESULTS}"
summary="${GITHUB_STEP_SUMMARY:-/dev/null}"
merged=()
for backend in ptrace sde; do
    dirs=()
    for d in "$results"/results-"$backend"-*/; do
        [ -f "$d/results.json" ] && dirs+=("${d%/}")
    done
    if [ "${#dirs[@]}" -eq 0 ]; then
        echo "publish: no $backend shard produced results" | tee -a "$summary"
        continue
    fi
    dest="$results/$backend"
    sdematrix merge-results --out "$dest" "${dirs[@]}"
    junits=()
    for d in "${dirs[@]}"; do [ -f "$d/junit.xml" ] && junits+=("$d/junit.xml"); done
    if [ "${#junits[@]}" -gt 0 ]; then
        sdematrix merge-junit --out "$dest/junit.xml" "${junits[@]}"
        merged+=("$dest/junit.xml")
    fi
    sdematrix report "$dest" --html "$dest/report.html" --markdown "$dest/summary.md"
    { echo "## $backend"; echo; cat "$dest/summary.md"; echo; } >>"$summary"
done
if [ "${#merged[@]}" -eq 0 ]; then
    echo "::error title=no results::no shard of any backend produced results"
    exit 1
fi
sdematrix merge-junit --out "$results/junit.xml" "${merged[@]}"
