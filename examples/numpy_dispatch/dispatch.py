"""What numpy's own CPU dispatcher chose, and a workload that runs it.

    python3 dispatch.py

numpy checks its build baseline at import (on a CPU below it the import
raises numpy's "your machine doesn't support" RuntimeError) and picks, per
kernel, the best of its dispatch targets the CPU supports.  Prints one JSON
line: numpy's baseline, the dispatch targets it found usable
(``__cpu_dispatch__`` filtered by ``__cpu_features__``), then runs kernels
numpy dispatches (float32 add/sqrt/exp, int32 sort, float64 sum) and prints
their checksum.  Under `sdematrix exec` the CPU is the model's.
"""

from __future__ import annotations

import json

import numpy as np
from numpy._core import _multiarray_umath as mu


def main() -> None:
    found = [t for t in mu.__cpu_dispatch__ if mu.__cpu_features__.get(t)]
    print(json.dumps({"numpy": np.__version__, "baseline": list(mu.__cpu_baseline__),
                      "dispatch": list(mu.__cpu_dispatch__), "found": found}))  # fmt: skip
    x = np.arange(4096, dtype=np.float32) / 512.0
    y = np.sqrt(x + 1.0) * np.exp(-x)
    k = (np.arange(20000, dtype=np.int64) * 2654435761 % 1000003).astype(np.int32)
    s = np.sort(k)
    print(
        f"{float(y.sum(dtype=np.float64)):.6f} {int(s[::997].sum())} {bool((s[1:] >= s[:-1]).all())}"
    )


if __name__ == "__main__":
    main()
