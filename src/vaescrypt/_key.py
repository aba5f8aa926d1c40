"""What the cipher classes share about keys: binding a mode's functions into
_fastcall, and making a key (argument checks, then a _fastcall.KeyRef)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from vaescrypt import _fastcall
from vaescrypt._buffers import as_view
from vaescrypt._errors import check_mask, raise_for_status
from vaescrypt._names import impl_id
from vaescrypt._native import ffi, lib

_UINTPTR = ffi.typeof("uintptr_t")
_PATH_AUTO = int(lib.VC_PATH_AUTO)
_key_new = _fastcall.key_new
KEY_LENGTHS = (16, 24, 32)


def function_address(name: str) -> int:
    """The address of a library function inside vaescrypt._native: _fastcall
    calls the very same library (one copy, one dispatcher state)."""
    return int(ffi.cast(_UINTPTR, ffi.addressof(lib, name)))


def bind(mode: str) -> None:
    """Hand _fastcall the addresses of vc_<mode>_encrypt/decrypt/key_new/key_free."""
    _fastcall.bind(
        mode,
        *(
            function_address(f"vc_{mode}_{fn}")
            for fn in ("encrypt", "decrypt", "key_new", "key_free")
        ),
    )


def check_key(cls_name: str, key: object) -> memoryview:
    view = as_view("key", key)
    if len(view) not in KEY_LENGTHS:
        raise ValueError(
            f"{cls_name} key must be 16, 24 or 32 bytes (128, 192 or 256 bits), got {len(view)}"
        )
    return view


def make_key(
    kind: int,
    cls_name: str,
    key: object,
    impl: str | None,
    param_name: str,
    param: Any,
    allowed: tuple[int, ...],
    check_param: Callable[[Any], None],
) -> Any:
    """A _fastcall.KeyRef for AESGCM / AESCFB.  param is the class's integer
    parameter (tag length, segment size): `allowed` its values, check_param
    its error wording.  The common call (bytes key, impl None, a valid
    param) has nothing left to check in Python: a bad VAESCRYPT_CPU_MASK
    comes back from C as VC_ERR_CPU_MASK -> CpuMaskError."""
    if (
        type(key) is bytes
        and impl is None
        and type(param) is int
        and param in allowed
        and len(key) in KEY_LENGTHS
    ):
        ref = _key_new(kind, key, _PATH_AUTO, param)
    else:
        kview = check_key(cls_name, key)
        check_param(param)
        impl_code = impl_id(impl)
        check_mask()
        ref = _key_new(kind, kview, impl_code, param)
    if type(ref) is int:
        raise_for_status(ref, f"{cls_name}({param_name}={param}, impl={impl!r})")
    return ref


_KeyRef = _fastcall.KeyRef
_CLASS_NAME = {_fastcall.KEY_GCM: "AESGCM", _fastcall.KEY_CFB: "AESCFB"}
#: kind -> the class whose objects hold such keys (gcm.py / cfb.py register)
KEY_CLASSES: dict[int, type] = {}


def key_ref(owner: object, kind: int, what: str) -> Any:
    """owner's KeyRef, checked to hold a key of this kind: the one place where
    a Python object becomes the native key a C call reads.  Anything else --
    an AESCFB given to a GCM method, a stream, None -- is a TypeError here,
    before any address reaches C (which also checks: VC_ERR_OBJECT).  An
    object of the right class without a key (__init__ never ran) is an
    AttributeError, as the missing attribute always was."""
    try:
        ref = owner._ref  # type: ignore[attr-defined]
    except AttributeError:
        ref = None
    if type(ref) is _KeyRef and ref.kind == kind:
        return ref
    cls = KEY_CLASSES.get(kind)
    if ref is None and cls is not None and isinstance(owner, cls):
        raise AttributeError(f"{what}: this {cls.__name__} has no key (__init__ did not run)")
    wrong_self(owner, _CLASS_NAME[kind], what)


def wrong_self(obj: object, cls_name: str, what: str) -> NoReturn:
    """The TypeError for a method called on an object of another class
    (AESCFB.encrypt(an_aesgcm, ...), GcmEncryptor.finalize(a_decryptor))."""
    raise TypeError(f"{what}: expected {cls_name}, got {type(obj).__name__}")
