"""The SDE backend: discovery, command lines, output handling (with the SDE test
double in tests/doubles/sde64), and the backend registry."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from pathlib import Path

import pytest
from doubles.fake_matrix import SDE_DOUBLE, fake_probe_command, make_matrix, model
from doubles.sdematrix_cli import alive

from sdematrix.backends.base import Backend, ProbeCommand, RunResult
from sdematrix.backends.process import run_process
from sdematrix.backends.registry import BackendSelector, create_backend
from sdematrix.backends.sde.backend import SdeBackend, parse_chip_check
from sdematrix.errors import BackendUnavailableError
from sdematrix.evidence.mix import Selector
from sdematrix.spec.models import Cell

CELL = Cell("spr", "gcm", "encrypt", 128, 64)
SPR = model("spr", "spr")


def double_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SDE_", "FAKE_PROBE"))}
    env["SDE_PATH"] = str(SDE_DOUBLE)
    env["SDE_DOUBLE_LOG"] = str(tmp_path / "argv.log")
    env.update(extra)
    return env


def logged(tmp_path: Path) -> list[list[str]]:
    p = tmp_path / "argv.log"
    return [json.loads(ln) for ln in p.read_text().splitlines()] if p.exists() else []


# --------------------------------------------------------------- discovery --


def test_discovery_order(tmp_path):
    kit = tmp_path / "kit"
    kit.mkdir()
    exe = kit / "sde64"
    shutil.copy(SDE_DOUBLE, exe)
    other = tmp_path / "other" / "sde64"
    other.parent.mkdir()
    shutil.copy(SDE_DOUBLE, other)
    env = {"PATH": str(other.parent), "SDE_PATH": str(kit)}
    # --sde-path beats SDE_PATH beats PATH; a directory means <dir>/sde64
    assert SdeBackend(sde_path=other, environ=env).executable() == other
    assert SdeBackend(environ=env).executable() == exe
    assert SdeBackend(environ={"PATH": str(other.parent)}).executable() == other
    assert SdeBackend(environ={"PATH": str(tmp_path)}).executable() is None


def test_unavailable_reasons(tmp_path):
    b = SdeBackend(environ={"PATH": str(tmp_path)})
    assert b.unavailable_reason() == "Intel SDE not installed (set SDE_PATH or put sde64 on PATH)"
    b = SdeBackend(environ={"PATH": "", "SDE_PATH": str(tmp_path / "nope")})
    assert "SDE_PATH" in (b.unavailable_reason() or "")
    noexec = tmp_path / "sde64"
    noexec.write_text("#!/bin/sh\n")
    noexec.chmod(stat.S_IRUSR | stat.S_IWUSR)
    b = SdeBackend(sde_path=noexec, environ={"PATH": ""})
    assert "--sde-path" in (b.unavailable_reason() or "")


def test_version_from_sde_version_output(tmp_path):
    b = SdeBackend(environ=double_env(tmp_path, SDE_DOUBLE_VERSION="9.44.0"))
    assert b.version() == "9.44.0 external"
    assert logged(tmp_path) == [["-version"]]


def test_cannot_run_without_chip():
    b = SdeBackend(environ={"PATH": ""})
    assert b.cannot_run(SPR) is None
    assert "no chip model" in (b.cannot_run(model("amd", None)) or "")


def test_chip_knobs_from_help(tmp_path):
    b = SdeBackend(environ=double_env(tmp_path))
    chips = b.chip_knobs()
    assert chips is not None and {"spr", "gnr256", "dmr", "wsm"} <= chips
    assert b.cannot_run(SPR) is None


def test_model_whose_chip_this_sde_lacks_is_refused(tmp_path):
    """An older SDE (no -dmr): the model is refused up front with a reason
    naming the knob and the version, not run into "unknown knob" errors."""
    env = double_env(tmp_path, SDE_DOUBLE_CHIPS="wsm,snb,spr", SDE_DOUBLE_VERSION="9.21.1")
    b = SdeBackend(environ=env)
    why = b.cannot_run(model("dmr", "dmr"))
    assert why == (
        "SDE 9.21.1 external has no -dmr chip knob for dmr (DMR); its -help lists 3 chips"
    )
    assert b.cannot_run(SPR) is None
    assert logged(tmp_path).count(["-help"]) == 1  # asked once per backend object
    # The double refuses the knob too, as SDE would: the check is not moot.
    res = b.run(
        Cell("dmr", "gcm", "encrypt", 128, 64),
        model("dmr", "dmr"),
        fake_probe_command(CELL, 1),
        tmp_path,
        30,
    )
    assert res.status == "error"


def test_unreadable_help_refuses_nothing(tmp_path):
    fake = tmp_path / "sde64"
    fake.write_text("#!/bin/sh\necho 'some other help format'\n")
    fake.chmod(0o755)
    b = SdeBackend(sde_path=fake, environ={"PATH": ""})
    assert b.chip_knobs() is None and b.cannot_run(model("dmr", "dmr")) is None


def test_protocol():
    assert isinstance(SdeBackend(environ={"PATH": ""}), Backend)


# ------------------------------------------------------------ command line --


def test_command_line(tmp_path):
    b = SdeBackend(environ=double_env(tmp_path))
    probe = ProbeCommand(argv=("/x/vc-probe", "--mode", "gcm"))
    argv = b.command(CELL, SPR, probe, tmp_path)
    assert argv == [
        str(SDE_DOUBLE),
        "-spr",
        "-mix",
        "-omix",
        str(tmp_path / "spr.gcm.encrypt.128.64.mix"),
        "-iform",
        "-start_ssc_mark",
        "111:repeat",
        "-stop_ssc_mark",
        "222:repeat",
        "--",
        "/x/vc-probe",
        "--mode",
        "gcm",
    ]
    old = model("wsm", "wsm", 128, exe_only=True)
    argv = b.command(Cell("wsm", "gcm", "encrypt", 128, 64), old, probe, tmp_path)
    assert argv[1] == "-wsm"
    assert argv[argv.index("--") - 1] == "-chip_check_exe_only"


def test_run_ok_through_double(tmp_path):
    env = double_env(tmp_path, FAKE_PROBE_PATH="avx512")
    b = SdeBackend(environ=env)
    probe = fake_probe_command(CELL, 1)
    res = b.run(CELL, SPR, probe, tmp_path, 30)
    assert res.status == "ok", res.reason
    assert res.backend == "sde" and res.backend_version == "9.33.0 external"
    assert res.probe is not None and res.probe["path"] == "avx512"
    assert res.mix is not None
    assert res.mix.overall.forms[("VAESENC", "evex", "zmm")] == 896
    assert res.violations == []
    # the double accepted exactly the command line we built
    runs = [a for a in logged(tmp_path) if a != ["-version"]]
    assert runs == [b.command(CELL, SPR, probe, tmp_path)[1:]]
    assert res.artifacts["mix"].endswith("spr.gcm.encrypt.128.64.mix")


def test_double_rejects_bad_command_lines(tmp_path):
    env = double_env(tmp_path)
    r = run_process(
        [str(SDE_DOUBLE), "-spr", "-mix", "-bogus", "--", "/bin/true"], env=env, timeout=30
    )
    assert r.returncode == 1 and "unknown knob -bogus" in r.stderr
    r = run_process([str(SDE_DOUBLE), "-spr", "-icl", "--", "/bin/true"], env=env, timeout=30)
    assert r.returncode == 1 and "more than one chip" in r.stderr
    r = run_process(
        [str(SDE_DOUBLE), "-spr", "-start_ssc_mark", "zz", "--", "/bin/true"], env=env, timeout=30
    )
    assert r.returncode == 1 and "bad value" in r.stderr


def test_chip_check_becomes_violation(tmp_path):
    env = double_env(tmp_path, SDE_DOUBLE_CHIP_ERROR="vaesenc")
    b = SdeBackend(environ=env)
    res = b.run(CELL, SPR, fake_probe_command(CELL, 1), tmp_path, 30)
    assert res.status == "ok"
    assert res.probe is None and res.mix is None
    [v] = res.violations
    assert v.address == 0x401136
    assert v.function == "vc_avx512_crypt"
    assert v.image is not None and v.image.endswith("fake-probe")
    assert v.bytes_hex == "62 f2 75 48 dc c2"
    assert v.mnemonic == "VAESENC"
    assert "SPR" in v.reason


def test_parse_chip_check_variants():
    text = (
        "noise\n"
        "TID 0 SDE-ERROR: Executed instruction not valid for specified chip (SKYLAKE): vsha512msg1\n"
        "TID 1 SDE-ERROR: Executed instruction not valid for specified chip (ICELAKE): "
        "0x7f8b3bd0d3c9: vpcmpeqb k0, zmm0, zmmword ptr [rdi]\n"
        "Image: /lib/x86_64-linux-gnu/libc.so.6+0x18e3c9\n"
        "Function: __strlen_evex512\n"
    )
    a, b = parse_chip_check(text)
    assert a.mnemonic == "VSHA512MSG1" and a.address is None and a.function is None
    assert "SKYLAKE" in a.reason
    assert b.address == 0x7F8B3BD0D3C9
    assert b.image == "/lib/x86_64-linux-gnu/libc.so.6"
    assert b.function == "__strlen_evex512"
    assert "__strlen_evex512 in libc.so.6 at 0x7f8b3bd0d3c9" in b.describe()
    assert parse_chip_check("all fine\n") == []


@pytest.mark.parametrize(
    ("knob", "pattern"),
    [
        ({"SDE_DOUBLE_TRUNCATE": "1"}, "bad mix file: .*truncated"),
        ({"SDE_DOUBLE_NO_MIX": "1"}, "SDE wrote no mix file"),
        ({"FAKE_PROBE_CRASH": "1"}, r"probe printed no JSON report.*signal|exit code"),
    ],
)
def test_broken_runs_are_errors(tmp_path, knob, pattern):
    b = SdeBackend(environ=double_env(tmp_path, **knob))
    res = b.run(CELL, SPR, fake_probe_command(CELL, 1), tmp_path, 30)
    assert res.status == "error"
    assert res.reason is not None
    import re

    assert re.search(pattern, res.reason), res.reason
    assert "\n" not in res.reason


def test_hang_is_a_timeout_and_the_group_dies(tmp_path):
    pidfile = tmp_path / "pids"
    b = SdeBackend(environ=double_env(tmp_path, SDE_DOUBLE_HANG=str(pidfile)))
    b.version()
    t0 = time.monotonic()
    res = b.run(CELL, SPR, fake_probe_command(CELL, 1), tmp_path, 1.5)
    assert res.status == "timeout"
    assert time.monotonic() - t0 < 10
    assert "timed out after 1.5s" in (res.reason or "")
    # the double and its `sleep 3600` child (same group) must both be gone
    pids = [int(p) for p in pidfile.read_text().split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 5
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)


def test_flood_is_capped(tmp_path, monkeypatch):
    import sdematrix.backends.process as process_mod

    monkeypatch.setattr(process_mod, "FLOOD_LIMIT", 4 << 20)
    r = run_process(
        [str(SDE_DOUBLE), "-spr", "--", "/bin/true"],
        env=double_env(tmp_path, SDE_DOUBLE_FLOOD="1"),
        timeout=30,
        capture_limit=1 << 16,
        flood_limit=4 << 20,
    )
    assert r.flooded and r.returncode is None
    assert len(r.stdout) <= 1 << 16
    assert r.stdout_bytes > 4 << 20


# ---------------------------------------------------------------- registry --


class FakeBackend:
    def __init__(self, name: str, unavailable: str | None = None, refuse: set[str] | None = None):
        self.name = name
        self._u = unavailable
        self._refuse = refuse or set()

    def unavailable_reason(self) -> str | None:
        return self._u

    def version(self) -> str | None:
        return "1.0"

    def cannot_run(self, m) -> str | None:
        return f"{self.name} refuses {m.name}" if m.name in self._refuse else None

    def run(self, cell, m, probe, workdir, timeout) -> RunResult:  # pragma: no cover
        raise AssertionError


def test_auto_picks_first_usable_per_model():
    matrix = make_matrix()
    fakes = {
        "sde": FakeBackend("sde", refuse={"nochip"}),
        "ptrace": FakeBackend("ptrace", refuse={"spr"}),
        "qemu": FakeBackend("qemu", unavailable="no qemu"),
    }
    s = BackendSelector(matrix, "auto", factory=fakes.__getitem__)
    assert s.choose(matrix.models["spr"]).backend is fakes["sde"]
    assert s.choose(matrix.models["nochip"]).backend is fakes["ptrace"]
    fakes["ptrace"]._refuse.add("nochip")
    s = BackendSelector(matrix, "auto", factory=fakes.__getitem__)
    ch = s.choose(matrix.models["nochip"])
    assert ch.backend is None
    assert ch.skip_reason == (
        "no backend can run nochip: sde: sde refuses nochip; ptrace: ptrace refuses nochip; "
        "qemu: no qemu"
    )


def test_explicit_unavailable_backend_is_a_usage_error():
    matrix = make_matrix()
    fakes = {"sde": FakeBackend("sde", unavailable="Intel SDE not installed (set SDE_PATH)")}
    with pytest.raises(BackendUnavailableError, match="backend 'sde' is not available") as ei:
        BackendSelector(matrix, "sde", factory=fakes.__getitem__)
    assert ei.value.exit_code == 2
    with pytest.raises(BackendUnavailableError, match="unknown backend"):
        BackendSelector(matrix, "bochs", factory=fakes.__getitem__)


def test_explicit_backend_cannot_run_model_skips():
    matrix = make_matrix()
    fakes = {"sde": FakeBackend("sde", refuse={"nochip"})}
    s = BackendSelector(matrix, "sde", factory=fakes.__getitem__)
    ch = s.choose(matrix.models["nochip"])
    assert ch.backend is None and ch.skip_reason == "sde refuses nochip"


def test_create_backend_real_classes():
    b = create_backend("sde", sde_path=str(SDE_DOUBLE))
    assert b.name == "sde" and b.unavailable_reason() is None
    with pytest.raises(ValueError):
        create_backend("nope")


# --------------------------------------------------- real SDE (if present) --


def test_real_sde_end_to_end(tmp_path):
    b = SdeBackend()
    exe = b.executable()
    if exe is None or exe.resolve() == SDE_DOUBLE.resolve():
        pytest.skip("Intel SDE not installed (set SDE_PATH)")
    from sdematrix.backends.probe import expected_digest, probe_command

    res = b.run(CELL, SPR, probe_command(CELL, 1), tmp_path, 600)
    assert res.status == "ok", res.reason
    assert res.probe is not None and res.probe["digest"] == expected_digest(CELL, 1)
    assert res.mix is not None and res.mix.overall.total > 0


# ------------------------------------------- coverage of the scoped counts --

HSW = model("hsw", "hsw", 256)
AESNI_CELL = Cell("hsw", "cfb8", "encrypt", 128, 64)


def _scoped_matrix():
    """The fake matrix with its signatures scoped to the probe image, as
    sde_matrix.yaml's are ("vc-probe*")."""
    from dataclasses import replace

    m = make_matrix()
    m.signatures = {k: replace(s, scope="fake-probe*") for k, s in m.signatures.items()}
    return m


def _judge_aesni(tmp_path, **knobs):
    from doubles.fake_matrix import fake_digest

    from sdematrix.verdict.cell import judge

    tmp_path.mkdir(exist_ok=True)
    env = double_env(tmp_path, FAKE_PROBE_PATH="aesni", **knobs)
    res = SdeBackend(environ=env).run(
        AESNI_CELL, HSW, fake_probe_command(AESNI_CELL, 1), tmp_path, 30
    )
    out = judge(AESNI_CELL, HSW, _scoped_matrix(), res, fake_digest(AESNI_CELL, 1))
    return res, out


def test_full_coverage_judges_the_scope(tmp_path):
    """Control: SDE lists every function of the region (100 %): the aesni
    cell passes, and a forbidden zmm row in the probe's own function fails it."""
    res, out = _judge_aesni(tmp_path)
    assert res.mix is not None and res.mix.meta["function_coverage"] == 1.0
    assert out.status == "pass", out.reasons
    _, out = _judge_aesni(
        tmp_path / "z", SDE_DOUBLE_EXTRA_ROWS="VPXORD_ZMMu32_MASKmskw_ZMMu32_ZMMu32_AVX512=3"
    )
    assert out.status == "fail" and any("forbidden" in r for r in out.reasons), out.reasons


def test_forbidden_rows_in_unlisted_functions_are_an_error_not_a_pass(tmp_path):
    """SDE lists only its top functions.  A forbidden instruction that ran in a
    function it did not list is invisible in the probe image's scope: judged
    on the listed functions alone the cell would pass."""
    zmm = "VAESENC_ZMMu128_ZMMu128_ZMMu128_AVX512"
    res, out = _judge_aesni(tmp_path, SDE_DOUBLE_UNLISTED_ROWS=f"{zmm}=40")
    assert res.status == "ok" and res.mix is not None
    cov = res.mix.meta["function_coverage"]
    assert 0 < cov < 1
    # the scope, counted from the listed functions, really is blind to them
    assert Selector(width="zmm").count(res.mix.scoped("fake-probe*")) == 0
    assert Selector(width="zmm").count(res.mix.overall) == 40
    assert out.status == "error", out.reasons
    first = out.reasons[0]
    assert "undecidable" in first and f"{100 * cov:.2f}%" in first and "width=zmm" in first


def test_unlisted_rows_that_no_forbid_matches_leave_the_check_decidable(tmp_path):
    """Partial coverage alone is no error: when every instruction a forbid
    selector matches is in a listed function (here: none ran at all), the
    scoped count is exact."""
    res, out = _judge_aesni(tmp_path, SDE_DOUBLE_UNLISTED_ROWS="MOV_GPRv_MEMv=500,RET_NEAR=9")
    assert res.mix is not None and res.mix.meta["function_coverage"] < 1
    assert out.status == "pass", out.reasons


def test_empty_region_is_an_error_with_total_zero(tmp_path):
    """Marks never executed: SDE writes histograms with '*total 0'.  The mix is
    kept (total 0, honestly), the run is an error."""
    env = double_env(tmp_path, FAKE_PROBE_PATH="aesni", SDE_DOUBLE_EMPTY="1")
    res = SdeBackend(environ=env).run(
        AESNI_CELL, HSW, fake_probe_command(AESNI_CELL, 1), tmp_path, 30
    )
    assert res.status == "error" and "no instruction" in (res.reason or ""), res.reason
    assert res.probe is not None and res.probe["status"] == "ok"
    assert res.mix is not None and res.mix.functions == []
    assert res.mix.overall.total == 0 and res.mix.scoped("fake-probe*").total == 0
