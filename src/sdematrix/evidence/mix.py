"""The instruction-mix model every backend produces.

One normalised histogram whatever the source (an SDE ``-mix`` file, the ptrace
tracer's decoded instructions, the QEMU plugin's counts):

* ``forms``: executed-instruction counts keyed by (MNEMONIC, encoding, width),
  where encoding is ``legacy`` | ``vex`` | ``evex`` | ``other`` and width is the
  widest vector register operand: ``none`` | ``xmm`` | ``ymm`` | ``zmm``.
  Path signatures are checked against this table.
* ``isa_set`` / ``isa_ext`` / ``category``: XED-style group names (as SDE prints
  them, e.g. ``AVX512_VAES_512``, ``AES``, ``AVX2``), best effort for the
  non-SDE backends.
* per image and per function breakdowns, so that a signature can be scoped to
  the library's own code and a failure can name the function that offended;
* ``legacy_forms``: executions of encodings the model ran as an older
  instruction (``"TZCNT as BSF": n`` on a model without BMI1, see
  :data:`sdematrix.evidence.decode.LEGACY_FORMS`); those are counted in the other
  tables under the instruction the model executed (BSF).
"""

from __future__ import annotations

import fnmatch
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENCODINGS = ("legacy", "vex", "evex", "other")
WIDTHS = ("none", "xmm", "ymm", "zmm")

Form = tuple[str, str, str]  # (mnemonic, encoding, width)


@dataclass
class MixCounts:
    """Counts of executed instructions over some scope."""

    total: int = 0
    forms: Counter[Form] = field(default_factory=Counter)
    isa_set: Counter[str] = field(default_factory=Counter)
    isa_ext: Counter[str] = field(default_factory=Counter)
    category: Counter[str] = field(default_factory=Counter)

    def add(
        self,
        mnemonic: str,
        encoding: str,
        width: str,
        count: int = 1,
        *,
        isa_set: str | None = None,
        isa_ext: str | None = None,
        category: str | None = None,
    ) -> None:
        self.total += count
        self.forms[(mnemonic.upper(), encoding, width)] += count
        if isa_set:
            self.isa_set[isa_set] += count
        if isa_ext:
            self.isa_ext[isa_ext] += count
        if category:
            self.category[category] += count

    def merge(self, other: MixCounts) -> None:
        self.total += other.total
        self.forms.update(other.forms)
        self.isa_set.update(other.isa_set)
        self.isa_ext.update(other.isa_ext)
        self.category.update(other.category)

    # Derived views -------------------------------------------------------
    @property
    def mnemonic(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for (m, _e, _w), n in self.forms.items():
            c[m] += n
        return c

    @property
    def width(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for (_m, _e, w), n in self.forms.items():
            c[w] += n
        return c

    @property
    def encoding(self) -> Counter[str]:
        c: Counter[str] = Counter()
        for (_m, e, _w), n in self.forms.items():
            c[e] += n
        return c

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_width": dict(self.width),
            "by_encoding": dict(self.encoding),
            "by_mnemonic": dict(self.mnemonic.most_common()),
            "by_isa_set": dict(self.isa_set.most_common()),
            "by_isa_ext": dict(self.isa_ext.most_common()),
            "by_category": dict(self.category.most_common()),
            "forms": [[m, e, w, n] for (m, e, w), n in self.forms.most_common()],
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> MixCounts:
        mc = cls(total=int(d.get("total", 0)))
        for m, e, w, n in d.get("forms", []):
            mc.forms[(m, e, w)] += int(n)
        mc.isa_set.update({k: int(v) for k, v in d.get("by_isa_set", {}).items()})
        mc.isa_ext.update({k: int(v) for k, v in d.get("by_isa_ext", {}).items()})
        mc.category.update({k: int(v) for k, v in d.get("by_category", {}).items()})
        return mc


@dataclass
class FunctionMix:
    name: str
    image: str
    counts: MixCounts
    lo: int | None = None
    hi: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "image": self.image,
            "lo": self.lo,
            "hi": self.hi,
            **self.counts.to_json(),
        }


@dataclass
class Mix:
    """A whole run's mix: overall, per image, per function, per thread."""

    source: str  # "sde" | "ptrace" | "qemu"
    overall: MixCounts = field(default_factory=MixCounts)
    images: dict[str, MixCounts] = field(default_factory=dict)
    functions: list[FunctionMix] = field(default_factory=list)
    threads: list[MixCounts] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    # "TZCNT as BSF" -> executions (see the module doc)
    legacy_forms: Counter[str] = field(default_factory=Counter)
    # (function, image) -> its entry in `functions`, for add_instruction
    _findex: dict[tuple[str, str], FunctionMix] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def add_instruction(
        self,
        *,
        image: str,
        function: str,
        mnemonic: str,
        encoding: str,
        width: str,
        count: int = 1,
        isa_set: str | None = None,
        isa_ext: str | None = None,
        category: str | None = None,
    ) -> None:
        """Account `count` executions of one decoded instruction everywhere."""
        kw = {"isa_set": isa_set, "isa_ext": isa_ext, "category": category}
        self.overall.add(mnemonic, encoding, width, count, **kw)
        self.images.setdefault(image, MixCounts()).add(mnemonic, encoding, width, count, **kw)
        fm = self._function(function, image)
        fm.counts.add(mnemonic, encoding, width, count, **kw)

    def _function(self, name: str, image: str) -> FunctionMix:
        if len(self._findex) != len(self.functions):  # functions filled directly
            self._findex = {(f.name, f.image): f for f in self.functions}
        fm = self._findex.get((name, image))
        if fm is None:
            fm = FunctionMix(name=name, image=image, counts=MixCounts())
            self.functions.append(fm)
            self._findex[(name, image)] = fm
        return fm

    @property
    def legacy_total(self) -> int:
        """Executions of legacy forms (the per-cell ``legacy_forms`` figure)."""
        return sum(self.legacy_forms.values())

    def scoped(self, scope: str) -> MixCounts:
        """Counts for a scope: ``all``, or images whose path contains `scope`
        (fnmatch pattern against the image's base name)."""
        if scope == "all":
            return self.overall
        out = MixCounts()
        for img, counts in self.images.items():
            base = img.rsplit("/", 1)[-1]
            if fnmatch.fnmatch(base, scope) or fnmatch.fnmatch(img, scope):
                out.merge(counts)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "meta": self.meta,
            "overall": self.overall.to_json(),
            "images": {k: v.to_json() for k, v in sorted(self.images.items())},
            "functions": [
                f.to_json() for f in sorted(self.functions, key=lambda f: -f.counts.total)
            ],
            "threads": [t.to_json() for t in self.threads],
            "legacy_forms": dict(self.legacy_forms.most_common()),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Mix:
        mix = cls(source=str(d.get("source", "unknown")), meta=dict(d.get("meta", {})))
        mix.overall = MixCounts.from_json(d.get("overall", {}))
        mix.images = {k: MixCounts.from_json(v) for k, v in d.get("images", {}).items()}
        for f in d.get("functions", []):
            mix.functions.append(
                FunctionMix(
                    name=f["name"],
                    image=f.get("image", ""),
                    lo=f.get("lo"),
                    hi=f.get("hi"),
                    counts=MixCounts.from_json(f),
                )
            )
        mix.threads = [MixCounts.from_json(t) for t in d.get("threads", [])]
        mix.legacy_forms.update({k: int(v) for k, v in d.get("legacy_forms", {}).items()})
        return mix

    def save(self, path: Path) -> None:
        # compact: json's C encoder serves only indent=None (indent=1 made
        # saving a mix cost more than tracing a whole aesni cell)
        path.write_text(json.dumps(self.to_json(), separators=(",", ":")) + "\n")

    @classmethod
    def load(cls, path: Path) -> Mix:
        return cls.from_json(json.loads(path.read_text()))


@dataclass(frozen=True)
class Selector:
    """A query on a mix: either form fields (mnemonic / encoding / width, each an
    fnmatch pattern or None for any) or one group field (isa_set / isa_ext /
    category).  `count` returns how many executed instructions match."""

    mnemonic: str | None = None
    encoding: str | None = None
    width: str | None = None
    isa_set: str | None = None
    isa_ext: str | None = None
    category: str | None = None

    @classmethod
    def parse(cls, spec: Mapping[str, str]) -> Selector:
        return cls(**{k: (str(v).upper() if k == "mnemonic" else str(v)) for k, v in spec.items()})

    def is_form(self) -> bool:
        return any(x is not None for x in (self.mnemonic, self.encoding, self.width))

    def matching_forms(self, counts: MixCounts) -> Counter[Form]:
        out: Counter[Form] = Counter()
        for form, n in counts.forms.items():
            m, e, w = form
            if self.mnemonic is not None and not fnmatch.fnmatchcase(m, self.mnemonic):
                continue
            if self.encoding is not None and not fnmatch.fnmatchcase(e, self.encoding):
                continue
            if self.width is not None and not fnmatch.fnmatchcase(w, self.width):
                continue
            out[form] += n
        return out

    def count(self, counts: MixCounts) -> int:
        if self.is_form():
            return sum(self.matching_forms(counts).values())
        for attr in ("isa_set", "isa_ext", "category"):
            pat = getattr(self, attr)
            if pat is not None:
                table: Counter[str] = getattr(counts, attr)
                return sum(n for k, n in table.items() if fnmatch.fnmatchcase(k, pat))
        return counts.total

    def describe(self) -> str:
        parts = [
            f"{k}={v}"
            for k, v in (
                ("mnemonic", self.mnemonic),
                ("encoding", self.encoding),
                ("width", self.width),
                ("isa_set", self.isa_set),
                ("isa_ext", self.isa_ext),
                ("category", self.category),
            )
            if v is not None
        ]
        return "{" + ", ".join(parts) + "}"


def top_offenders(
    mix: Mix, selector: Selector, scope: str = "all", limit: int = 5
) -> list[tuple[str, str, Form, int]]:
    """The (function, image, form, count) rows that make `selector` match,
    largest first: what a failure message names."""
    rows: list[tuple[str, str, Form, int]] = []
    for fm in mix.functions:
        if scope != "all":
            base = fm.image.rsplit("/", 1)[-1]
            if not (fnmatch.fnmatch(base, scope) or fnmatch.fnmatch(fm.image, scope)):
                continue
        for form, n in selector.matching_forms(fm.counts).items():
            rows.append((fm.name, fm.image, form, n))
    rows.sort(key=lambda r: -r[3])
    return rows[:limit]


def format_form(form: Form) -> str:
    m, e, w = form
    return f"{m}({e},{w})"
