"""Write a run's results: JUnit XML and a results directory.

JUnit (built with ElementTree in the layout the ``junit-xml`` package writes,
one ``<testcase>`` serialised per finished cell: :class:`JUnitDoc`, which
``sdematrix exec`` writes its per-model checks with too):

* one ``<testsuite name="<cpu>">`` per CPU model, suite properties ``cpu``,
  ``title``, ``backend``, ``sdematrix_version`` (the writing tool's version);
* one ``<testcase name="<cpu>.<mode>.<direction>.<key_bits>.<length>"
  classname="sdematrix.<cpu>">`` per cell that ran, with properties ``cpu``,
  ``mode``, ``direction``, ``key_bits``, ``length``, ``backend``,
  ``backend_version``, ``path`` (chosen), ``expected_path``;
* ``<failure>`` / ``<error>`` / ``<skipped>`` with the first reason as message
  and all reasons (one per line, then the last output lines) as text;
* ``<system-out>``: the mix summary (total, by width, by encoding, top ISA sets).

Results directory ``<out>/`` (input for the HTML report builder):

``results.json``
    ``schema`` ("sdematrix-results/1"); ``tool`` {name, version}; ``matrix``
    (path of the YAML); ``seed``; ``jobs``; ``timeout_s``; ``started_at`` /
    ``finished_at`` (ISO 8601 UTC); ``duration_s``; ``interrupted``;
    ``host`` {hostname, kernel, python, cpu_model_name, vendor, family, model,
    flags (vector/crypto subset of /proc/cpuinfo)}; ``backend_requested``;
    ``backends`` {name: {available, reason, version}}; ``models`` {cpu: {title,
    backend (chosen for that model or null), skip_reason}}; ``counts`` {pass,
    fail, error, skip, not_run}; ``cells``: one entry per cell that ran = the
    outcome (``cell, cpu, mode, direction, key_bits, length, status, reasons,
    reason_kinds, path, expected_path, backend, backend_version, duration_s,
    digest, expected_digest, output_tail``: :mod:`sdematrix.results.outcome_json`,
    which the report loader reads it with; ``reason_kinds``: one
    :class:`sdematrix.verdict.reasons.Kind` per reason) + ``mix_summary`` (or null) + ``files``
    {cell, mix}; ``not_run``: names of cells not run (interrupted).
``cells/<cell>.json``
    {``outcome``: as above, ``probe``: the probe's JSON report or null,
    ``run``: {backend, status, exit_code, reason, duration_s, backend_version,
    violations [{reason, address, function, image, mnemonic, bytes_hex}],
    artifacts {name: path}, stdout_tail, stderr_tail, probe_argv},
    ``mix_summary``}.
    ``run.work_removed``: how many scratch files of a passing cell were
    deleted (``work/`` is kept only for failures unless ``--keep-work``).
``mix/<cell>.mix.json``
    the normalised :class:`~sdematrix.evidence.mix.Mix` (``Mix.to_json``), when the
    backend produced one; a passing cell's keeps only its busiest functions
    (``meta.functions_executed`` / ``meta.functions_omitted`` say how many).
``junit.xml``
    the JUnit file above (a hard link to ``--junit`` when that is elsewhere).
``work/``
    backend scratch (e.g. SDE's raw ``.mix`` files).

``results.json`` also has ``in_progress``: true while the run is still
writing (then ``not_run`` lists the cells not finished yet).  Everything is
written as the cells finish, each file by rename:
:class:`sdematrix.results.writer.ResultsWriter`.  Every value embedded in the
XML goes through :func:`xml_safe` (the characters XML 1.0 forbids become
visible ``\\xNN`` escapes).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import os
import platform
import re
import shutil
import socket
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..errors import OutputDirError
from ..evidence.mix import Mix
from ..pipeline.run import CellRecord, RunReport

if TYPE_CHECKING:
    from ..verdict.exec_judge import ExecOutcome

__all__ = [
    "JUnitCase",
    "JUnitDoc",
    "atomic_write",
    "case_element",
    "exec_cases",
    "exec_junit_doc",
    "host_info",
    "junit_doc",
    "junit_xml_string",
    "link_file",
    "mix_summary",
    "mix_summary_text",
    "prepare_out_dir",
    "testcase_element",
    "testcase_xml",
    "write_junit",
    "xml_safe",
]

_FLAGS_OF_INTEREST = (
    "aes",
    "pclmulqdq",
    "avx",
    "avx2",
    "bmi2",
    "avx512f",
    "avx512vl",
    "avx512bw",
    "avx512dq",
    "vaes",
    "vpclmulqdq",
    "avx10",
    "cpuid_fault",
    "gfni",
)


def prepare_out_dir(out: Path) -> None:
    """Create <out>, cells/, mix/, work/ and prove they are writable (else OutputDirError)."""
    try:
        if out.exists() and not out.is_dir():
            raise NotADirectoryError(20, "Not a directory")
        for sub in ("", "cells", "mix", "work"):
            (out / sub).mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("ok\n")
        probe.unlink()
    except OSError as e:
        raise OutputDirError(f"output directory {out} is not writable: {e.strerror or e}") from None


def host_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return info
    first = text.split("\n\n", 1)[0]
    fields: dict[str, str] = {}
    for line in first.splitlines():
        if ":" in line:
            k, v = line.split(":", 1)
            fields[k.strip()] = v.strip()
    info["cpu_model_name"] = fields.get("model name")
    info["vendor"] = fields.get("vendor_id")
    for key, name in (("cpu family", "family"), ("model", "model")):
        try:
            info[name] = int(fields.get(key, ""))
        except ValueError:
            info[name] = None
    flags = set(fields.get("flags", "").split())
    info["flags"] = [f for f in _FLAGS_OF_INTEREST if f in flags]
    return info


def mix_summary(mix: Mix | None) -> dict[str, Any] | None:
    if mix is None:
        return None
    o = mix.overall
    return {
        "total": o.total,
        "by_width": dict(o.width.most_common()),
        "by_encoding": dict(o.encoding.most_common()),
        "top_isa_sets": dict(o.isa_set.most_common(8)),
        "source": mix.source,
        # encodings the model ran as an older instruction (TZCNT as BSF)
        "legacy_forms": mix.legacy_total,
        "legacy_forms_by_kind": dict(mix.legacy_forms.most_common()),
    }


def mix_summary_text(mix: Mix | None) -> str:
    s = mix_summary(mix)
    if s is None:
        return ""

    def fmt(d: dict[str, int]) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items()) or "-"

    return (
        f"mix ({s['source']}): total {s['total']}\n"
        f"  by width:    {fmt(s['by_width'])}\n"
        f"  by encoding: {fmt(s['by_encoding'])}\n"
        f"  top ISA sets: {fmt(s['top_isa_sets'])}\n"
        f"  legacy forms: {s['legacy_forms']} ({fmt(s['legacy_forms_by_kind'])})\n"
    )


# --------------------------------------------------------------------------
# JUnit
# --------------------------------------------------------------------------

# XML 1.0 allows TAB, LF, CR and U+0020..U+D7FF, U+E000..U+FFFD, U+10000..:
# every other code point (C0 controls, lone surrogates, U+FFFE/U+FFFF) makes
# the document unparseable, whatever escaping is used (&#1; is illegal too).
# They are replaced by a visible escape, so nothing is silently lost.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_safe(text: object) -> str:
    """`text` with every character XML 1.0 forbids replaced by ``\\xNN`` / ``\\uNNNN``."""
    s = "" if text is None else str(text)
    return _XML_ILLEGAL.sub(lambda m: _visible(m.group()), s)


def _visible(ch: str) -> str:
    o = ord(ch)
    return f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}"


def _case_properties(rec: CellRecord) -> dict[str, str]:
    o = rec.outcome
    c = rec.cell
    return {
        "cpu": c.cpu,
        "mode": c.mode,
        "direction": c.direction,
        "key_bits": str(c.key_bits),
        "length": str(c.length),
        "backend": o.backend or "",
        "backend_version": o.backend_version or "",
        "path": o.path or "",
        "expected_path": o.expected_path or "",
        "legacy_forms": str(_legacy_total(rec)),
        **_coverage_properties(rec),
    }


def _legacy_total(rec: CellRecord) -> int:
    """Executions the model ran as an older instruction (TZCNT as BSF)."""
    mix = rec.result.mix if rec.result else None
    return mix.legacy_total if mix is not None else 0


# Mix metadata that says how much the verdict saw (ptrace: the tracer's
# counts; sde: how much of the image the function blocks cover; qemu: the
# plugin's counts), recorded per testcase as coverage.<key>.
COVERAGE_KEYS = (
    "cpuid_mode",
    "cpuid_answered",
    "xgetbv_emulated",
    "steps",
    "regions",
    "distinct_addresses",
    "threads_stepped",
    "images",
    "truncated",
    "function_coverage",
)


def _coverage_properties(rec: CellRecord) -> dict[str, str]:
    mix = rec.result.mix if rec.result else None
    if mix is None:
        return {}
    props = {"coverage.instructions": str(mix.overall.total)}
    for k in COVERAGE_KEYS:
        v = mix.meta.get(k)
        if v is None:
            continue
        if isinstance(v, (list, tuple)):
            v = " ".join(str(x) for x in v)
        props[f"coverage.{k}"] = str(v)
    return props


def _el(tag: str, attrs: dict[str, str] | None = None, text: str | None = None) -> ET.Element:
    el = ET.Element(tag, {k: xml_safe(v) for k, v in (attrs or {}).items()})
    if text:
        el.text = xml_safe(text)
    return el


def _properties(props: dict[str, str]) -> ET.Element:
    el = ET.Element("properties")
    for k, v in props.items():
        el.append(_el("property", {"name": k, "value": v}))
    return el


@dataclass
class JUnitCase:
    """One ``<testcase>`` of a suite, as `sdematrix run` (a cell) and
    `sdematrix exec` (a model's check) both write it."""

    suite: str  # the <testsuite> it belongs to: the CPU model
    name: str
    classname: str
    status: str  # pass | fail | error | skip
    message: str = ""  # the first reason (+ how many more)
    text: str = ""  # every reason, one per line (then any output)
    skip_text: bool = True  # whether <skipped> carries `text`
    duration_s: float = 0.0
    properties: dict[str, str] = field(default_factory=dict)
    stdout: str = ""  # <system-out>


def case_element(c: JUnitCase) -> ET.Element:
    """One ``<testcase>``: properties, then failure / error / skipped, then
    system-out (the layout junit-xml produced)."""
    attrs = {"name": c.name}
    if c.duration_s:
        attrs["time"] = f"{c.duration_s:f}"
    attrs["classname"] = c.classname
    case = _el("testcase", attrs)
    if c.properties:
        case.append(_properties(c.properties))
    if c.status == "fail":
        case.append(_el("failure", {"type": "sdematrix.fail", "message": c.message}, c.text))
    elif c.status == "error":
        case.append(_el("error", {"type": "sdematrix.error", "message": c.message}, c.text))
    elif c.status == "skip":
        case.append(
            _el(
                "skipped",
                {"type": "skipped", "message": c.message},
                c.text if c.skip_text else None,
            )
        )
    if c.stdout:
        case.append(_el("system-out", None, c.stdout))
    return case


def run_case(rec: CellRecord) -> JUnitCase:
    """The case of one `sdematrix run` cell."""
    o = rec.outcome
    c = rec.cell
    text = "\n".join(o.reasons)
    if o.output_tail:
        text += "\n\n" + o.output_tail
    return JUnitCase(
        suite=c.cpu,
        name=c.name,
        classname=f"sdematrix.{c.cpu}",
        status=o.status,
        message=o.message,
        text=text,
        skip_text=len(o.reasons) > 1,
        duration_s=o.duration_s,
        properties=_case_properties(rec),
        stdout=mix_summary_text(rec.result.mix if rec.result else None),
    )


def testcase_element(rec: CellRecord) -> ET.Element:
    """The ``<testcase>`` of one `sdematrix run` cell."""
    return case_element(run_case(rec))


def case_xml(c: JUnitCase) -> str:
    """`c` as indented XML text (two suite levels deep)."""
    el = case_element(c)
    ET.indent(el, space="  ", level=2)
    return "    " + ET.tostring(el, encoding="unicode") + "\n"


def testcase_xml(rec: CellRecord) -> str:
    """The ``<testcase>`` of `rec` as indented XML text (two suite levels deep)."""
    return case_xml(run_case(rec))


_COUNTED = {"fail": "failures", "error": "errors", "skip": "skipped"}


class JUnitDoc:
    """A JUnit document built one finished case at a time (the one JUnit
    writer of `sdematrix run` and `sdematrix exec`).

    Each case is serialised once, when it is added (:meth:`add_case`; a run's
    cell: :meth:`add`); the document (:meth:`text`) is those fragments under
    one ``<testsuite>`` per model, in matrix order, with the counts -- so
    rewriting the whole file after every cell costs a join, not a
    re-serialisation.  `suite_properties`: each model's suite properties
    (``sdematrix_version`` is added last)."""

    def __init__(
        self,
        models: list[str],
        suite_properties: dict[str, dict[str, str]],
        timestamp: str,
    ) -> None:
        self.models = list(models)
        self.suite_properties = suite_properties
        self.timestamp = timestamp
        self.hostname = socket.gethostname()
        self._cases: dict[str, list[tuple[int, str]]] = {m: [] for m in self.models}
        self._counts: dict[str, dict[str, int]] = {}
        self._time: dict[str, float] = {}

    def add(self, rec: CellRecord, order: int = 0) -> None:
        """One finished `sdematrix run` cell."""
        self.add_case(run_case(rec), order)

    def add_case(self, case: JUnitCase, order: int = 0) -> None:
        cpu = case.suite
        if cpu not in self._cases:
            self._cases[cpu] = []
            self.models.append(cpu)
        self._cases[cpu].append((order, case_xml(case)))
        n = self._counts.setdefault(cpu, {"tests": 0, "failures": 0, "errors": 0, "skipped": 0})
        n["tests"] += 1
        key = _COUNTED.get(case.status)
        if key:
            n[key] += 1
        self._time[cpu] = self._time.get(cpu, 0.0) + (case.duration_s or 0.0)

    def text(self) -> str:
        zero = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        totals = dict(zero)
        parts: list[str] = []
        for cpu in self.models:
            n = self._counts.get(cpu, zero)
            for k in totals:
                totals[k] += n[k]
            attrs = {
                "disabled": "0",
                "errors": str(n["errors"]),
                "failures": str(n["failures"]),
                "name": cpu,
                "skipped": str(n["skipped"]),
                "tests": str(n["tests"]),
                "time": repr(round(self._time.get(cpu, 0.0), 6)),
                "hostname": self.hostname,
                "timestamp": self.timestamp,
            }
            suite = _el("testsuite", attrs)
            head = ET.tostring(suite, encoding="unicode")
            # "<testsuite .../>" -> open tag
            parts.append("  " + head[:-2].rstrip() + ">\n")
            props = _properties(
                {
                    **self.suite_properties.get(cpu, {"cpu": cpu}),
                    "sdematrix_version": __version__,
                }
            )
            ET.indent(props, space="  ", level=2)
            parts.append("    " + ET.tostring(props, encoding="unicode") + "\n")
            parts.extend(frag for _i, frag in sorted(self._cases.get(cpu, [])))
            parts.append("  </testsuite>\n")
        elapsed = sum(self._time.values())
        root = ET.tostring(
            _el(
                "testsuites",
                {
                    **{k: str(v) for k, v in totals.items()},
                    "time": f"{elapsed:.3f}",
                    "name": "sdematrix",
                },
            ),
            encoding="unicode",
        )
        return (
            '<?xml version="1.0" ?>\n'
            + root[:-2].rstrip()
            + ">\n"
            + "".join(parts)
            + "</testsuites>\n"
        )


def junit_doc(report: RunReport) -> JUnitDoc:
    """An empty :class:`JUnitDoc` for the models of `report`."""
    models = list(dict.fromkeys(c.cpu for c in report.cells))
    titles = {
        cpu: (report.matrix.models[cpu].title if cpu in report.matrix.models else cpu)
        for cpu in models
    }
    backends = {cpu: (report.model_backends.get(cpu, {}).get("backend") or "") for cpu in models}
    props = {cpu: {"cpu": cpu, "title": titles[cpu], "backend": backends[cpu]} for cpu in models}
    return JUnitDoc(models, props, report.started_at)


def exec_cases(o: ExecOutcome, argv: list[str]) -> list[JUnitCase]:
    """An exec model's cases: one per check; the first carries the run (its
    time, the program and mix summary, the coverage properties)."""
    r = o.result
    props: dict[str, str] = {}
    if r is not None:
        for k, v in r.meta.items():
            props[f"coverage.{k}"] = " ".join(str(x) for x in v) if isinstance(v, list) else str(v)
        props["exit_code"] = str(r.exit_code)
        props["legacy_forms"] = str(r.mix.legacy_total if r.mix else 0)
    out = []
    for i, check in enumerate(o.all_checks()):
        first = i == 0
        out.append(
            JUnitCase(
                suite=o.model,
                name=f"{o.model}: {check.name}"[:200],
                classname=f"sdematrix.exec.{o.model}",
                status=check.status,
                message=check.message,
                text="\n".join(check.reasons),
                duration_s=r.duration_s if r and first else 0.0,
                properties=props if first else {},
                stdout=(f"program: {' '.join(argv)}\n" + mix_summary_text(r.mix if r else None))
                if first
                else "",
            )
        )
    return out


def exec_junit_doc(outcomes: list[ExecOutcome], argv: list[str]) -> JUnitDoc:
    """The JUnit document of an ``sdematrix exec`` run: a suite per model."""
    models = [o.model for o in outcomes]
    doc = JUnitDoc(
        models,
        {m: {"cpu": m} for m in models},
        _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
    )
    for o in outcomes:
        for i, case in enumerate(exec_cases(o, argv)):
            doc.add_case(case, i)
    return doc


def junit_xml_string(report: RunReport) -> str:
    doc = junit_doc(report)
    for i, rec in enumerate(report.records):
        doc.add(rec, i)
    return doc.text()


def write_junit(path: Path, report: RunReport) -> None:
    try:
        atomic_write(path, junit_xml_string(report))
    except OSError as e:
        raise OutputDirError(f"cannot write JUnit file {path}: {e.strerror or e}") from None


def link_file(src: Path, dst: Path) -> None:
    """`dst` becomes the file `src` (a hard link made beside `dst`, renamed
    over it; a copy only across file systems): one file written once, at two
    paths (``--junit`` and ``<out>/junit.xml``).  Nothing when they are one."""
    try:
        if dst.resolve() == src.resolve():
            return
    except OSError:
        pass
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.link")
    with contextlib.suppress(OSError):
        tmp.unlink()
    try:
        os.link(src, tmp)
    except OSError:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def atomic_write(path: Path, text: str | bytes) -> None:
    """Write `text` (UTF-8; bytes as they are) to a temporary file next to
    `path`, then rename it over `path`: readers see the old file or the new
    one, never half of one; on any error (a full disk) the temporary file is
    removed and the error raised."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    data = text if isinstance(text, bytes) else text.encode("utf-8")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
