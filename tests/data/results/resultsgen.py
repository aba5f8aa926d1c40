"""Write small results directories in the format of sdematrix.results.junit (for the report tests).

Each path gets a characteristic instruction mix (the instructions its
signature in sde_matrix.yaml requires, with XED-style ISA-set names), built
through the real :class:`sdematrix.evidence.mix.Mix` model and saved with
``Mix.save`` / ``Mix.to_json``, so the files are what a run writes.

Two scenarios, ``baseline`` and ``changed``, differ in known ways that the
diff tests check:

* spr.gcm.encrypt.128.100: pass/avx512 -> fail/aesni (a new failure + path move);
* icl.cfb128.decrypt.256.512: pass/avx10_256 -> fail/avx512 with a chip-check
  violation (zmm on a 256-bit model);
* hsw.cfb1.encrypt.128.16: pass -> error (probe crashed, no path, no mix);
* adl.gcm.decrypt.256.512: still pass, mix x1.5 and a new ISA set (AVX2_GFNI);
* snb.cfb8.decrypt.128.32: error -> pass (fixed);
* wsm only in baseline (removed), gnr only in changed (added);
* zen4 skipped in both (no chip model).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sdematrix.evidence.mix import Mix

IMAGE = "/opt/vaescrypt/bin/vc-probe"
LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"

# path -> [(mnemonic, encoding, width, isa_set, count per 16-byte block)]
PATH_FORMS: dict[str, list[tuple[str, str, str, str, int]]] = {
    "generic": [
        ("XOR", "legacy", "none", "I86", 90),
        ("AND", "legacy", "none", "I86", 60),
        ("SHL", "legacy", "none", "I86", 30),
    ],
    "aesni": [
        ("AESENC", "legacy", "xmm", "AES", 13),
        ("AESENCLAST", "legacy", "xmm", "AES", 1),
        ("PCLMULQDQ", "legacy", "xmm", "PCLMULQDQ", 4),
        ("PXOR", "legacy", "xmm", "SSE2", 6),
    ],
    "vaes_avx2": [
        ("VAESENC", "vex", "ymm", "VAES", 7),
        ("VPCLMULQDQ", "vex", "ymm", "VPCLMULQDQ", 2),
        ("VPXOR", "vex", "ymm", "AVX2", 3),
    ],
    "avx10_256": [
        ("VAESENC", "evex", "ymm", "AVX512_VAES_256", 7),
        ("VPCLMULQDQ", "evex", "ymm", "AVX512_VPCLMULQDQ_256", 2),
        ("VPTERNLOGD", "evex", "ymm", "AVX512F_256", 2),
    ],
    "avx512": [
        ("VAESENC", "evex", "zmm", "AVX512_VAES_512", 4),
        ("VPCLMULQDQ", "evex", "zmm", "AVX512_VPCLMULQDQ_512", 1),
        ("VPTERNLOGD", "evex", "zmm", "AVX512F_512", 1),
    ],
}

MODELS = {
    "wsm": ("Westmere-EP", "aesni", "aesni"),
    "snb": ("Sandy Bridge", "aesni", "aesni"),
    "hsw": ("Haswell", "aesni", "aesni"),
    "icl": ("Ice Lake (client)", "avx10_256", "aesni"),
    "adl": ("Alder Lake", "vaes_avx2", "aesni"),
    "spr": ("Sapphire Rapids", "avx512", "aesni"),
    "gnr": ("Granite Rapids", "avx512", "aesni"),
    "zen4": ("AMD Zen 4 (EPYC 9654)", "avx512", "aesni"),
}
WORKLOADS = {
    "gcm": [(256, 512), (128, 100)],
    "cfb128": [(256, 512)],
    "cfb8": [(128, 32)],
    "cfb1": [(128, 16)],
}
PARALLEL = {("gcm", "encrypt"), ("gcm", "decrypt"), ("cfb128", "decrypt")}


@dataclass
class CellSpec:
    cpu: str
    mode: str
    direction: str
    key_bits: int
    length: int
    status: str = "pass"
    path: str | None = None
    expected: str | None = None
    reasons: list[str] = field(default_factory=list)
    violations: list[dict[str, Any]] = field(default_factory=list)
    mix_scale: float = 1.0
    extra_forms: list[tuple[str, str, str, str, int]] = field(default_factory=list)
    has_mix: bool = True
    output_tail: str = ""

    @property
    def name(self) -> str:
        return f"{self.cpu}.{self.mode}.{self.direction}.{self.key_bits}.{self.length}"


def expected_path(cpu: str, mode: str, direction: str) -> str:
    _t, par, ser = MODELS[cpu]
    return par if (mode, direction) in PARALLEL else ser


def make_mix(spec: CellSpec) -> Mix:
    """A mix shaped like `spec.path`'s: its signature instructions in the probe's
    own functions, scalar glue around them, a little libc."""
    mix = Mix(source="sde", meta={"cell": spec.name, "generator": "resultsgen"})
    blocks = max(1, spec.length // 16) if spec.mode in ("gcm", "cfb128") else spec.length
    if spec.mode == "cfb1":
        blocks = spec.length * 8
    path = spec.path or "generic"
    fn = f"vc_{path}_{spec.mode}_{'enc' if spec.direction == 'encrypt' else 'dec'}"

    def add(image: str, func: str, m: str, e: str, w: str, isa: str, n: int) -> None:
        n = max(1, int(n * spec.mix_scale))
        ext = isa.split("_")[0]
        mix.add_instruction(
            image=image,
            function=func,
            mnemonic=m,
            encoding=e,
            width=w,
            count=n,
            isa_set=isa,
            isa_ext=ext,
            category="X",
        )

    for m, e, w, isa, per in PATH_FORMS[path] + spec.extra_forms:
        add(IMAGE, fn, m, e, w, isa, per * blocks)
    add(IMAGE, fn, "MOV", "legacy", "none", "I86", 40 + 3 * blocks)
    add(IMAGE, fn, "ADD", "legacy", "none", "I86", 20 + blocks)
    add(IMAGE, "vc_setkey", "MOVDQU", "legacy", "xmm", "SSE2", 30)
    add(IMAGE, "vc_setkey", "MOV", "legacy", "none", "I86", 120)
    add(IMAGE, "vc_select_with", "CPUID", "legacy", "none", "I486REAL", 4)
    add(IMAGE, "vc_select_with", "CMP", "legacy", "none", "I86", 60)
    add(LIBC, "memcpy", "MOV", "legacy", "none", "I86", 80)
    if path in ("avx512", "avx10_256"):
        add(LIBC, "memcpy", "VMOVDQU64", "evex", "ymm", "AVX512F_256", 12)
    return mix


def _outcome(spec: CellSpec, backend: str, version: str) -> dict[str, Any]:
    digest = "ab" * 32
    return {
        "cell": spec.name,
        "cpu": spec.cpu,
        "mode": spec.mode,
        "direction": spec.direction,
        "key_bits": spec.key_bits,
        "length": spec.length,
        "status": spec.status,
        "reasons": list(spec.reasons),
        "path": spec.path,
        "expected_path": spec.expected,
        "backend": backend,
        "backend_version": version if spec.status != "skip" else None,
        "duration_s": 0.0 if spec.status == "skip" else 0.5 + 0.01 * spec.length,
        "digest": digest if spec.status in ("pass", "fail") else None,
        "expected_digest": digest if spec.status != "skip" else None,
        "output_tail": spec.output_tail,
    }


BACKEND = "sde"
BACKEND_VERSION = "9.33.0 external"


def write_results_dir(
    root: Path,
    specs: list[CellSpec],
    *,
    not_run: list[str] | None = None,
    skip_models: dict[str, str] | None = None,
) -> Path:
    """Write results.json, cells/, mix/ and a minimal junit.xml under `root`."""
    backend, version = BACKEND, BACKEND_VERSION
    for sub in ("cells", "mix", "work"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    skip_models = skip_models or {}
    cells: list[dict[str, Any]] = []
    for s in specs:
        out = _outcome(s, backend, version)
        summary = None
        files: dict[str, str | None] = {"cell": f"cells/{s.name}.json", "mix": None}
        if s.has_mix and s.status in ("pass", "fail"):
            mix = make_mix(s)
            mix.save(root / "mix" / f"{s.name}.mix.json")
            files["mix"] = f"mix/{s.name}.mix.json"
            o = mix.overall
            summary = {
                "total": o.total,
                "by_width": dict(o.width.most_common()),
                "by_encoding": dict(o.encoding.most_common()),
                "top_isa_sets": dict(o.isa_set.most_common(8)),
                "source": mix.source,
            }
        run = None
        if s.status != "skip":
            run = {
                "backend": backend,
                "status": "ok" if s.status != "error" else "crash",
                "exit_code": 0 if s.status != "error" else -11,
                "reason": None,
                "duration_s": out["duration_s"],
                "backend_version": version,
                "violations": list(s.violations),
                "artifacts": {},
                "stdout_tail": "",
                "stderr_tail": s.output_tail,
                "probe_argv": ["vc-probe"],
            }
        detail = {"outcome": out, "probe": None, "run": run, "mix_summary": summary}
        (root / "cells" / f"{s.name}.json").write_text(json.dumps(detail, indent=1))
        cells.append({**out, "mix_summary": summary, "files": files})
    cpus = list(dict.fromkeys(s.cpu for s in specs))
    counts = {k: sum(1 for s in specs if s.status == k) for k in ("pass", "fail", "error", "skip")}
    results = {
        "schema": "sdematrix-results/1",
        "tool": {"name": "sdematrix", "version": "0.1.0"},
        "matrix": "sde_matrix.yaml",
        "seed": 1,
        "jobs": 2,
        "timeout_s": 300.0,
        "started_at": "2026-11-29T12:00:00+00:00",
        "finished_at": "2026-11-29T12:01:30+00:00",
        "duration_s": 90.0,
        "interrupted": bool(not_run),
        "host": {
            "hostname": "ci-runner",
            "kernel": "6.1.0",
            "python": "3.11.7",
            "machine": "x86_64",
            "cpu_model_name": "AMD EPYC 9654",
            "vendor": "AuthenticAMD",
            "family": 25,
            "model": 17,
            "flags": ["aes", "avx2", "avx512f", "vaes"],
        },
        "backend_requested": backend,
        "backends": {backend: {"available": True, "reason": None, "version": version}},
        "models": {
            c: {
                "title": MODELS.get(c, (c,))[0],
                "backend": None if c in skip_models else backend,
                "skip_reason": skip_models.get(c),
            }
            for c in cpus
        },
        "counts": {**counts, "not_run": len(not_run or [])},
        "cells": cells,
        "not_run": list(not_run or []),
    }
    (root / "results.json").write_text(json.dumps(results, indent=1))
    (root / "junit.xml").write_text('<?xml version="1.0" ?>\n<testsuites name="sdematrix"/>\n')
    return root


def _all_specs(cpus: list[str]) -> list[CellSpec]:
    specs: list[CellSpec] = []
    for cpu in cpus:
        for mode, wls in WORKLOADS.items():
            for direction in ("encrypt", "decrypt"):
                for kb, ln in wls:
                    exp = expected_path(cpu, mode, direction)
                    specs.append(CellSpec(cpu, mode, direction, kb, ln, "pass", exp, exp))
    return specs


ZEN4_SKIP = "SDE has no chip model for zen4 (sde_chip: null)"


def _skip(specs: list[CellSpec], cpu: str) -> None:
    for s in specs:
        if s.cpu == cpu:
            s.status, s.path, s.reasons = "skip", None, [ZEN4_SKIP]


def baseline(root: Path) -> Path:
    specs = _all_specs(["wsm", "snb", "hsw", "icl", "adl", "spr", "zen4"])
    _skip(specs, "zen4")
    for s in specs:
        if s.name == "snb.cfb8.decrypt.128.32":
            s.status, s.path = "error", None
            s.reasons = ["probe crashed (signal 11)"]
    return write_results_dir(root, specs, skip_models={"zen4": ZEN4_SKIP})


def changed(root: Path) -> Path:
    specs = _all_specs(["snb", "hsw", "icl", "adl", "spr", "gnr", "zen4"])
    _skip(specs, "zen4")
    for s in specs:
        if s.name == "spr.gcm.encrypt.128.100":
            s.status, s.path = "fail", "aesni"
            s.reasons = [
                "path: expected avx512, got aesni",
                "required by path avx512 but not executed in vc-probe*: {encoding=evex}",
                (
                    "required by path avx512 but not executed in vc-probe*: "
                    "{mnemonic=VAESENC, width=zmm}"
                ),
            ]
        elif s.name == "icl.cfb128.decrypt.256.512":
            s.status, s.path = "fail", "avx512"
            s.reasons = [
                "path: expected avx10_256, got avx512",
                (
                    "forbidden by path avx10_256 but executed in vc-probe*: {width=zmm}: "
                    "VAESENC(evex,zmm) x128 in vc_avx512_cfb128_dec"
                ),
                (
                    "chip check: VAESENC zmm at 0x401a2c in vc_avx512_cfb128_dec (vc-probe) "
                    "is not valid on icl"
                ),
            ]
            s.violations = [
                {
                    "reason": "AVX512_VAES_512 not in model icl (max_vector_bits 256)",
                    "address": "0x401a2c",
                    "function": "vc_avx512_cfb128_dec",
                    "image": IMAGE,
                    "mnemonic": "VAESENC",
                    "bytes_hex": "62f27d48dcc1",
                }
            ]
        elif s.name == "hsw.cfb1.encrypt.128.16":
            s.status, s.path = "error", None
            s.reasons = ["probe crashed (signal 11)"]
            s.output_tail = "stderr:\nSegmentation fault (core dumped)"
        elif s.name == "adl.gcm.decrypt.256.512":
            s.mix_scale = 1.5
            s.extra_forms = [("VGF2P8AFFINEQB", "vex", "ymm", "AVX2_GFNI", 2)]
    return write_results_dir(root, specs, skip_models={"zen4": ZEN4_SKIP})
