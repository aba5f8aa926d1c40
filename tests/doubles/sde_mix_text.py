"""SDE ``-mix`` output written by hand in SDE's format, for the mix parser's
tests (test_sde_mix.py) and the bad-input tests (test_bad_inputs.py)."""

from __future__ import annotations

__all__ = ["AVX512_ROWS", "LIB", "VEX_ROWS", "iform_file", "mix_block"]


def mix_block(header: str, rows: list[tuple[str, int]], tid: int | None = 0) -> list[str]:
    """One block of an SDE mix file: header, per-opcode rows, total."""
    out = ["#", header, "#"]
    if tid is not None:
        out.append(f"# TID {tid}")
    out += ["#       opcode                 count", "#"]
    out += [f"{n:<60}{c:>20}" for n, c in rows]
    out.append(f"*total{sum(c for n, c in rows if not n.startswith('*')):>74}")
    return out


LIB = "/opt/vc/libvaescrypt.so"
AVX512_ROWS = [
    ("*isa-set-AVX512_VAES_512", 1000),
    ("*isa-set-AVX512_VPCLMULQDQ_512", 50),
    ("*category-AES", 1000),
    ("*avx512", 1050),
    ("VAESENC_ZMMu128_ZMMu128_ZMMu128_AVX512", 900),
    ("VAESENCLAST_ZMMu128_ZMMu128_ZMMu128_AVX512", 100),
    ("VPCLMULQDQ_ZMMu128_ZMMu64_ZMMu64_IMM8_AVX512", 50),
    ("MOV_GPRv_MEMv", 7),
]
VEX_ROWS = [("*isa-set-VAES", 40), ("VAESENC_YMMu128_YMMu128_YMMu128", 40), ("RET_NEAR", 1)]


def iform_file(truncate_at: int | None = None) -> str:
    """A small SDE ``-mix -iform`` output file (cut after `truncate_at` lines)."""
    lines = [
        "# Mix output version 10",
        "# Intel(R) SDE version: 9.33.0 external",
        "# EMIT_DYNAMIC_STATS FOR TID 0  OS-TID 42 EMIT #1",
        *mix_block("# $dynamic-counts", AVX512_ROWS + VEX_ROWS),
        "# END_DYNAMIC_STATS",
        "# EMIT_PER_FUNCTION_STATS FOR TID 0  OS-TID 42 EMIT# 1",
        *mix_block(
            f"# $dynamic-counts-for-function: vc_gcm_enc_avx512  IMG: {LIB} at "
            "[0x7f0000001000, 0x7f0000002000)  94.000%",
            AVX512_ROWS,
        ),
        *mix_block(
            f"# $dynamic-counts-for-function: vc_ghash_vaes(unsigned char*, int)  IMG: {LIB} at "
            "[0x7f0000003000, 0x7f0000003100)   4.000%",
            VEX_ROWS,
        ),
        "# END_PER_FUNCTION_STATS ",
        "# EMIT_GLOBAL_DYNAMIC_STATS",
        *mix_block("# $dynamic-counts", []),
        "# END_DYNAMIC_STATS",
        "# EMIT_GLOBAL_DYNAMIC_STATS   EMIT# 1",
        *mix_block("# $global-dynamic-counts", AVX512_ROWS + VEX_ROWS, tid=None),
        "",
        "# END_GLOBAL_DYNAMIC_STATS",
    ]
    if truncate_at is not None:
        lines = lines[:truncate_at]
    return "\n".join(lines) + "\n"
