"""The distribution as a user gets it: sdist, wheel, metadata, version.

* the version is written once (src/sdematrix/_version.py) and ``sdematrix
  --version``, results.json, the JUnit suites and the HTML report print it;
* ``python -m build`` (the sdist, then a wheel built from that sdist, as a
  release does) passes on a copy of the tree, and ``twine check --strict``
  accepts both files;
* the sdist carries every file the build reads; the wheel carries the
  compiled extensions and helper executables (not their sources);
* ``auditwheel show`` names the manylinux tag the local wheel would get;
* the project URLs come from the repository that builds the release (here a
  test address in GITHUB_SERVER_URL/GITHUB_REPOSITORY, as on a GitHub runner):
  the sdist carries them, a wheel built from that sdist without the variables
  keeps them, and a build that knows no address has none and still passes
  ``twine check --strict``;
* the sdist installs into a fresh venv (no system site-packages, no
  PYTHONPATH, cwd outside the tree) and the installed package lists the
  CPUs, explains a model, round-trips AES-GCM against ``cryptography`` and
  runs a real ptrace matrix (one model, one tiny workload per mode).

The build tests share one ``python -m build`` (about a minute on 2 cores) and
the round trip one more compile; all of them are marked slow.
"""

from __future__ import annotations

import ast
import email
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import venv
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from _by_path import load_by_path
from doubles.sdematrix_cli import ROOT, SHIPPED_MATRIX, ptrace_skip_reason, run_cli

VERSION_FILE = ROOT / "src" / "sdematrix" / "_version.py"

# What a GitHub runner sets; a test address, not the project's (which the tree
# does not know).  Every build here gets exactly these or none.
_REPO_VARS = ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY")
TEST_REPO_ENV = {
    "GITHUB_SERVER_URL": "https://github.com",
    "GITHUB_REPOSITORY": "example-owner/example-repo",
}
TEST_REPO = "https://github.com/example-owner/example-repo"
TEST_PROJECT_URLS = [
    f"Source, {TEST_REPO}",
    f"Issues, {TEST_REPO}/issues",
    f"Documentation, {TEST_REPO}#readme",
]

# Build products and repository machinery: never sources.  The second set only
# at the top of the tree (tests/data/results/ is test data, /results a run's).
_IGNORE_ANYWHERE = shutil.ignore_patterns(
    ".git",
    "*.egg-info",
    "__pycache__",
    "*.so",
    "*.o",
    "_bin",
    "_native.c",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    ".benchmarks",
    "wheelhouse",
)
_IGNORE_TOP = shutil.ignore_patterns("build", "dist", "results*", "out", "sdematrix-results")


def _copy_ignore(directory: str, names: list[str]) -> set[str]:
    ignored = set(_IGNORE_ANYWHERE(directory, names))
    if Path(directory) == ROOT:
        ignored |= set(_IGNORE_TOP(directory, names))
    return ignored


def _version_constant() -> str:
    """The version as written in _version.py, read without importing the package."""
    for node in ast.parse(VERSION_FILE.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == [
            "__version__"
        ]:
            value = ast.literal_eval(node.value)
            assert isinstance(value, str)
            return value
    raise AssertionError(f"no __version__ = '...' in {VERSION_FILE}")


def _run(argv: list[str], *, timeout: float = 900, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)


def _clean_env() -> dict[str, str]:
    """The environment without anything that points Python at the source tree
    or names a repository (the project URLs' source on a GitHub runner)."""
    drop = ("PYTHON", "VIRTUAL_ENV", "SDEMATRIX_", "SDE_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop) and k not in _REPO_VARS}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


# ------------------------------------------------------------- version --


def test_version_is_written_once() -> None:
    """pyproject takes the version from _version.py, the package re-exports it,
    and no other Python module spells a version literal of its own."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in pyproject["project"]
    assert "version" in pyproject["project"]["dynamic"]
    dynamic = pyproject["tool"]["setuptools"]["dynamic"]["version"]
    assert dynamic == {"attr": "sdematrix._version.__version__"}
    version = _version_constant()
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:(?:a|b|rc)\d+)?(?:\.dev\d+)?", version), version
    import sdematrix

    assert sdematrix.__version__ == version
    literal = re.compile(r"""["']""" + re.escape(version) + r"""["']""")
    offenders = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "src" / "sdematrix").rglob("*.py")
        if p != VERSION_FILE and literal.search(p.read_text())
    ]
    assert offenders == [], f"version literal outside _version.py: {offenders}"


def test_native_library_version_matches() -> None:
    """vc_version() in the C library (vaescrypt.__version__) is the second
    place a version is written; it must not drift from the package's."""
    import vaescrypt

    assert vaescrypt.__version__ == _version_constant()


@dataclass(frozen=True)
class TinyRun:
    out: Path
    junit: Path
    report: Path


def tiny_matrix(dest: Path, source: Path = SHIPPED_MATRIX) -> Path:
    """The shipped matrix with one smallest workload per mode: the fewest cells
    the schema allows (every mode must have a workload) for one model."""
    doc = yaml.safe_load(source.read_text())
    doc["workloads"] = {
        "gcm": [{"key_bits": 128, "length": 16}],
        "cfb128": [{"key_bits": 128, "length": 16}],
        "cfb8": [{"key_bits": 128, "length": 1}],
        "cfb1": [{"key_bits": 128, "length": 1}],
    }
    dest.write_text(yaml.safe_dump(doc, sort_keys=False))
    return dest


def assert_reports_carry(run: TinyRun, version: str) -> None:
    """results.json, every JUnit suite and the HTML report name `version`."""
    doc = json.loads((run.out / "results.json").read_text())
    assert doc["tool"] == {"name": "sdematrix", "version": version}
    suites = ET.parse(run.junit).getroot().findall("testsuite")
    assert suites
    for suite in suites:
        props = {p.get("name"): p.get("value") for p in suite.iter("property")}
        assert props.get("sdematrix_version") == version, suite.get("name")
    html = (run.report / "report.html").read_text()
    assert f'<meta name="generator" content="sdematrix {version}">' in html
    assert f"sdematrix {version}" in html  # the header's tool line (from results.json)


def test_cli_and_reports_print_the_version(tmp_path: Path) -> None:
    version = _version_constant()
    r = run_cli("--version")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"sdematrix {version}"
    why = ptrace_skip_reason(SHIPPED_MATRIX, ["hsw"])
    if why:
        pytest.skip(why)
    run = TinyRun(tmp_path / "out", tmp_path / "junit.xml", tmp_path / "report")
    r = run_cli(
        "run",
        "--matrix",
        str(tiny_matrix(tmp_path / "tiny.yaml")),
        "--cpu",
        "hsw",
        "--backend",
        "ptrace",
        "--jobs",
        "1",
        "--out",
        str(run.out),
        "--junit",
        str(run.junit),
        "--report",
        str(run.report),
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert_reports_carry(run, version)


# ---------------------------------------------------------------- build --


@dataclass(frozen=True)
class Dists:
    sdist: Path
    wheel: Path


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    """`python -m build` on a copy of the tree (no .git), the test repository
    address in the environment: the sdist, then the wheel from it."""
    tmp = tmp_path_factory.mktemp("build")
    src = tmp / "tree"
    shutil.copytree(ROOT, src, ignore=_copy_ignore, symlinks=True)
    out = tmp / "dist"
    env = {**_clean_env(), **TEST_REPO_ENV}
    r = _run([sys.executable, "-m", "build", "--outdir", str(out), str(src)], env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    sdists = sorted(out.glob("*.tar.gz"))
    wheels = sorted(out.glob("*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return Dists(sdists[0], wheels[0])


@pytest.mark.slow
def test_build_names_and_twine_check(dists: Dists) -> None:
    version = _version_constant()
    assert dists.sdist.name == f"sdematrix-{version}.tar.gz"
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    assert dists.wheel.name == f"sdematrix-{version}-{tag}-{tag}-linux_x86_64.whl"
    r = _run(
        [sys.executable, "-m", "twine", "check", "--strict", str(dists.sdist), str(dists.wheel)]
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.count("PASSED") == 2, r.stdout


@pytest.mark.slow
def test_sdist_carries_every_build_input(dists: Dists) -> None:
    with tarfile.open(dists.sdist) as tf:
        top = f"sdematrix-{_version_constant()}/"
        names = {m.name.removeprefix(top) for m in tf.getmembers() if m.isfile()}
    # every source file the build and the runtime read, as tracked in the tree
    wanted = {
        "LICENSE",
        "README.md",
        "pyproject.toml",
        "setup.py",
        "_project_urls.py",
        "sde_matrix.yaml",
        "src/sdematrix/_version.py",
        "src/sdematrix/sde_matrix.yaml",
        "src/sdematrix/spec/schema/sde_matrix.schema.json",
        "src/sdematrix/qemu_plugin/sdematrix_mix.c",
        "src/sdematrix/qemu_plugin/qemu_plugin_api.h",
        "src/vaescrypt/_fastcall.c",
        "src/vaescrypt/_cdef.h",
        "src/vaescrypt/_buildinfo.py",
    }
    for sub in ("native", "dispatch", "src/sdematrix/tracer"):
        found = {
            str(p.relative_to(ROOT))
            for p in (ROOT / sub).rglob("*")
            if p.is_file() and p.suffix in (".c", ".h")
        }
        assert found, f"no C sources under {sub} in the tree"
        wanted |= found
    missing = sorted(wanted - names)
    assert missing == [], f"missing from the sdist: {missing}"
    products = sorted(n for n in names if n.endswith((".so", ".o", ".pyc")) or "/_bin/" in n)
    assert products == [], f"build products in the sdist: {products}"
    assert not any(n.startswith(("ci/", ".github/")) for n in names)
    # the tests the wheel workflow runs against each installed wheel, with their data
    cibw = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["cibuildwheel"]
    used = set(re.findall(r"\{project\}/(tests/[\w/.]+\.py)", " ".join(cibw["test-command"])))
    assert used and used <= names, sorted(used - names)
    tree_tests = {
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert tree_tests <= names, sorted(tree_tests - names)


def _wheel_metadata(wheel: Path) -> tuple[email.message.Message, list[zipfile.ZipInfo]]:
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
        meta_name = next(i.filename for i in infos if i.filename.endswith(".dist-info/METADATA"))
        return email.message_from_bytes(zf.read(meta_name)), infos


@pytest.mark.slow
def test_wheel_contents_and_metadata(dists: Dists) -> None:
    meta, infos = _wheel_metadata(dists.wheel)
    assert meta["Version"] == _version_constant()
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert meta["Requires-Python"] == ">=3.11"
    assert meta["Description-Content-Type"] == "text/markdown"
    classifiers = set(meta.get_all("Classifier") or [])
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert "Operating System :: POSIX :: Linux" in classifiers
    assert not any(c.startswith("License ::") for c in classifiers)  # superseded by the SPDX field
    assert meta.get_payload().startswith("# vaescrypt + sdematrix")  # the README is the description
    modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in infos}
    for exe in ("sdematrix/_bin/vc-probe", "sdematrix/_bin/vc-tracer"):
        assert exe in modes and modes[exe] & 0o111, (exe, oct(modes.get(exe, 0)))
    assert "vaescrypt/_native.abi3.so" in modes  # the cffi part stays on the stable ABI
    tag = f"cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu"
    assert f"vaescrypt/_fastcall.{tag}.so" in modes  # per-version: static types, vectorcall
    # runtime data the package reads
    for data in (
        "sdematrix/sde_matrix.yaml",
        "sdematrix/spec/schema/sde_matrix.schema.json",
        "sdematrix/qemu_plugin/sdematrix_mix.c",
        "vaescrypt/_cdef.h",
    ):
        assert data in modes, data
    # sources that are shipped compiled stay out of the wheel
    assert not any(n.endswith(".c") and "qemu_plugin" not in n for n in modes), sorted(modes)
    assert "sdematrix-" + _version_constant() + ".dist-info/licenses/LICENSE" in modes


@pytest.mark.slow
def test_auditwheel_names_a_manylinux_tag(dists: Dists) -> None:
    """The locally built wheel (tagged linux_x86_64, which PyPI refuses) is
    consistent with a manylinux tag no newer than this host's glibc and pulls
    in no shared library outside the manylinux policy (only libc)."""
    exe = shutil.which("auditwheel")
    assert exe, "auditwheel not installed (it is in the [test] extra)"
    r = _run([exe, "show", str(dists.wheel)])
    assert r.returncode == 0, r.stdout + r.stderr
    text = " ".join(r.stdout.split())
    m = re.search(
        r'consistent with the following platform tag: "manylinux_(\d+)_(\d+)_x86_64"', text
    )
    assert m, r.stdout
    libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    host = tuple(int(x) for x in libc.split()[1].split(".")[:2])
    tag = (int(m.group(1)), int(m.group(2)))
    assert tag <= host, (tag, libc)
    print(f"auditwheel: {dists.wheel.name} -> manylinux_{tag[0]}_{tag[1]}_x86_64")
    assert "system-provided shared libraries: libc.so.6" in text, r.stdout
    assert "external shared libraries" not in text, r.stdout  # nothing to graft


# -------------------------------------------------------- project URLs --


def _project_urls_module() -> Any:
    """_project_urls.py, loaded by path as setup.py loads it (not a package module)."""
    return load_by_path("_sdematrix_project_urls", ROOT / "_project_urls.py")


@pytest.mark.parametrize(
    ("remote", "address"),
    [
        ("git@github.com:owner/name.git", "https://github.com/owner/name"),
        ("https://github.com/owner/name", "https://github.com/owner/name"),
        ("https://github.com/owner/name.git/", "https://github.com/owner/name"),
        ("https://x-access-token:secret@github.com/o/n.git", "https://github.com/o/n"),
        (
            "ssh://git@gitlab.example.org:2222/group/sub/n.git",
            "https://gitlab.example.org/group/sub/n",
        ),
        ("https://GitLab.example.org:8443/g/n", "https://gitlab.example.org:8443/g/n"),
        ("/srv/git/name.git", None),
        ("file:///srv/git/name.git", None),
        ("git://github.com/owner/name", None),
        ("http://github.com/owner/name", None),
        ("https://github.com/owner", None),
        ("https://github.com/owner/../name", None),
        ("", None),
    ],
)
def test_remote_normalised_to_a_web_address(remote: str, address: str | None) -> None:
    assert _project_urls_module().normalise_remote(remote) == address


def _git(cwd: Path, *argv: str) -> None:
    git = shutil.which("git")
    assert git, "git not installed (ci/bootstrap.sh installs the toolchain)"
    r = _run([git, "-C", str(cwd), *argv], timeout=60)
    assert r.returncode == 0, r.stderr


def test_project_urls_source_precedence(tmp_path: Path) -> None:
    """PKG-INFO (an unpacked sdist) over GitHub Actions' variables over the
    git remote; nothing known, no URLs; a tree without its own .git never
    borrows the remote of a repository it happens to sit in."""
    pu = _project_urls_module()
    tree = tmp_path / "tree"
    tree.mkdir()
    _git(tree, "init", "-q")
    _git(tree, "remote", "add", "origin", "git@gitlab.example.org:group/proj.git")
    urls, origin = pu.project_urls(tree, {})
    assert origin == "git remote origin"
    assert urls == {
        "Source": "https://gitlab.example.org/group/proj",
        "Issues": "https://gitlab.example.org/group/proj/issues",
        "Documentation": "https://gitlab.example.org/group/proj#readme",
    }
    urls, origin = pu.project_urls(tree, TEST_REPO_ENV)
    assert origin == "GITHUB_SERVER_URL/GITHUB_REPOSITORY" and urls["Source"] == TEST_REPO
    (tree / "CHANGELOG.md").write_text("# Changes\n")
    urls, _ = pu.project_urls(tree, TEST_REPO_ENV)
    assert urls["Changelog"] == f"{TEST_REPO}/blob/HEAD/CHANGELOG.md"

    # an sdist's own metadata wins over whatever the building machine knows
    (tree / "PKG-INFO").write_text(
        "Metadata-Version: 2.4\nName: sdematrix\nVersion: 1\n"
        "Project-URL: Source, https://example.invalid/o/n\n\nbody, with a comma\n"
    )
    assert pu.project_urls(tree, TEST_REPO_ENV)[0] == {"Source": "https://example.invalid/o/n"}
    (tree / "PKG-INFO").write_text("Metadata-Version: 2.4\nName: sdematrix\nVersion: 1\n")
    assert pu.project_urls(tree, TEST_REPO_ENV)[0] == {}

    inner = tree / "unpacked"  # inside the repository, without a .git of its own
    inner.mkdir()
    urls, origin = pu.project_urls(inner, {})
    assert urls == {} and "no repository address" in origin
    _git(tree, "remote", "set-url", "origin", str(tmp_path / "local.git"))
    (tree / "PKG-INFO").unlink()
    assert pu.project_urls(tree, {})[0] == {}  # a local path is no web address


def _sdist_pkg_info(sdist: Path) -> email.message.Message:
    with tarfile.open(sdist) as tf:
        f = tf.extractfile(f"sdematrix-{_version_constant()}/PKG-INFO")
        assert f is not None
        return email.message_from_bytes(f.read())


@pytest.mark.slow
def test_sdist_and_wheel_carry_the_builders_project_urls(dists: Dists) -> None:
    assert _sdist_pkg_info(dists.sdist).get_all("Project-URL") == TEST_PROJECT_URLS
    meta, _ = _wheel_metadata(dists.wheel)
    assert meta.get_all("Project-URL") == TEST_PROJECT_URLS


@pytest.mark.slow
def test_no_repository_address_no_urls(tmp_path: Path) -> None:
    """No GitHub variables and no git checkout: no Project-URL in the sdist
    nor in the wheel metadata from it, one note on stderr, twine still passes.
    The sdist only (no compile), with the interpreter's setuptools and cffi
    (ci/bootstrap.sh installs them), so this costs seconds."""
    src = tmp_path / "tree"
    shutil.copytree(ROOT, src, ignore=_copy_ignore, symlinks=True)
    out = tmp_path / "dist"
    env = _clean_env()
    r = _run(
        [
            sys.executable,
            "-m",
            "build",
            "--no-isolation",
            "--sdist",
            "--outdir",
            str(out),
            str(src),
        ],
        env=env,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "note: no project URLs in the metadata: no repository address" in r.stdout + r.stderr
    (sdist,) = out.glob("*.tar.gz")
    meta = _sdist_pkg_info(sdist)
    assert meta.get_all("Project-URL") is None and meta["Name"] == "sdematrix"
    r = _run([sys.executable, "-m", "twine", "check", "--strict", str(sdist)])
    assert r.returncode == 0 and "PASSED" in r.stdout, r.stdout + r.stderr
    unpacked = tmp_path / "unpacked"
    with tarfile.open(sdist) as tf:
        tf.extractall(unpacked, filter="data")
    probe = (
        "import sys; from build.util import project_wheel_metadata as m; "
        "print(m(sys.argv[1], isolated=False).get_all('Project-URL'))"
    )
    r = _run(
        [sys.executable, "-c", probe, str(unpacked / f"sdematrix-{_version_constant()}")], env=env
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.strip().splitlines()[-1] == "None", r.stdout


# ------------------------------------------------------- the round trip --


@pytest.fixture(scope="module")
def sdist_venv(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A fresh venv (no system site-packages) with the sdist pip-installed from
    a copy outside the tree; dependencies come from the package index."""
    tmp = tmp_path_factory.mktemp("roundtrip")
    sdist = Path(shutil.copy2(dists.sdist, tmp / dists.sdist.name))
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True, system_site_packages=False).create(env_dir)
    py = env_dir / "bin" / "python"
    r = _run([str(py), "-m", "pip", "install", "-q", str(sdist)], env=_clean_env(), cwd=tmp)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    yield env_dir


def _in_venv(env_dir: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = _clean_env()
    env["PATH"] = str(env_dir / "bin") + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(env_dir)
    return _run(list(argv), env=env, cwd=cwd, timeout=600)


_ROUND_TRIP = """
import importlib.metadata, os, sys
import sdematrix, vaescrypt
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from sdematrix.backends.ptrace.tracer_bin import tracer_path
from sdematrix.backends.probe import probe_path
venv = os.path.realpath(sys.argv[1]) + os.sep
for where in (sdematrix.__file__, vaescrypt.__file__, probe_path(), tracer_path()):
    assert os.path.realpath(where).startswith(venv), where
key, nonce, aad = bytes(range(32)), bytes(range(12)), b"header"
msg = bytes((i * 7 + 3) & 0xFF for i in range(1000))
ours = vaescrypt.AESGCM(key).encrypt(nonce, msg, aad)
assert ours == AESGCM(key).encrypt(nonce, msg, aad)
assert vaescrypt.AESGCM(key).decrypt(nonce, ours, aad) == msg
print(importlib.metadata.version("sdematrix"), sdematrix.__version__)
"""


@pytest.mark.slow
def test_sdist_round_trip(sdist_venv: Path, dists: Dists, tmp_path: Path) -> None:
    version = _version_constant()
    work = tmp_path / "work"  # an empty cwd: no ./sde_matrix.yaml, no tree
    work.mkdir()
    r = _in_venv(
        sdist_venv, str(sdist_venv / "bin" / "python"), "-c", _ROUND_TRIP, str(sdist_venv), cwd=work
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.split() == [version, version]

    sdm = str(sdist_venv / "bin" / "sdematrix")
    r = _in_venv(sdist_venv, sdm, "--version", cwd=work)
    assert r.returncode == 0 and r.stdout.strip() == f"sdematrix {version}", r.stdout + r.stderr
    r = _in_venv(sdist_venv, sdm, "list-cpus", cwd=work)
    assert r.returncode == 0, r.stderr
    listed = r.stdout.split()
    for cpu in ("hsw", "spr", "gnr256"):
        assert cpu in listed, r.stdout
    r = _in_venv(sdist_venv, sdm, "explain", "spr", cwd=work)
    assert r.returncode == 0, r.stderr
    assert "avx512" in r.stdout and "aesni" in r.stdout, r.stdout

    # a real ptrace run with the installed vc-probe and vc-tracer
    why = ptrace_skip_reason(SHIPPED_MATRIX, ["hsw"])
    if why:
        pytest.skip(why)
    installed = sdist_venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    packaged = installed / "site-packages" / "sdematrix" / "sde_matrix.yaml"
    run = TinyRun(work / "out", work / "junit.xml", work / "report")
    r = _in_venv(
        sdist_venv,
        sdm,
        "run",
        "--matrix",
        str(tiny_matrix(work / "tiny.yaml", packaged)),
        "--cpu",
        "hsw",
        "--backend",
        "ptrace",
        "--jobs",
        "1",
        "--out",
        str(run.out),
        "--junit",
        str(run.junit),
        "--report",
        str(run.report),
        cwd=work,
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((run.out / "results.json").read_text())
    assert {c["status"] for c in doc["cells"]} == {"pass"} and len(doc["cells"]) == 8
    assert {c["backend"] for c in doc["cells"]} == {"ptrace"}
    assert_reports_carry(run, version)
    meta, _ = _wheel_metadata(dists.wheel)
    assert meta["Version"] == version


@pytest.mark.slow
def test_wheel_from_sdist_keeps_the_sdists_project_urls(sdist_venv: Path, tmp_path: Path) -> None:
    """pip built the venv's wheel from the sdist without GITHUB_SERVER_URL,
    GITHUB_REPOSITORY or a git checkout (_clean_env, a copy of the sdist): the
    URLs it carries can only have come from the sdist's PKG-INFO."""
    probe = "import importlib.metadata as m; print(m.metadata('sdematrix').get_all('Project-URL'))"
    r = _in_venv(sdist_venv, str(sdist_venv / "bin" / "python"), "-c", probe, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert ast.literal_eval(r.stdout.strip()) == TEST_PROJECT_URLS
