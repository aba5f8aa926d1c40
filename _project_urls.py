"""The distribution's project URLs (metadata ``Project-URL``), taken from the
repository that builds it, never written into the tree.

Where the address comes from, first match wins:

1. an unpacked sdist's ``PKG-INFO``: a wheel built from an sdist carries
   exactly the sdist's URLs (possibly none), whatever machine builds it (the
   cibuildwheel containers see neither the runner's environment nor a git
   checkout);
2. GitHub Actions: ``$GITHUB_SERVER_URL/$GITHUB_REPOSITORY``, set on every
   runner (https://github.com/owner/name, or an Enterprise server's);
3. a git checkout (``.git`` at the top of the tree, so an sdist unpacked inside
   someone else's repository never borrows its remote): ``git remote get-url
   origin`` when it is an https, ssh or scp-style (``git@host:owner/name.git``)
   address, normalised to ``https://host/owner/name`` without credentials.

Otherwise there are no URLs; setup.py says so in one line on stderr.
setup.py loads this file by path (it is not a package module and is not
installed); the tests load it the same way.
"""

from __future__ import annotations

import email.parser
import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

# Changelog file names recognised at the top of the tree, in order.
CHANGELOG_NAMES = ("CHANGELOG.md", "CHANGES.md", "NEWS.md", "CHANGELOG.rst", "CHANGES.rst")

# a host name, an optional port, an owner/name path (GitLab: group/sub/.../name)
_HOSTNAME = r"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?"
_PORT = r"(?::\d+)?"
_PATH = r"[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)+"
# https://[user[:token]@]host/owner/name[.git][/]  (credentials dropped)
_HTTPS = re.compile(rf"https://(?:[^@/\s]+@)?(?P<host>{_HOSTNAME}{_PORT})/(?P<path>{_PATH})/?")
# ssh://[user@]host[:port]/owner/name[.git]  (an ssh port is not the web port)
_SSH = re.compile(rf"ssh://(?:[^@/\s]+@)?(?P<host>{_HOSTNAME}){_PORT}/(?P<path>{_PATH})/?")
# scp-like: user@host:owner/name[.git]
_SCP = re.compile(rf"[A-Za-z0-9_.-]+@(?P<host>{_HOSTNAME}):(?P<path>{_PATH})/?")


def normalise_remote(url: str) -> str | None:
    """``https://host/owner/name`` for a web-style git remote, else None
    (local paths, file://, git://, anything unrecognised)."""
    url = url.strip()
    for pattern in (_HTTPS, _SSH, _SCP):
        m = pattern.fullmatch(url)
        if m:
            host = m["host"]
            path = m["path"].removesuffix(".git")
            if any(part in ("", ".", "..") for part in path.split("/")):
                return None
            return f"https://{host.lower()}/{path}"
    return None


def from_github_actions(environ: Mapping[str, str]) -> str | None:
    server = environ.get("GITHUB_SERVER_URL", "").strip().rstrip("/")
    repo = environ.get("GITHUB_REPOSITORY", "").strip().strip("/")
    if not server or not repo:
        return None
    return normalise_remote(f"{server}/{repo}")


def from_git(root: Path) -> str | None:
    if not (root / ".git").exists():
        return None
    try:
        r = subprocess.run(
            ["git", "-C", str(root), "remote", "get-url", "origin"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    return normalise_remote(r.stdout) if r.returncode == 0 else None


def urls_for(repo: str, root: Path) -> dict[str, str]:
    """The labelled URLs for repository address `repo` (``https://host/o/n``)."""
    urls = {
        "Source": repo,
        "Issues": f"{repo}/issues",
        "Documentation": f"{repo}#readme",
    }
    for name in CHANGELOG_NAMES:
        if (root / name).is_file():
            urls["Changelog"] = f"{repo}/blob/HEAD/{name}"
            break
    return urls


def from_pkg_info(pkg_info: Path) -> dict[str, str]:
    """The Project-URL fields of a core-metadata file ("Label, URL" each)."""
    meta = email.parser.Parser().parsestr(pkg_info.read_text(encoding="utf-8"), headersonly=True)
    urls = {}
    for field in meta.get_all("Project-URL") or []:
        label, sep, url = str(field).partition(",")
        if sep and label.strip() and url.strip():
            urls[label.strip()] = url.strip()
    return urls


def project_urls(
    root: Path, environ: Mapping[str, str] | None = None
) -> tuple[dict[str, str], str]:
    """(the URLs, where they came from) for the tree at `root`; no URLs when
    no repository address is known (the second item then says why)."""
    env = os.environ if environ is None else environ
    pkg_info = root / "PKG-INFO"
    if pkg_info.is_file():
        urls = from_pkg_info(pkg_info)
        return urls, "the sdist's PKG-INFO" if urls else "the sdist's PKG-INFO has no Project-URL"
    repo = from_github_actions(env)
    if repo:
        return urls_for(repo, root), "GITHUB_SERVER_URL/GITHUB_REPOSITORY"
    repo = from_git(root)
    if repo:
        return urls_for(repo, root), "git remote origin"
    return {}, (
        "no repository address (GITHUB_SERVER_URL/GITHUB_REPOSITORY unset, "
        "no https/ssh git remote 'origin')"
    )
