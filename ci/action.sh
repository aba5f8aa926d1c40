#!/usr/bin/env bash
# The script of the composite action (action.yml at the top level), also run
# by tests/sdematrix/integrations/test_action.py.  Inputs arrive as environment variables:
#
#   SDEMATRIX_PROGRAM  a program and its arguments (whitespace-separated):
#                      `sdematrix exec` runs it as if on each model; empty:
#                      the built-in vaescrypt matrix (`sdematrix run`)
#   SDEMATRIX_CPUS     comma-separated models, or "all" (default: all for a
#                      program, the default run for the built-in matrix)
#   SDEMATRIX_BACKEND  auto | ptrace | sde (| qemu for the built-in matrix)
#   SDEMATRIX_EXPECT   expectations file for the program (sdematrix exec --expect)
#   SDEMATRIX_MODELS   a models-only file of custom models (exec --models)
#   SDEMATRIX_JUNIT    JUnit XML file to write (default: sdematrix-junit.xml)
#   SDEMATRIX_REPORT   directory for report.html and summary.md
#                      (default: sdematrix-report)
#   SDEMATRIX_OUT      results directory (default: sdematrix-results)
#   SDEMATRIX_ARGS     more options for the sdematrix command (whitespace-separated)
#
# The markdown summary goes to $GITHUB_STEP_SUMMARY when it is set (sdematrix
# writes it with --report).  Exit status: sdematrix's (0 all passed, 1 some
# model or cell failed, 2 bad input).
set -euo pipefail
cpus="${SDEMATRIX_CPUS:-}"
backend="${SDEMATRIX_BACKEND:-auto}"
junit="${SDEMATRIX_JUNIT:-sdematrix-junit.xml}"
report="${SDEMATRIX_REPORT:-sdematrix-report}"
out="${SDEMATRIX_OUT:-sdematrix-results}"
read -r -a extra <<<"${SDEMATRIX_ARGS:-}"
read -r -a program <<<"${SDEMATRIX_PROGRAM:-}"

cmd=()
if [ "${#program[@]}" -gt 0 ]; then
    cmd=(exec --cpu "${cpus:-all}" --backend "$backend" --junit "$junit" --report "$report"
         --out "$out")
    if [ -n "${SDEMATRIX_EXPECT:-}" ]; then cmd+=(--expect "$SDEMATRIX_EXPECT"); fi
    if [ -n "${SDEMATRIX_MODELS:-}" ]; then cmd+=(--models "$SDEMATRIX_MODELS"); fi
    cmd+=("${extra[@]}" -- "${program[@]}")
else
    if [ -n "${SDEMATRIX_EXPECT:-}" ] || [ -n "${SDEMATRIX_MODELS:-}" ]; then
        echo "::error title=sdematrix action::expect and models need a program" \
             "(they judge a program of yours; the built-in matrix has its own)"
        exit 2
    fi
    cmd=(run --backend "$backend" --junit "$junit" --report "$report" --out "$out")
    if [ -n "$cpus" ]; then cmd+=(--cpu "$cpus"); fi
    cmd+=("${extra[@]}")
fi
echo "sdematrix ${cmd[*]}"
rc=0
sdematrix "${cmd[@]}" || rc=$?
case "$rc" in
    0) echo "sdematrix: every model passed (report: $report/report.html, JUnit: $junit)" ;;
    1) echo "::error title=sdematrix::some model failed (report: $report/report.html, JUnit: $junit)" ;;
    *) echo "::error title=sdematrix::sdematrix exited $rc (see the log above)" ;;
esac
exit "$rc"
