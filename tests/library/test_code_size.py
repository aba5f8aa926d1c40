"""The VAES GCM code stays within its size budget: 16 KiB of text per width.

Issue 16 allows the one-shot and main-loop kernels to grow only inside this
budget (instruction cache: a 64-byte message must not pull in a large
function).  Counted from the shipped extension's symbol table: every
function of a wide tier's GCM (one-shot, main loop and its entry points,
GHASH, the batch helper, key-power set-up, the inline tag check if it was
emitted out of line).
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

BUDGET = 16 * 1024
TIERS = ("avx512", "avx10_256", "vaes_avx2")
GCM_FN = re.compile(
    r"vc_(?P<tier>avx512|avx10_256|vaes_avx2)_"
    r"(?:gcm_\w+|ghash\w*|batch4|tag_eq)"
    # GCC's clones of a function keep its name and add a suffix: a copy with
    # constant arguments folded in (.constprop.0), a split-off part (.part.0,
    # .cold); they are that function's code and count against the budget.
    r"(?:\.(?:constprop|isra|part|cold)(?:\.\d+)?)*$"
)


def _gcm_text_sizes() -> dict[str, dict[str, int]]:
    spec = importlib.util.find_spec("vaescrypt._native")
    assert spec is not None and spec.origin, "vaescrypt._native is not built"
    sizes: dict[str, dict[str, int]] = {t: {} for t in TIERS}
    with Path(spec.origin).open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        assert symtab is not None, "the extension is stripped: no symbol sizes to check"
        for sym in symtab.iter_symbols():
            m = GCM_FN.match(sym.name)
            if m and sym["st_info"]["type"] == "STT_FUNC":
                sizes[m["tier"]][sym.name] = sym["st_size"]
    return sizes


@pytest.mark.parametrize("tier", TIERS)
def test_gcm_text_within_budget(tier: str) -> None:
    fns = _gcm_text_sizes()[tier]
    # the functions that must exist, or the sum would be vacuous
    bases = {n.split(".")[0] for n in fns}
    assert {f"vc_{tier}_gcm_oneshot", f"vc_{tier}_gcm_crypt"} <= bases, sorted(fns)
    total = sum(fns.values())
    detail = ", ".join(f"{n.removeprefix(f'vc_{tier}_')} {s}" for n, s in sorted(fns.items()))
    assert total <= BUDGET, f"{tier} GCM text {total} B > {BUDGET} B: {detail}"
