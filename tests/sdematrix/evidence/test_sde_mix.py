"""The SDE mix-file parser, on the real SDE 9.24 fixture and on files in its format."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from doubles.sde_mix_text import LIB, iform_file

from sdematrix.errors import MixFileError
from sdematrix.evidence.mix import Selector, top_offenders
from sdematrix.evidence.sde_mix import (
    classify,
    forbid_coverage_problem,
    parse_mix_file,
    parse_mix_text,
    unlisted_count,
)

FIXTURE = Path(__file__).resolve().parents[3] / "tests" / "data" / "sde" / "sde-9.24.0-mix-out.txt"


@pytest.fixture(scope="module")
def fixture_mix():
    return parse_mix_file(FIXTURE)


def test_fixture_overall_is_the_final_global_block(fixture_mix):
    m = fixture_mix
    assert m.source == "sde"
    assert m.overall.total == 187998768
    assert m.overall.isa_ext["AVX2"] == 1090
    assert m.overall.isa_set["AVX2"] == 1090
    # the first EMIT_GLOBAL_DYNAMIC_STATS block is the empty one, and was not used
    assert m.meta["early_global_totals"] == [0]
    assert m.meta["sde_version"] == "9.24.0 external"
    assert m.meta["mix_version"] == "10"
    assert m.meta["iform"] is False
    # opcode rows of the global block add up to its *total
    assert sum(m.overall.forms.values()) == m.overall.total
    assert m.overall.mnemonic["XGETBV"] == 2
    assert m.overall.category["AVX2"] > 0


def test_fixture_threads_functions_images(fixture_mix):
    m = fixture_mix
    assert len(m.threads) == 8
    assert m.threads[0].total == 12036391
    # the thread histograms sum to the global one
    assert sum(t.total for t in m.threads) == m.overall.total
    assert m.meta["functions_from"] == "global"
    names = [f.name for f in m.functions]
    assert names[0] == "omp_get_num_procs"
    f0 = m.functions[0]
    assert f0.image == "/lib/x86_64-linux-gnu/libgomp.so.1"
    assert (f0.lo, f0.hi) == (0x7F6BD7898F10, 0x7F6BD7898F8B)
    assert f0.counts.total == 182316034
    assert "check_match" in names
    # images are the per-image sums of the functions
    for img, counts in m.images.items():
        assert counts.total == sum(f.counts.total for f in m.functions if f.image == img)
    assert m.scoped("libgomp*").total == m.images["/lib/x86_64-linux-gnu/libgomp.so.1"].total
    assert 0.99 < m.meta["function_coverage"] <= 1.0
    assert any(r["image"] == "[vdso]" for r in m.meta["image_addresses"])


def test_fixture_parses_fast():
    t0 = time.perf_counter()
    parse_mix_file(FIXTURE)
    assert time.perf_counter() - t0 < 0.5


def test_fixture_round_trips_through_json(fixture_mix, tmp_path):
    from sdematrix.evidence.mix import Mix

    fixture_mix.save(tmp_path / "m.json")
    back = Mix.load(tmp_path / "m.json")
    assert back.overall.total == fixture_mix.overall.total
    assert back.overall.forms == fixture_mix.overall.forms


@pytest.mark.parametrize(
    ("name", "form"),
    [
        ("VAESENC_ZMMu128_ZMMu128_ZMMu128_AVX512", ("VAESENC", "evex", "zmm")),
        ("VAESENC_YMMu128_YMMu128_YMMu128_AVX512", ("VAESENC", "evex", "ymm")),
        ("VAESENC_YMMu128_YMMu128_YMMu128", ("VAESENC", "vex", "ymm")),
        ("VAESENC_XMMdq_XMMdq_XMMdq", ("VAESENC", "vex", "xmm")),
        ("AESENC_XMMdq_XMMdq", ("AESENC", "legacy", "xmm")),
        ("PCLMULQDQ_XMMdq_XMMdq_IMMb", ("PCLMULQDQ", "legacy", "xmm")),
        ("VPCLMULQDQ_ZMMu128_ZMMu64_ZMMu64_IMM8_AVX512", ("VPCLMULQDQ", "evex", "zmm")),
        ("VPTERNLOGD_YMMu32_MASKmskw_YMMu32_YMMu32_IMM8_AVX512", ("VPTERNLOGD", "evex", "ymm")),
        ("KMOVW_MASKmskw_GPR32u32_AVX512", ("KMOVW", "vex", "none")),
        ("MOVSD_XMM_XMMsd_XMMsd_0F10", ("MOVSD_XMM", "legacy", "xmm")),
        ("MOV_GPRv_GPRv_89", ("MOV", "legacy", "none")),
        ("ADD_LOCK_MEMv_IMMb", ("ADD_LOCK", "legacy", "none")),
        ("CALL_NEAR_RELBRd", ("CALL_NEAR", "legacy", "none")),
        ("SHLX_GPR64q_GPR64q_GPR64q", ("SHLX", "vex", "none")),
        # iclass (default) mode
        ("AESENC", ("AESENC", "legacy", "xmm")),
        ("VAESENC", ("VAESENC", "vex", "none")),
        ("VPTERNLOGD", ("VPTERNLOGD", "evex", "none")),
        ("VMOVDQU64", ("VMOVDQU64", "evex", "none")),
        ("REP_STOSQ", ("REP_STOSQ", "legacy", "none")),
        ("VERW", ("VERW", "legacy", "none")),
    ],
)
def test_classify(name, form):
    assert classify(name) == form


def test_iform_file_forms_and_scopes():
    m = parse_mix_text(iform_file(), "t.mix")
    o = m.overall
    assert o.total == 1098
    assert o.forms[("VAESENC", "evex", "zmm")] == 900
    assert o.forms[("VAESENC", "vex", "ymm")] == 40
    assert o.width["zmm"] == 1050
    assert o.encoding["evex"] == 1050 and o.encoding["vex"] == 40
    assert o.isa_set["AVX512_VAES_512"] == 1000
    assert m.meta["iform"] is True
    assert m.meta["groups"]["avx512"] == 1050
    assert m.meta["early_global_totals"] == [0]
    # no global per-function section: merged from the thread's
    assert m.meta["functions_from"] == "threads"
    assert {f.name for f in m.functions} == {
        "vc_gcm_enc_avx512",
        "vc_ghash_vaes(unsigned char*, int)",
    }
    assert m.scoped("libvaescrypt*").total == 1098
    zmm = Selector(width="zmm")
    assert zmm.count(m.scoped("libvaescrypt*")) == 1050
    rows = top_offenders(m, Selector(mnemonic="VAESENC", width="ymm"))
    assert rows == [("vc_ghash_vaes(unsigned char*, int)", LIB, ("VAESENC", "vex", "ymm"), 40)]


def test_truncated_file_names_the_line():
    text = iform_file()
    n = len(text.splitlines())
    with pytest.raises(MixFileError, match=r"t\.mix:\d+: .*truncated"):
        parse_mix_text(iform_file(truncate_at=n - 4), "t.mix")


def test_block_cut_by_next_header_is_an_error():
    lines = iform_file().splitlines()
    # drop the *total of the thread block: the END_DYNAMIC_STATS line comes too early
    first_total = next(i for i, ln in enumerate(lines) if ln.startswith("*total"))
    del lines[first_total]
    with pytest.raises(MixFileError) as ei:
        parse_mix_text("\n".join(lines), "t.mix")
    msg = str(ei.value)
    assert f"t.mix:{first_total + 1}:" in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("bad", "pattern"),
    [
        ("VAESENC_ZMMu128_ZMMu128_ZMMu128_AVX512   12x4", "not an integer"),
        ("VAESENC  1  2", "expected 'NAME COUNT'"),
        ("VAESENC  -5", "negative"),
    ],
)
def test_corrupt_rows(bad, pattern):
    lines = iform_file().splitlines()
    i = next(i for i, ln in enumerate(lines) if ln.startswith("MOV_GPRv_MEMv"))
    lines[i] = bad
    with pytest.raises(MixFileError, match=rf"t\.mix:{i + 1}: .*{pattern}"):
        parse_mix_text("\n".join(lines), "t.mix")


def test_missing_global_block_and_empty_file(tmp_path):
    with pytest.raises(MixFileError, match="no '# \\$global-dynamic-counts' block"):
        parse_mix_text("# Mix output version 10\n", "x.mix")
    with pytest.raises(MixFileError, match="global-dynamic-counts"):
        parse_mix_text("", "x.mix")
    with pytest.raises(MixFileError, match="cannot read mix file"):
        parse_mix_file(tmp_path / "missing.mix")


def test_bad_function_header():
    text = iform_file().replace("IMG: /opt", "IMAGE /opt", 1)
    with pytest.raises(MixFileError, match="dynamic-counts-for-function"):
        parse_mix_text(text, "t.mix")


def test_fixture_partial_function_coverage_makes_image_forbids_undecidable(fixture_mix):
    """The real file lists 10 functions = 99.49 % of the region: what ran in
    the other functions is invisible to an image scope."""
    m = fixture_mix
    assert len(m.functions) == 10
    assert m.meta["function_covered"] == 187044305 and m.meta["region_total"] == 187998768
    assert f"{100 * m.meta['function_coverage']:.2f}" == "99.49"
    tz = Selector(mnemonic="TZCNT")
    # all 342 TZCNT of the run are outside the listed functions
    assert tz.count(m.overall) == 342 and unlisted_count(m, tz) == 342
    assert tz.count(m.scoped("cc")) == 0  # a forbid on it would "pass" ...
    why = forbid_coverage_problem(m, "cc", [Selector(mnemonic="AESENC"), tz])
    assert why is not None  # ... but it is undecidable, and says why
    assert "99.49%" in why and "187044305 of 187998768" in why and "{mnemonic=TZCNT} x342" in why
    assert "AESENC" not in why
    # decidable: nothing forbidden ran anywhere, or the scope is the whole run
    assert forbid_coverage_problem(m, "cc", [Selector(mnemonic="AESENC")]) is None
    assert forbid_coverage_problem(m, "all", [tz]) is None
    assert forbid_coverage_problem(m, "cc", []) is None


def test_forbidden_rows_all_in_listed_functions_are_decidable():
    """Partial coverage, but every forbidden instruction is in a listed
    function: the scoped count is exact (here it fails the check, rightly)."""
    fn = (
        "# $dynamic-counts-for-function: f  IMG: /bin/vc-probe at [0x1000, 0x1100)  50.000%\n"
        "#\nVAESENC_ZMMu128_ZMMu128_ZMMu128_AVX512 5\nADD_GPRv_IMMb 5\n*total 10\n"
    )
    text = (
        "# Mix output version 10\n# EMIT_GLOBAL_DYNAMIC_STATS   EMIT# 1\n"
        + fn
        + "# $global-dynamic-counts\n#\nVAESENC_ZMMu128_ZMMu128_ZMMu128_AVX512 5\n"
        "ADD_GPRv_IMMb 15\n*total 20\n"
    )
    m = parse_mix_text(text)
    assert m.meta["function_coverage"] == 0.5
    zmm = Selector(width="zmm")
    assert unlisted_count(m, zmm) == 0 and zmm.count(m.scoped("vc-probe*")) == 5
    assert forbid_coverage_problem(m, "vc-probe*", [zmm]) is None
    add = Selector(mnemonic="ADD")
    assert unlisted_count(m, add) == 10
    assert "50.00%" in (forbid_coverage_problem(m, "vc-probe*", [add]) or "")
