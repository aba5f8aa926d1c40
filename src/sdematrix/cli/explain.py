"""What the library's dispatcher would choose on a CPU model, and why.

The decision is not re-implemented here: the model's CPUID profile and XCR0
are handed to the library's own C decoder and policy
(``vc_features_from_cpuid`` -> ``vc_select_with`` / ``vc_explain``) through
the cffi module ``vaescrypt._native``, so the matrix file's expectations are
checked against the one copy of the rule that ships.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import SdeMatrixError
from ..evidence.dispatcher_features import dispatcher_features, feature_names
from ..spec.caches import describe_caches, descriptor_leaf
from ..spec.matrix_file import select_cpus
from ..spec.models import DIRECTIONS, MODES, Matrix


@dataclass(frozen=True)
class Decision:
    """One (mode, direction) of one model: the dispatcher's pick vs the file's."""

    cpu: str
    mode: str
    direction: str
    chosen: str  # what vc_select_with returns for the model's profile
    expected: str  # what sde_matrix.yaml says
    reason: str  # vc_explain's one line

    @property
    def agrees(self) -> bool:
        return self.chosen == self.expected


@dataclass(frozen=True)
class ModelFeatures:
    """vc_cpu_features decoded from a model's profile."""

    vendor: str
    family: int
    model: int
    stepping: int
    xcr0: int
    avx10_version: int
    features: tuple[str, ...]


def model_features(matrix: Matrix, cpu: str) -> ModelFeatures:
    """The feature set the dispatcher decodes from `cpu`'s profile."""
    model = matrix.models[select_cpus(matrix, [cpu])[0]]
    ffi, lib, f = dispatcher_features(model)
    names = feature_names(ffi, lib, f)
    return ModelFeatures(
        vendor=ffi.string(f.vendor).decode("latin-1"),
        family=int(f.family),
        model=int(f.model),
        stepping=int(f.stepping),
        xcr0=int(f.xcr0),
        avx10_version=int(f.avx10_version),
        features=names,
    )


def decisions(matrix: Matrix, cpu: str) -> list[Decision]:
    """Per (mode, direction): the dispatcher's choice, the expectation, the reason."""
    name = select_cpus(matrix, [cpu])[0]
    ffi, lib, f = dispatcher_features(matrix.models[name])
    buf = ffi.new("char[]", 512)
    out: list[Decision] = []
    for mode in MODES:
        m = lib.vc_mode_from_name(mode.encode())
        if m < 0:
            raise SdeMatrixError(f"the library's dispatcher does not know mode '{mode}'")
        for d, direction in enumerate(DIRECTIONS):
            # vc_dir has no from-name helper: check the enum order by name.
            if ffi.string(lib.vc_dir_name(d)).decode() != direction:
                raise SdeMatrixError(f"the dispatcher's direction {d} is not '{direction}'")
            chosen = ffi.string(lib.vc_path_name(lib.vc_select_with(f, m, d))).decode()
            lib.vc_explain(f, m, d, buf, len(buf))
            text = ffi.string(buf).decode()
            reason = text + _not_eligible(ffi, lib, f, m, d, chosen, text)
            out.append(
                Decision(
                    cpu=name,
                    mode=mode,
                    direction=direction,
                    chosen=chosen,
                    expected=matrix.expected[(name, mode, direction)],
                    reason=reason,
                )
            )
    return out


#: Why the policy never offers the wide paths to some modes (dispatch/policy.c,
#: vc_path_eligible): CFB8 and CFB1 produce one byte / bit per AES block,
#: each block depending on the previous one, so only the xmm paths apply.
_SERIAL = ("cfb8", "cfb1")


def _not_eligible(ffi: Any, lib: Any, f: Any, m: int, d: int, chosen: str, said: str) -> str:
    """The paths this CPU could run but the mode never takes (vc_explain
    lists only the mode's own preference list, which leaves them out), as
    ``: VAES not eligible for serial modes`` -- the reason that matters when
    a VAES machine runs CFB8 on AES-NI."""
    names = [ffi.string(lib.vc_path_name(p)).decode() for p in range(lib.VC_PATH_COUNT)]
    rank = names.index(chosen) if chosen in names else len(names)
    skipped = [
        n
        for p, n in enumerate(names)
        if p > rank and not lib.vc_path_eligible(m, d, p) and lib.vc_path_supported_for(f, m, p)
    ]
    mode = ffi.string(lib.vc_mode_name(m)).decode()
    direction = ffi.string(lib.vc_dir_name(d)).decode()
    # eligible and runnable, yet neither chosen nor named by vc_explain: not
    # in the mode's preference list at all
    unlisted = [
        n
        for p, n in enumerate(names)
        if p > rank
        and lib.vc_path_eligible(m, d, p)
        and lib.vc_path_supported_for(f, m, p)
        and f"{n}:" not in said
    ]
    out = ""
    if skipped:
        vaes = any(n not in ("aesni", "generic") for n in skipped)
        what = "VAES" if vaes else "/".join(skipped)
        kind = "serial modes (one AES block per output byte/bit)" if mode in _SERIAL else mode
        out += f": {what} ({', '.join(skipped)}) not eligible for {kind}"
    if unlisted:
        why = (
            ": each block needs the previous ciphertext, nothing to run in parallel"
            if mode.startswith("cfb") and direction == "encrypt"
            else ""
        )
        out += (
            f"{'; ' if out else ': '}{', '.join(unlisted)} not in the {mode}/{direction} "
            f"preference list{why}"
        )
    return out


def resolve_cpu(matrix: Matrix, cpu: str) -> str:
    """`cpu` as a model name; an unknown one is an UnknownCpuError that
    suggests the model it is probably meant to be (other case, typo)."""
    import difflib

    from ..errors import UnknownCpuError

    if cpu in matrix.models:
        return cpu
    folded = [n for n in matrix.models if n.lower() == cpu.lower()]
    close = folded or difflib.get_close_matches(cpu.lower(), list(matrix.models), n=3)
    if close:
        raise UnknownCpuError(
            f"unknown CPU {cpu!r}: did you mean {' or '.join(repr(c) for c in close)}? "
            "(model names are case-sensitive; sdematrix list-cpus lists them)"
        )
    return select_cpus(matrix, [cpu])[0]  # the usual error, listing every name


def explain(matrix: Matrix, cpu: str) -> str:
    """A readable report for `sdematrix explain CPU`."""
    name = select_cpus(matrix, [cpu])[0]
    model = matrix.models[name]
    feats = model_features(matrix, name)
    rows = decisions(matrix, name)
    lines = [
        f"{name}: {model.title} ({feats.vendor} family 0x{feats.family:x} model 0x{feats.model:x} "
        f"stepping {feats.stepping}; xcr0 0x{feats.xcr0:x}"
        + (f"; AVX10.{feats.avx10_version}" if feats.avx10_version else "")
        + ")",
        f"  dispatcher features: {' '.join(feats.features) or '(none)'}",
        f"  caches (CPUID leaf {descriptor_leaf(model):#x}): {describe_caches(model)}",
        f"  {'cell':<16} {'chosen':<10} {'expected':<10} why",
    ]
    bad = 0
    for r in rows:
        mark = "" if r.agrees else "  <-- DISAGREES with sde_matrix.yaml"
        bad += not r.agrees
        lines.append(
            f"  {r.mode + '/' + r.direction:<16} {r.chosen:<10} {r.expected:<10} {r.reason}{mark}"
        )
    lines.append(
        "  all cells agree with the matrix"
        if not bad
        else f"  {bad} cell(s) disagree: fix sde_matrix.yaml or the dispatcher policy"
    )
    return "\n".join(lines) + "\n"


def list_cpus(matrix: Matrix) -> list[dict[str, Any]]:
    """One row per model (file order) for `sdematrix list-cpus`, with the
    same expected-path columns for every model: a mode whose two directions
    expect the same path on every model is one column (``gcm``); a mode where
    some model's directions differ (cfb128: encrypt is serial, decrypt
    parallel) is two columns (``cfb128/enc``, ``cfb128/dec``) for every
    model, so no row leaves a column empty."""
    split = {
        mode: any(
            len({matrix.expected[(cpu, mode, d)] for d in DIRECTIONS}) > 1 for cpu in matrix.models
        )
        for mode in MODES
    }
    rows: list[dict[str, Any]] = []
    for name, m in matrix.models.items():
        row: dict[str, Any] = {
            "cpu": name,
            "title": m.title,
            "vendor": m.vendor,
            "sde_chip": m.sde_chip,
            "qemu_model": m.qemu_model,
            "max_vector_bits": m.max_vector_bits,
        }
        for mode in MODES:
            if split[mode]:
                for d in DIRECTIONS:
                    row[f"{mode}/{d[:3]}"] = matrix.expected[(name, mode, d)]
            else:
                row[mode] = matrix.expected[(name, mode, DIRECTIONS[0])]
        rows.append(row)
    return rows
