"""Misuse that must stay safe (issue 27 items 1, 3, 4).

* Type confusion: every public method on an object of every other class is a
  TypeError, and every C entry point given another kind of object answers
  VC_ERR_OBJECT (tests/hardening/misuse_sweep.py), also under valgrind, where
  a read outside the object would be an error.
* GCM data over the SP 800-38D limit (2^36 - 32 bytes) is the length
  ValueError, decided before any output is allocated: the huge input is a
  memoryview of a sparse file mapped read-only, and the call runs under an
  address-space limit that leaves no room for its output.
* fork() while another thread is inside a stream call: the child's copy of
  that stream says so (StreamStateError, not a ConcurrentUseError that would
  never end), every other stream and every new one works in the child.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from vaescrypt._native import ffi, lib

import vaescrypt
from hardening import misuse_sweep

ROOT = Path(__file__).resolve().parents[2]
VALGRIND = shutil.which("valgrind")
# Addressability errors only (reads/writes outside a heap block, bad frees):
# CPython's own small-int code gives "uninitialised value" reports under
# memcheck that have nothing to do with vaescrypt.
VG_ARGS = ["-q", "--undef-value-errors=no", "--error-exitcode=99"]
KEY = bytes(range(16))
NONCE = bytes(range(12))
IV = bytes(range(16))


# ------------------------------------------------------- type confusion --


def test_every_method_on_a_foreign_object_is_a_type_error() -> None:
    made, bad = misuse_sweep.sweep_python()
    assert not bad, "\n".join(bad)
    assert made >= 250, made  # 28 methods x ~9 foreign objects each


def test_every_c_entry_point_refuses_another_kind_of_object() -> None:
    made, bad = misuse_sweep.sweep_c()
    assert not bad, "\n".join(bad)
    assert made >= 52, made  # 13 entry points + 4 frees, 3 foreign kinds each, + the check


@pytest.mark.parametrize(
    "call",
    [
        lambda c, g: vaescrypt.GcmEncryptor(c, NONCE, None),
        lambda c, g: vaescrypt.AESGCM.encrypt(c, NONCE, b"data", None),
        lambda c, g: vaescrypt.AESCFB.encrypt(g, IV, b"data"),
    ],
    ids=["GcmEncryptor(cfb)", "AESGCM.encrypt(cfb)", "AESCFB.encrypt(gcm)"],
)
def test_the_reported_calls_name_the_classes(call) -> None:
    c, g = vaescrypt.AESCFB(KEY, segment_size=8), vaescrypt.AESGCM(KEY)
    with pytest.raises(TypeError, match=r"expected AES(GCM|CFB), got AES(CFB|GCM)"):
        call(c, g)


def test_a_freed_or_foreign_object_reads_as_no_kind() -> None:
    assert ffi.string(lib.vc_status_message(lib.VC_ERR_OBJECT)).startswith(b"object of the wrong")
    c = vaescrypt.AESCFB(KEY)
    st = lib.vc_gcm_key_path(ffi.cast("vc_gcm_key *", c._ref.addr), 0)
    assert st == lib.VC_ERR_OBJECT
    assert lib.vc_cfb_key_path(c._key, 0) >= 0


def _valgrind(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    if VALGRIND is None:
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    env = dict(
        os.environ,
        PYTHONMALLOC="malloc",  # every Python block visible to memcheck
        PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT / "tests")]),
    )
    # sys.executable itself, not a wrapper script: valgrind does not follow
    # an exec by default, and would check the wrapper's shell instead.
    return subprocess.run(
        [VALGRIND, *VG_ARGS, os.path.realpath(sys.executable), script],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
        cwd=tmp_path,
    )


@pytest.mark.slow
def test_the_sweep_is_clean_under_valgrind(tmp_path: Path) -> None:
    proc = _valgrind(str(ROOT / "tests" / "hardening" / "misuse_sweep.py"), tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert "Invalid read" not in proc.stderr and "Invalid write" not in proc.stderr
    assert " 0 failures" in proc.stdout, proc.stdout


@pytest.mark.slow
def test_valgrind_sees_a_read_outside_any_object(tmp_path: Path) -> None:
    """Positive control: the same setup reports a read of a freed key's tag
    (exactly what the type confusion did before the tags: a read past the
    CFB key into a freed neighbour)."""
    script = tmp_path / "freed_key.py"
    script.write_text(
        "import vaescrypt\n"
        "from vaescrypt._native import ffi, lib\n"
        "c = vaescrypt.AESCFB(bytes(16))\n"
        "addr = c._ref.addr\n"
        "del c\n"
        "print(lib.vc_cfb_key_path(ffi.cast('vc_cfb_key *', addr), 0))\n"
    )
    proc = _valgrind(str(script), tmp_path)
    assert proc.returncode == 99, proc.stderr[-3000:]
    assert "Invalid read of size 4" in proc.stderr and "free'd" in proc.stderr


# ----------------------------------------------------- length over limit --

_OVER_LIMIT = r"""
import mmap, resource, sys
import vaescrypt
from vaescrypt.gcm import MAX_DATA

path, case = sys.argv[1], sys.argv[2]
extra = 16 if case == "decrypt" else 0
with open(path, "w+b") as f:
    f.truncate(MAX_DATA + 1 + extra)        # sparse: no disk, no memory
    mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
view = memoryview(mm)
# From here on, at most 256 MiB more address space: an output buffer for
# 64 GiB (the bug: allocated before the length check) cannot be made, and
# would be a MemoryError instead of the ValueError.
vm = next(int(l.split()[1]) * 1024 for l in open("/proc/self/status") if l.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), resource.RLIM_INFINITY))
g = vaescrypt.AESGCM(bytes(16))
nonce = bytes(12)
calls = {
    "encrypt": lambda: g.encrypt(nonce, view, None),
    "encrypt_kw": lambda: g.encrypt(nonce, data=view, associated_data=None),
    "decrypt": lambda: g.decrypt(nonce, view, None),
    "stream": lambda: g.encryptor(nonce).update(view),
}
try:
    calls[case]()
except ValueError as e:
    print("ValueError:", e)
except MemoryError as e:
    print("MemoryError:", e)
"""


@pytest.mark.parametrize("case", ["encrypt", "encrypt_kw", "decrypt", "stream"])
def test_gcm_data_over_the_limit_is_a_value_error_without_allocating(
    case: str, tmp_path: Path
) -> None:
    script = tmp_path / "over.py"
    script.write_text(_OVER_LIMIT)
    proc = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "sparse"), case],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout.strip()
    assert out.startswith("ValueError:"), out
    assert "longer than SP 800-38D allows" in out and str(vaescrypt.gcm.MAX_DATA) in out, out


def test_the_limit_itself() -> None:
    assert vaescrypt.gcm.MAX_DATA == (1 << 36) - 32


# -------------------------------------------------------------- fork() --

BIG = 64 << 20  # long enough (~10-100 ms) to fork while a thread is inside


def _hold_busy(stream: object, stop: threading.Event) -> threading.Thread:
    """A thread that keeps calling stream.update(BIG bytes) until stop."""
    data = bytes(BIG)

    def run() -> None:
        while not stop.is_set():
            try:
                stream.update(data)  # type: ignore[attr-defined]
            except vaescrypt.ConcurrentUseError:
                pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def _child_report(busy: object, idle: object, idle_done: bytes, mode: str) -> dict[str, object]:
    """Runs in the child: what each stream does now."""
    rep: dict[str, object] = {}
    try:
        busy.update(b"x")  # type: ignore[attr-defined]
        rep["busy"] = "worked"
    except vaescrypt.ConcurrentUseError as e:
        rep["busy"] = f"ConcurrentUseError: {e}"
    except vaescrypt.StreamStateError as e:
        rep["busy"] = f"StreamStateError: {e}"
    # the idle stream continues where it was and gives the one-shot result
    if mode == "gcm":
        g = vaescrypt.AESGCM(KEY)
        rest = b"continued in the child"
        ct = idle_done + idle.update(rest)  # type: ignore[attr-defined]
        idle.finalize()  # type: ignore[attr-defined]
        whole = g.encrypt(NONCE, b"A" * 37 + rest, None)
        rep["idle_ok"] = ct + idle.tag == whole  # type: ignore[attr-defined]
        enc = g.encryptor(NONCE)
        new = enc.update(b"new") + enc.finalize() + enc.tag
        rep["new_ok"] = new == g.encrypt(NONCE, b"new", None)
    else:
        c = vaescrypt.AESCFB(KEY)
        rest = b"continued in the child"
        ct = idle_done + idle.update(rest)  # type: ignore[attr-defined]
        rep["idle_ok"] = ct == c.encrypt(IV, b"A" * 37 + rest)
        rep["new_ok"] = c.encryptor(IV).update(b"new") == c.encrypt(IV, b"new")
    return rep


@pytest.mark.parametrize("mode", ["gcm", "cfb"])
def test_a_child_after_fork_mid_call(mode: str) -> None:
    if mode == "gcm":
        g = vaescrypt.AESGCM(KEY)
        busy, idle = g.encryptor(NONCE), g.encryptor(NONCE)
    else:
        c = vaescrypt.AESCFB(KEY)
        busy, idle = c.encryptor(IV), c.encryptor(IV)
    idle_done = idle.update(b"A" * 37)  # mid-block: a partial block is pending
    stop = threading.Event()
    worker = _hold_busy(busy, stop)
    try:
        for _attempt in range(50):
            # Wait until the worker is inside a call (our probe is refused),
            # then fork at once.  The worker may leave the call in between:
            # the child then says the stream was idle and we try again.
            while True:
                try:
                    busy.update(b"")
                except vaescrypt.ConcurrentUseError:
                    break
            r, w = os.pipe()
            pid = os.fork()
            if pid == 0:  # the child: one thread, a copy of this one
                code = 0
                try:
                    os.close(r)
                    os.write(w, json.dumps(_child_report(busy, idle, idle_done, mode)).encode())
                except BaseException:  # noqa: BLE001 - the child must always exit
                    code = 1
                finally:
                    os._exit(code)
            os.close(w)
            with os.fdopen(r, "rb") as f:
                raw = f.read()
            _, status = os.waitpid(pid, 0)
            assert os.waitstatus_to_exitcode(status) == 0, raw
            rep = json.loads(raw)
            if rep["busy"] != "worked":
                break
        else:
            pytest.fail("could not fork while the worker thread was inside a call in 50 tries")
    finally:
        stop.set()
        worker.join(timeout=60)
    assert rep["busy"].startswith("StreamStateError:"), rep
    assert "forked" in rep["busy"] and "ConcurrentUseError" not in rep["busy"], rep
    assert rep["idle_ok"] is True and rep["new_ok"] is True, rep
    # and in the parent the same stream is simply in use, then free again
    busy.update(b"")
