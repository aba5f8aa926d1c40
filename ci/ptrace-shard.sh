#!/usr/bin/env bash
# The ptrace job of .github/workflows/sde-matrix.yml, one shard: the models
# CPUS on the runner's own CPU, through the ptrace CPUID tracer, inside the
# project's Docker image (`sdematrix docker run`, one container per model).
#
#   bash ci/ptrace-shard.sh CPUS OUT
#
# A hosted runner cannot present every model: the tracer makes a program see
# the model's CPUID, but the host must have the model's instructions (no
# AVX-512 model on a runner without AVX-512).  `sdematrix list-cpus
# --host-split` asks the ptrace backend which of CPUS this runner can execute;
# the others are NAMED, one line each with the backend's reason, in the log,
# the step summary and OUT/not-runnable.txt.  The rest run strictly (no
# skip allowance): anything else that does not run or pass fails the job.
#
# Environment: SDEMATRIX_IMAGE (default sdematrix:latest; built from the
# Dockerfile when missing), SDEMATRIX_DOCKER_BASE (the image's BASE_IMAGE),
# JOBS (containers at once, default 2), SHARD (a name for the summary).
set -euo pipefail
cpus="${1:?usage: ci/ptrace-shard.sh CPUS OUT}"
out="${2:?usage: ci/ptrace-shard.sh CPUS OUT}"
summary="${GITHUB_STEP_SUMMARY:-/dev/null}"
shard="${SHARD:-$cpus}"
mkdir -p "$out"

split="$(sdematrix list-cpus --host-split --backend ptrace --cpu "$cpus")"
runnable="$(python3 -c 'import json,sys; print(",".join(json.loads(sys.argv[1])["runnable"]))' "$split")"
python3 -c 'import json,sys
for m, why in json.loads(sys.argv[1])["cannot"].items():
    print(f"{m}: {why}")' "$split" >"$out/not-runnable.txt"

{
    echo "### ptrace shard $shard (runner CPU, in Docker)"
    echo
    if [ -s "$out/not-runnable.txt" ]; then
        echo "Models this runner cannot execute (named, not run):"
        echo
        sed 's/^/- /' "$out/not-runnable.txt"
        echo
    fi
} >>"$summary"
while IFS= read -r line; do
    echo "::notice title=ptrace shard $shard: not executable on this runner::$line"
done <"$out/not-runnable.txt"

if [ -z "$runnable" ]; then
    echo "ptrace shard $shard: no model of this shard runs on this runner" | tee -a "$summary"
    exit 0
fi
base=()
if [ -n "${SDEMATRIX_DOCKER_BASE:-}" ]; then base=(--base-image "$SDEMATRIX_DOCKER_BASE"); fi
rc=0
sdematrix docker run --backend ptrace --cpu "$runnable" --out "$out" --junit "$out/junit.xml" --jobs "${JOBS:-2}" --image "${SDEMATRIX_IMAGE:-sdematrix:latest}" "${base[@]}" || rc=$?
if [ "$rc" -eq 0 ]; then
    echo "ptrace shard $shard: every cell of $runnable passed" | tee -a "$summary"
else
    echo "ptrace shard $shard: FAILED (sdematrix docker run exit $rc)" | tee -a "$summary"
fi
exit "$rc"
