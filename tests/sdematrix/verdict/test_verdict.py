"""Verdicts from fabricated RunResults: every broken rule is one line of the failure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from doubles.fake_matrix import fake_digest, make_matrix, sel

from sdematrix.backends.base import RunResult, Violation
from sdematrix.evidence.cpuid_seen import profiled
from sdematrix.evidence.mix import Mix
from sdematrix.integrations.pytest_plugin import classify
from sdematrix.results.outcome_json import outcome_to_json
from sdematrix.spec.matrix_file import load_matrix
from sdematrix.spec.models import Cell
from sdematrix.verdict.cell import judge
from sdematrix.verdict.reasons import Kind, cannot_run_why

LIB = "/usr/lib/libvaescrypt.so"
SHIPPED = Path(__file__).resolve().parents[3] / "sde_matrix.yaml"


def aesni_mix() -> Mix:
    m = Mix(source="sde")
    for fn, mn, n in (
        ("vc_cfb8_aesni", "AESENC", 160),
        ("vc_cfb8_aesni", "AESENCLAST", 16),
        ("vc_gcm_aesni", "PCLMULQDQ", 8),
    ):
        m.add_instruction(
            image=LIB,
            function=fn,
            mnemonic=mn,
            encoding="legacy",
            width="xmm",
            count=n,
            isa_set="AES",
        )
    m.add_instruction(
        image=LIB, function="memcpy", mnemonic="MOV", encoding="legacy", width="none", count=50
    )
    return m


def probe(cell: Cell, path: str, **kw) -> dict:
    """A probe report that saw exactly the cell's model (as a faithful backend gives)."""
    seen = profiled(make_matrix().models[cell.cpu])
    d = {
        "probe": 1,
        "status": "ok",
        "mode": cell.mode,
        "dir": cell.direction,
        "key_bits": cell.key_bits,
        "length": cell.length,
        "seed": 1,
        "path": path,
        "features": sorted(seen.features),
        "vendor": seen.vendor,
        "family": seen.family,
        "model": seen.model,
        "xcr0": hex(seen.xcr0),
        "digest": fake_digest(cell, 1),
    }
    d.update(kw)
    return d


def ok_result(cell: Cell, path: str, mix: Mix, **kw) -> RunResult:
    return RunResult(
        backend="sde",
        status="ok",
        exit_code=0,
        probe=probe(cell, path, **kw),
        mix=mix,
        backend_version="9.33.0",
        duration_s=1.5,
    )


def test_pass():
    matrix = make_matrix()
    cell = Cell("hsw", "cfb8", "encrypt", 128, 64)
    o = judge(
        cell,
        matrix.models["hsw"],
        matrix,
        ok_result(cell, "aesni", aesni_mix()),
        fake_digest(cell, 1),
    )
    assert o.status == "pass", o.reasons
    assert o.reasons == [] and o.path == o.expected_path == "aesni"
    assert o.backend == "sde" and o.backend_version == "9.33.0" and o.duration_s == 1.5


def test_expecting_avx512_for_cfb8_fails_with_path_and_missing_zmm():
    matrix = make_matrix()
    matrix.expected[("spr", "cfb8", "encrypt")] = "avx512"  # a wrong expectation
    cell = Cell("spr", "cfb8", "encrypt", 128, 64)
    o = judge(
        cell,
        matrix.models["spr"],
        matrix,
        ok_result(cell, "aesni", aesni_mix()),
        fake_digest(cell, 1),
    )
    assert o.status == "fail"
    assert o.reasons[0] == "path: expected avx512, got aesni"
    assert o.reasons[1] == (
        "required by path avx512 but not executed: {mnemonic=VAESENC*, width=zmm}"
    )
    # and what ran instead, by function
    assert o.reasons[2].startswith("path: seen instead (top vector/crypto instructions): ")
    assert "AESENC(legacy,xmm) x160 in vc_cfb8_aesni" in o.reasons[2]
    assert len(o.reasons) == 3
    assert all("\n" not in r for r in o.reasons)
    # the pytest plugin files each reason under its check by the kind the
    # judge gave it: what ran instead explains the wrong path (dispatch)
    assert [classify(r) for r in o.reasons] == ["dispatch", "mix", "dispatch"]
    assert [r.kind for r in o.reasons] == [Kind.DISPATCH, Kind.MIX, Kind.DISPATCH]


def test_zmm_requirement_added_to_aesni_fails_naming_it():
    matrix = make_matrix()
    sig = matrix.signatures["aesni"]
    matrix.signatures["aesni"] = dataclasses.replace(
        sig, require={**sig.require, "*": (*sig.require["*"], sel(width="zmm"))}
    )
    cell = Cell("hsw", "cfb8", "decrypt", 128, 64)
    o = judge(
        cell,
        matrix.models["hsw"],
        matrix,
        ok_result(cell, "aesni", aesni_mix()),
        fake_digest(cell, 1),
    )
    assert o.status == "fail"
    assert o.reasons[0] == "required by path aesni but not executed: {width=zmm}"
    assert o.reasons[1].startswith("required by path aesni: seen instead")
    assert "AESENC(legacy,xmm)" in o.reasons[1]
    assert len(o.reasons) == 2
    # The path was right: only the mix check fails (the pytest plugin files
    # reasons by check), not dispatch.
    assert {classify(r) for r in o.reasons} == {"mix"}


def test_forbidden_instructions_are_named_with_functions():
    matrix = make_matrix()
    mix = aesni_mix()
    mix.add_instruction(
        image=LIB,
        function="vc_gcm_avx512_enc",
        mnemonic="VAESENC",
        encoding="evex",
        width="zmm",
        count=640,
        isa_set="AVX512_VAES_512",
    )
    mix.add_instruction(
        image=LIB,
        function="vc_ghash_avx512",
        mnemonic="VPCLMULQDQ",
        encoding="evex",
        width="zmm",
        count=32,
    )
    cell = Cell("hsw", "gcm", "encrypt", 128, 64)
    o = judge(
        cell, matrix.models["hsw"], matrix, ok_result(cell, "aesni", mix), fake_digest(cell, 1)
    )
    assert o.status == "fail"
    zmm = [r for r in o.reasons if "{width=zmm}" in r]
    assert zmm == [
        (
            "forbidden for path aesni but executed 672x: {width=zmm} -- "
            "VAESENC(evex,zmm) x640 in vc_gcm_avx512_enc (libvaescrypt.so); "
            "VPCLMULQDQ(evex,zmm) x32 in vc_ghash_avx512 (libvaescrypt.so)"
        )
    ]
    isa = [r for r in o.reasons if "isa_set=AVX512*" in r]
    assert isa == [
        "forbidden for path aesni but executed 640x: {isa_set=AVX512*} -- isa_set AVX512_VAES_512 x640"
    ]


def test_chip_violation_digest_and_status_all_reported():
    matrix = make_matrix()
    cell = Cell("hsw", "gcm", "encrypt", 128, 64)
    res = ok_result(cell, "aesni", aesni_mix(), digest="00" * 32)
    res.violations = [
        Violation(
            "not valid for chip HASWELL: vaesenc zmm0",
            0x401136,
            "vc_gcm_avx512_enc",
            LIB,
            "VAESENC",
            "62 f2",
        )
    ]
    o = judge(cell, matrix.models["hsw"], matrix, res, fake_digest(cell, 1))
    assert o.status == "fail"
    assert (
        "chip check (hsw): VAESENC vc_gcm_avx512_enc in libvaescrypt.so at 0x401136 [62 f2]: "
        "not valid for chip HASWELL: vaesenc zmm0"
    ) in o.reasons
    assert f"digest: expected {fake_digest(cell, 1)}, got {'00' * 32}" in o.reasons
    by_check = {str(r): classify(r) for r in o.reasons}
    assert {k for r, k in by_check.items() if r.startswith("chip check")} == {"chip"}
    assert {k for r, k in by_check.items() if r.startswith("digest:")} == {"answer"}

    res2 = ok_result(cell, "aesni", aesni_mix(), status="unsupported", message="no VAES")
    o2 = judge(cell, matrix.models["hsw"], matrix, res2, fake_digest(cell, 1))
    assert o2.status == "fail" and "probe status 'unsupported': no VAES" in o2.reasons
    assert {classify(r) for r in o2.reasons if r.startswith("probe status")} == {"answer"}
    assert not any(r.startswith("digest") for r in o2.reasons)


def test_chip_check_abort_without_probe_is_fail_not_error():
    matrix = make_matrix()
    cell = Cell("hsw", "gcm", "encrypt", 128, 64)
    res = RunResult(
        backend="sde",
        status="ok",
        exit_code=1,
        violations=[Violation("not valid for chip HASWELL", 0x10, "f")],
    )
    o = judge(cell, matrix.models["hsw"], matrix, res, fake_digest(cell, 1))
    assert o.status == "fail"
    assert any(r.startswith("chip check (hsw): f at 0x10") for r in o.reasons)


def test_errors_and_skips():
    matrix = make_matrix()
    cell = Cell("spr", "gcm", "encrypt", 128, 64)
    m = matrix.models["spr"]
    t = RunResult(
        backend="sde",
        status="timeout",
        reason="timed out after 5s",
        stderr_tail="line1\nlast words",
    )
    o = judge(cell, m, matrix, t, "x")
    assert o.status == "error" and o.reasons == ["timed out after 5s"]
    assert o.reasons[0].kind is Kind.BACKEND_ERROR
    assert outcome_to_json(o)["reason_kinds"] == ["backend-error"]
    assert "last words" in o.output_tail
    no_json = RunResult(backend="sde", status="ok", exit_code=139, stdout_tail="garbage")
    o = judge(cell, m, matrix, no_json, "x")
    assert o.status == "error" and o.reasons == ["no probe JSON in the output (exit code 139)"]
    assert "garbage" in o.output_tail
    s = RunResult(
        backend="auto", status="skip", reason="no backend can run spr: sde: not installed"
    )
    o = judge(cell, m, matrix, s, None)
    assert o.status == "skip" and o.message == "no backend can run spr: sde: not installed"
    assert o.reasons[0].kind is Kind.CANNOT_RUN
    assert cannot_run_why(o.status, o.reasons) == "no backend can run spr: sde: not installed"
    # a cell the user named: an error, the same kind, its text prefixed
    named = RunResult(
        backend="auto",
        status="error",
        cannot_run=True,
        reason="cannot run here: no backend can run spr: sde: not installed",
    )
    o = judge(cell, m, matrix, named, None)
    assert o.status == "error"
    assert o.reasons == ["cannot run here: no backend can run spr: sde: not installed"]
    assert o.reasons[0].kind is Kind.CANNOT_RUN
    assert cannot_run_why(o.status, o.reasons) == "no backend can run spr: sde: not installed"
    # the same text without the runner's flag is a backend error, not a cell
    # that cannot run here: the kind decides, never the text
    o = judge(cell, m, matrix, dataclasses.replace(named, cannot_run=False), None)
    assert o.reasons[0].kind is Kind.BACKEND_ERROR and cannot_run_why(o.status, o.reasons) is None


def test_missing_mix_is_a_failure_reason():
    matrix = make_matrix()
    cell = Cell("hsw", "cfb8", "encrypt", 128, 64)
    res = ok_result(cell, "aesni", aesni_mix())
    res.mix = None
    o = judge(cell, matrix.models["hsw"], matrix, res, fake_digest(cell, 1))
    assert o.status == "fail"
    assert o.reasons == ["no instruction mix to check the path signature against"]


def test_cpuid_seen_differs_from_profile_fails_naming_features():
    """The program saw a CPU other than the model (a CPUID the backend did not
    intercept): the cell fails naming each feature, under the dispatch check."""
    matrix = make_matrix()
    hsw = load_matrix(SHIPPED).models["hsw"]  # a real profile (the fake has none)
    cell = Cell("hsw", "cfb8", "encrypt", 128, 64)
    want = profiled(hsw)
    gone = "avx2"
    assert gone in want.features and "avx512f" not in want.features
    seen = sorted((want.features - {gone}) | {"avx512f", "vaes"})
    o = judge(
        cell,
        hsw,
        matrix,
        ok_result(
            cell,
            "aesni",
            aesni_mix(),
            features=seen,
            vendor=want.vendor,
            family=want.family,
            model=want.model,
            xcr0=hex(want.xcr0 ^ 0xE0),
        ),
        fake_digest(cell, 1),
    )
    assert o.status == "fail"
    assert {classify(r) for r in o.reasons} == {"dispatch"}, o.reasons
    lines = [r for r in o.reasons if r.startswith("cpuid:")]
    assert any("saw avx512f, vaes which the hsw profile lacks" in r for r in lines), lines
    assert any(f"did not see {gone} which the hsw profile has" in r for r in lines), lines
    assert any(f"XCR0 seen {want.xcr0 ^ 0xE0:#x}, profile {want.xcr0:#x}" in r for r in lines)


def test_probe_without_features_is_not_a_pass():
    matrix = make_matrix()
    cell = Cell("hsw", "cfb8", "encrypt", 128, 64)
    res = ok_result(cell, "aesni", aesni_mix())
    assert res.probe is not None
    del res.probe["features"]
    o = judge(cell, matrix.models["hsw"], matrix, res, fake_digest(cell, 1))
    assert o.status == "fail"
    assert "cpuid: the probe did not report the features its dispatcher detected" in o.reasons


def test_empty_region_is_an_error_not_a_pass():
    """Marks never seen: zero instructions counted.  Even the generic path,
    whose signature requires nothing, must not pass on no evidence."""
    matrix = make_matrix()
    cell = Cell("hsw", "cfb8", "encrypt", 128, 64)
    matrix.expected[("hsw", "cfb8", "encrypt")] = "generic"
    o = judge(
        cell,
        matrix.models["hsw"],
        matrix,
        ok_result(cell, "generic", Mix(source="ptrace")),
        fake_digest(cell, 1),
    )
    assert o.status == "error"
    assert o.reasons[0].startswith("empty region: the sde backend counted no instruction")


def test_nothing_in_the_signature_scope_is_an_error():
    matrix = make_matrix()
    sig = matrix.signatures["aesni"]
    matrix.signatures["aesni"] = dataclasses.replace(sig, scope="vc-probe*")
    cell = Cell("hsw", "cfb8", "encrypt", 128, 64)
    o = judge(
        cell,
        matrix.models["hsw"],
        matrix,
        ok_result(cell, "aesni", aesni_mix()),
        fake_digest(cell, 1),
    )
    assert o.status == "error"
    assert o.reasons[0].startswith(
        "empty region: 234 instructions counted, none in scope vc-probe*"
    )
