"""`vaescrypt.bench_goals`: issue 23's C/EVP goals, the machine class they
belong to, and the verdict over bench runs (made-up ratios: nothing here
times anything)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _run_module import run_module

import vaescrypt
from vaescrypt import bench, bench_goals
from vaescrypt.bench_goals import GOALS, SIZES, Machine, judge, render


def real(vendor: str, family: int, model: int) -> Machine:
    """A machine as a run on that CPU records it: the kernel read the same
    CPU, and no tracer was attached."""
    return Machine(vendor, family, model, vendor, family, model, 0)


# (vendor, display family, display model) of real parts, as CPUID leaf 1
# decodes them (the dispatcher's cpu_info()).
ZEN4_GENOA = real("AuthenticAMD", 0x19, 0x11)  # EPYC 9R14: the issue's VM
ZEN4_RAPHAEL = real("AuthenticAMD", 0x19, 0x61)  # Ryzen 9 7950X
ZEN3_MILAN = real("AuthenticAMD", 0x19, 0x01)  # same family, a Zen 3 model
ZEN5_TURIN = real("AuthenticAMD", 0x1A, 0x02)
INTEL_SPR = real("GenuineIntel", 0x6, 0x8F)


@pytest.mark.parametrize(
    ("machine", "zen4"),
    [
        (ZEN4_GENOA, True),
        (ZEN4_RAPHAEL, True),
        (ZEN3_MILAN, False),
        (ZEN5_TURIN, False),
        (INTEL_SPR, False),
        (Machine("AuthenticAMD", 0x19, None), False),  # model not recorded
        (Machine("", None, None), False),
    ],
)
def test_machine_class(machine: Machine, zen4: bool) -> None:
    assert machine.is_zen4 is zen4


def test_description_and_json_round_trip() -> None:
    assert ZEN4_GENOA.describe() == "AuthenticAMD family 0x19, model 0x11 (Zen 4)"
    assert Machine.from_json(ZEN4_GENOA.as_json()) == ZEN4_GENOA
    assert Machine.from_json({"vendor": "AuthenticAMD", "family": "25"}) == Machine(
        "AuthenticAMD", None, None
    )
    assert Machine.from_json(None) is None


# A Zen 4 reading is judged only when it is the CPU the run was taken on.
PRESENTED = Machine("AuthenticAMD", 0x19, 0x11, "GenuineIntel", 0x6, 0xA7, 0)
TRACED = Machine("AuthenticAMD", 0x19, 0x11, "AuthenticAMD", 0x19, 0x11, 4242)
UNRECORDED = Machine("AuthenticAMD", 0x19, 0x11)  # a run from before the kernel view was kept


@pytest.mark.parametrize(
    ("machine", "why"),
    [
        (ZEN4_GENOA, None),
        (PRESENTED, "CPUID was presented: the kernel reports GenuineIntel family 0x6, model 0xa7"),
        (TRACED, "the process was traced (TracerPid 4242): its CPUID may be presented"),
        (UNRECORDED, "the kernel's view of the CPU was not recorded"),
    ],
)
def test_only_a_real_zen4_is_judged(machine: Machine, why: str | None) -> None:
    assert machine.is_zen4
    assert machine.not_real == why
    assert machine.judged is (why is None)
    assert Machine.from_json(machine.as_json()) == machine
    v = judge([_rows()], [machine])
    assert v.judged is (why is None) and v.exit_code() == (0 if why is None else 3)
    assert (f"; not judged: {why}" in machine.describe()) is (why is not None)


def test_kernel_view_and_tracer_parsers() -> None:
    cpuinfo = (
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
        "model name\t: AMD EPYC 9R14\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n"
    )
    assert bench_goals._kernel_cpu(cpuinfo) == ("AuthenticAMD", 25, 17)
    assert bench_goals._kernel_cpu("processor\t: 0\n") == (None, None, None)
    assert bench_goals._tracer_pid("Name:\tpython3\nTracerPid:\t0\n") == 0
    assert bench_goals._tracer_pid("Name:\tpython3\nTracerPid:\t731\n") == 731
    assert bench_goals._tracer_pid("Name:\tpython3\n") is None


def test_this_machine_is_the_dispatchers_reading() -> None:
    info = vaescrypt.cpu_info()
    m = bench_goals.this_machine()
    assert (m.vendor, m.family, m.model) == (info.vendor, info.family, info.model)
    # this test process runs on the CPU it reads, untraced
    assert (m.kernel_vendor, m.kernel_family, m.kernel_model) == (m.vendor, m.family, m.model)
    assert m.tracer_pid == 0 and m.not_real is None


def test_goal_table_is_issue_23s() -> None:
    assert SIZES == (16, 64, 256, 512, 1420, 4096, 16384, 65536)
    assert len(GOALS) == 6 and all(len(g) == len(SIZES) for g in GOALS.values())
    # two cells quoted from the issue's table, one per direction
    assert GOALS["encrypt", "vaes_avx2"][SIZES.index(512)] == 3.44
    assert GOALS["decrypt", "avx512"][SIZES.index(65536)] == 2.50


def _rows(scale: float = 1.0, **override: float) -> list[dict[str, Any]]:
    """A run with every cell at scale x its goal; override "dir/path/size"."""
    rows = []
    for (d, p), goals in GOALS.items():
        for s, g in zip(SIZES, goals, strict=True):
            v = override.get(f"{d}/{p}/{s}", g * scale)
            rows.append(
                {
                    "mode": "gcm",
                    "key_bits": 256,
                    "direction": d,
                    "path": p,
                    "size": s,
                    "c_vs_evp": v,
                }
            )
    return rows


ZEN4 = ZEN4_GENOA
INTEL = INTEL_SPR


def test_all_at_goal_is_met_on_zen4_only() -> None:
    v = judge([_rows(), _rows(1.2)], [ZEN4, ZEN4])
    assert v.met and v.judged and v.exit_code() == 0
    assert render(v)[-1].endswith("48 of 48 cells at or above their goal in every run: MET.")
    elsewhere = judge([_rows(), _rows()], [ZEN4, INTEL])  # one run elsewhere: no verdict
    assert not elsewhere.judged and elsewhere.exit_code() == 3
    assert "not a verdict" in render(elsewhere)[-1]


def test_below_in_one_run_of_two_is_not_met() -> None:
    key = "decrypt/vaes_avx2/1420"
    v = judge([_rows(), _rows(**{key: 2.86})], [ZEN4, ZEN4])
    assert not v.met and v.exit_code() == 1
    (cell,) = v.below
    assert (cell.direction, cell.path, cell.size, cell.runs_below, cell.worst) == (
        "decrypt",
        "vaes_avx2",
        1420,
        1,
        2.86,
    )
    text = "\n".join(render(v))
    assert "2.86<2.87(1/2)" in text and "47 of 48" in text and "NOT MET (1 below)" in text
    # what bench --json records as "goals"
    assert v.as_json() == {
        "judged": True,
        "met": False,
        "below": [
            {
                "direction": "decrypt",
                "path": "vaes_avx2",
                "size": 1420,
                "goal": 2.87,
                "c_vs_evp": 2.86,
            }
        ],
    }


def test_a_value_that_rounds_to_its_goal_shows_it_is_below() -> None:
    v = judge([_rows(**{"encrypt/avx10_256/65536": 2.1886})], [ZEN4])
    assert "2.189<2.19" in "\n".join(render(v))


def test_unmeasured_cells_and_other_rows() -> None:
    rows = [r for r in _rows() if r["size"] != 16]
    # rows of other modes, key sizes and paths do not count for a cell
    rows += [
        {
            "mode": "cfb128",
            "key_bits": 256,
            "direction": "encrypt",
            "path": "avx512",
            "size": 16,
            "c_vs_evp": 99.0,
        },
        {
            "mode": "gcm",
            "key_bits": 128,
            "direction": "encrypt",
            "path": "avx512",
            "size": 16,
            "c_vs_evp": 99.0,
        },
        {
            "mode": "gcm",
            "key_bits": 256,
            "direction": "encrypt",
            "path": "aesni",
            "size": 16,
            "c_vs_evp": 99.0,
        },
    ]
    v = judge([rows], [ZEN4])
    assert len(v.below) == 6 and {c.size for c in v.below} == {16}
    assert all(c.worst is None for c in v.below)
    assert v.exit_code() == 1


def _write(tmp_path: Path, name: str, rows: list[dict[str, Any]], machine: Machine | None) -> str:
    data: dict[str, Any] = {"results": rows}
    if machine is not None:
        data["machine"] = machine.as_json()
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return str(p)


def _goals_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_module("vaescrypt.bench_goals", *args, timeout=60)


def test_cli_exit_codes(tmp_path: Path) -> None:
    ok = _write(tmp_path, "ok.json", _rows(), ZEN4)
    low = _write(tmp_path, "low.json", _rows(0.9), ZEN4)
    intel = _write(tmp_path, "intel.json", _rows(), INTEL)
    old = _write(tmp_path, "old.json", _rows(), None)  # a run from before "machine" was recorded
    assert _goals_cli(ok, ok).returncode == 0
    r = _goals_cli(ok, low)
    assert r.returncode == 1 and "NOT MET (48 below)" in r.stdout
    assert _goals_cli(ok, intel).returncode == 3
    r = _goals_cli(old)
    assert r.returncode == 3 and "machine not recorded" in r.stdout


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "No such file"),
        ("not json", "not JSON from 'vaescrypt.bench --json'"),
        ('{"rows": []}', "no results list"),
        ("[1, 2]", "no results list"),
    ],
)
def test_cli_bad_input_one_line_exit_2(tmp_path: Path, content: str | None, message: str) -> None:
    p = tmp_path / "run.json"
    if content is not None:
        p.write_text(content)
    r = _goals_cli(str(p))
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and message in r.stderr and "Traceback" not in r.stderr


def test_bench_table_carries_the_goals_only_for_their_cells() -> None:
    meta = {"openssl": "OpenSSL 3.0.19", "pinned_cpu": 1, "rounds": 5, "seconds_per_point": 0.3}
    gcm = bench.Row("gcm", "decrypt", "vaes_avx2", 256, 4096, False, 10000.0, 4000.0, None, None)
    text = bench.render_table([gcm], {**meta, "machine": ZEN4.as_json()})
    assert "C/EVP goals of issue 23" in text
    assert "2.50<" not in text  # 10000/4000 = 2.50 >= 2.42 at 4096 B
    assert "1 run(s)" in text and "family 0x19, model 0x11 (Zen 4)" in text
    slow = bench.Row("gcm", "decrypt", "vaes_avx2", 256, 4096, False, 10000.0, 4000.0, None, None)
    slow.quiet = False  # counted as not measured, but the table is still shown
    assert "C/EVP goals of issue 23" in bench.render_table([slow], meta)
    cfb = bench.Row("cfb128", "decrypt", "vaes_avx2", 256, 4096, False, 10000.0, 4000.0, None, None)
    assert "C/EVP goals" not in bench.render_table([cfb], meta)


def test_rows_from_the_slow_state_or_of_other_types_do_not_count() -> None:
    rows = _rows()
    for r in rows:
        if r["size"] == 512 and r["path"] == "avx512":
            r["quiet"] = False  # bench: no round of this point was quiet
    rows.append(
        {"mode": "gcm", "key_bits": 256, "direction": "encrypt", "path": "avx512", "size": "x"}
    )
    rows.append(
        {"mode": "gcm", "key_bits": 256, "direction": ["encrypt"], "path": None, "size": 16}
    )
    v = judge([rows], [ZEN4])
    assert {(c.direction, c.path, c.size) for c in v.below} == {
        ("encrypt", "avx512", 512),
        ("decrypt", "avx512", 512),
    }


def test_cli_takes_odd_rows_without_a_traceback(tmp_path: Path) -> None:
    rows: list[Any] = [*_rows(), {"size": "x", "mode": "gcm", "key_bits": 256}, "not a row", 3]
    r = _goals_cli(_write(tmp_path, "odd.json", rows, ZEN4))
    assert r.returncode == 0 and "48 of 48" in r.stdout and r.stderr == ""
