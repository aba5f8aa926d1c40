#!/usr/bin/env bash
# Runs INSIDE the fault VM (ci/faultvm/init chroots into the host's root,
# overlaid on a tmpfs, and starts this), with the repository at $1:
#   1. the guest really has CPUID faulting (else every fault-mode test would
#      skip and read as green): /proc/cpuinfo shows cpuid_fault and
#      arch_prctl(ARCH_SET_CPUID) succeeds;
#   2. the fault-mode tests (pytest -k "fault and not bp" over the tracer, ptrace backend,
#      doctor and fault-mode test files), timeouts scaled by
#      $SDEMATRIX_TIMEOUT_SCALE; the only skips allowed are the AVX-512 ones
#      (TCG has no AVX-512), each with its exact reason;
#   3. `sdematrix run --backend ptrace --cpuid-mode fault --cpu hsw,snb,p4p`,
#      every cell passing.
# Exit 0 when all hold; otherwise non-zero after one "fault-vm: FAIL:" line.
set -uo pipefail
repo="${1:?usage: guest.sh REPO}"
# the host's PATH, its python3's directory first (ci/fault-vm.sh wrote it)
# shellcheck disable=SC1091
. /tmp/faultvm.env
cd "$repo" || { echo "fault-vm: FAIL: no $repo in the guest"; exit 1; }
export PYTHONPATH="$repo/src"
export PYTHONDONTWRITEBYTECODE=1
t0=$SECONDS
say() { echo "fault-vm: guest: $* ($((SECONDS - t0)) s)"; }
fail() { echo "fault-vm: FAIL: $*"; exit 1; }

say "kernel $(uname -r), CPU: $(sed -n 's/^model name\t: //p' /proc/cpuinfo | head -n 1)," \
    "vendor $(sed -n 's/^vendor_id\t: //p' /proc/cpuinfo | head -n 1), $(nproc) vCPU," \
    "timeout scale ${SDEMATRIX_TIMEOUT_SCALE:-1}"
grep -qw cpuid_fault /proc/cpuinfo \
    || fail "the guest kernel shows no cpuid_fault: the QEMU CPUID-faulting patch is not in effect"
why="$(python3 -c 'from sdematrix.backends.ptrace.backend import cpuid_faulting_available as f; print(f())')" \
    || fail "python3 cannot import sdematrix in the guest"
[ "$why" = "True" ] || fail "the guest has cpuid_fault but ARCH_SET_CPUID fails: $why"
say "CPUID faulting: available (arch_prctl ARCH_SET_CPUID works)"

# -- 2: the fault-mode tests ------------------------------------------------
xml=/tmp/fault-tests.xml
python3 -m pytest -v -x -p no:cacheprovider -o addopts= -rs --junitxml="$xml" -k "fault and not bp" \
    tests/sdematrix/backends/test_fault_mode.py tests/sdematrix/backends/test_tracer.py tests/sdematrix/backends/test_backend_ptrace.py tests/sdematrix/cli/test_doctor.py
prc=$?
# Every skip must be an AVX-512 one (this guest's CPU has none); anything
# else skipped means a fault-mode path silently did not run.
summary="$(python3 - "$xml" <<'EOF'
import sys
import xml.etree.ElementTree as ET

root = ET.parse(sys.argv[1]).getroot()
n = {"passed": 0, "failed": 0, "skipped": 0}
bad = []
for case in root.iter("testcase"):
    name = f"{case.get('classname')}::{case.get('name')}"
    skip = case.find("skipped")
    if case.find("failure") is not None or case.find("error") is not None:
        n["failed"] += 1
    elif skip is not None:
        n["skipped"] += 1
        msg = skip.get("message", "")
        if "AVX-512" not in msg:
            bad.append(f"{name}: {msg}")
    else:
        n["passed"] += 1
print(f"{n['passed']} passed, {n['failed']} failed, {n['skipped']} skipped (AVX-512)")
for b in bad:
    print(f"not an AVX-512 skip: {b}")
sys.exit(1 if bad or n["passed"] == 0 else 0)
EOF
)"
src=$?
while IFS= read -r line; do echo "fault-vm: guest: $line"; done <<<"$summary"
[ "$prc" -eq 0 ] || fail "fault-mode tests failed in the guest (pytest exit $prc): $(head -n 1 <<<"$summary")"
[ "$src" -eq 0 ] || fail "fault-mode tests skipped something other than AVX-512: $(sed -n 2p <<<"$summary")"
say "fault-mode tests: $(head -n 1 <<<"$summary")"

# -- 3: a small fault-mode matrix run ----------------------------------------
out=/tmp/fault-run
python3 -m sdematrix run --backend ptrace --cpuid-mode fault --cpu hsw,snb,p4p \
    --out "$out" --jobs "$(nproc)" >/tmp/fault-run.log 2>&1
rrc=$?
tail -n 5 /tmp/fault-run.log | sed 's/^/fault-vm: guest: run: /'
[ "$rrc" -eq 0 ] || fail "sdematrix run --cpuid-mode fault on hsw,snb,p4p exit $rrc: $(tail -n 1 /tmp/fault-run.log)"
say "sdematrix run --backend ptrace --cpuid-mode fault --cpu hsw,snb,p4p: passed"
