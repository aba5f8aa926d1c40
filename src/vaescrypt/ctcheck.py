"""Timing-leakage check of the generic tier (dudect-style), a documented
command, not a CI gate:

    python -m vaescrypt.ctcheck [--measurements N] [--seed S]

Builds native/tools/ctcheck.c against the library sources (needs the source
tree and a C compiler) and prints, per operation, Welch's t between the
timings of a fixed secret and of random secrets.  |t| < 4.5: no evidence of
leakage; |t| > 10: a leak.  Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from . import _buildinfo as bi


def build(work: Path) -> Path:
    src = bi.REPO_ROOT / "native" / "tools" / "ctcheck.c"
    if not src.is_file():
        raise SystemExit("ctcheck: needs the source tree (native/tools/ctcheck.c not found)")
    objs = bi.compile_objects([*bi.library_sources(), src], work / "obj")
    return bi.link_executable(objs, work / "ctcheck", extra=["-lm"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m vaescrypt.ctcheck", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--measurements", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print the raw JSON lines")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="vc-ctcheck-") as tmp:
        try:
            exe = build(Path(tmp))
        except bi.BuildError as exc:
            print(f"ctcheck: build failed: {str(exc).splitlines()[0]}", file=sys.stderr)
            return 2
        proc = subprocess.run(
            ["taskset", "-c", "0", str(exe), str(args.measurements), str(args.seed)],
            capture_output=True,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        print(f"ctcheck: {proc.stderr.strip() or 'failed'}", file=sys.stderr)
        return 2
    worst = 0.0
    control_caught = False
    for line in proc.stdout.splitlines():
        row = json.loads(line)
        if row["test"].startswith("CONTROL"):
            control_caught = row["max_abs_t"] >= 10
        else:
            worst = max(worst, row["max_abs_t"])
        if args.json:
            print(line)
        else:
            print(
                f"{row['test']:<36} n={row['measurements']:<8} max|t|={row['max_abs_t']:7.2f}"
                f"  {row['verdict']}"
            )
    if not control_caught:
        print(
            "ctcheck: the positive control was not detected: the measurement cannot see "
            "leaks on this machine (results above are meaningless)",
            file=sys.stderr,
        )
        return 2
    return 0 if worst < 10 else 1


if __name__ == "__main__":
    sys.exit(main())
