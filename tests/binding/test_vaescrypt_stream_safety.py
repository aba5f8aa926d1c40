"""Streams and keys under real use (issue 13): two threads on one stream, a
stream whose owner is re-keyed, partially overlapping input and output, the
secret state a finished GCM stream leaves behind, and stream indices that a
missed race or a corrupted struct could push out of range.

Every reference comes from `cryptography`.  The threaded tests use all-zero
plaintext: then the ciphertext of a GCM (CTR) or CFB128 *encryption* is the
same byte string however the calls were interleaved, so the tag (GCM) or the
bytes after the threads (CFB) prove the stream's state stayed consistent.
Also run under ASan/UBSan (tests/hardening/test_hardening_sanitizers.py).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator

import _vc_ref as ref
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM as RefGCM
from vaescrypt._native import ffi, lib

import vaescrypt
from vaescrypt import AESCFB, AESGCM, ConcurrentUseError, InvalidTag, StreamStateError

# Every stream starts with its 4-byte kind tag (native/front.h, vc_kind_is),
# padded to the 16-byte alignment of what follows: the context starts here.
CTX = 16
KEY1 = bytes(range(1, 33))
KEY2 = bytes(range(101, 133))
NONCE = bytes(range(12))
IV = bytes(range(50, 66))


def _gcm_tag_of_zeros(key: bytes, n: int) -> tuple[bytes, bytes]:
    """(ciphertext, tag) of n zero bytes: the ciphertext is the keystream."""
    out = RefGCM(key).encrypt(NONCE, bytes(n), None)
    return out[:-16], out[-16:]


def _cfb_of_zeros(key: bytes, n: int) -> bytes:
    return ref.cfb128(key, IV, bytes(n), True)


# ------------------------------------------------- one stream, two threads --


class _Worker(threading.Thread):
    """Runs fn once; keeps its result or exception for the main thread."""

    def __init__(self, fn: Callable[[], object]) -> None:
        super().__init__(daemon=True)
        self.fn = fn
        self.result: object = None
        self.error: BaseException | None = None
        self.started_event = threading.Event()

    def run(self) -> None:
        self.started_event.set()
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            self.error = e


def _race_one_big_call(
    update: Callable[[bytes], bytes], big: int
) -> tuple[bytes, list[bytes], int]:
    """A worker makes one long update (big zero bytes, seconds of C at worst
    with the GIL released); meanwhile this thread makes 1-byte updates until
    the worker is done.  (worker's output, this thread's outputs, refusals).

    Either side may be the one refused: if this thread's 1-byte call holds the
    stream when the worker's call arrives, the worker is refused.  A refused
    call changed nothing (the contract), so the worker counts it and retries;
    any other error of its call fails the test."""
    data = bytes(big)  # allocated before the race, not inside it
    worker_refused = 0

    def big_call() -> bytes:
        nonlocal worker_refused
        # A stream that stays busy (a flag never cleared) would refuse the
        # worker for ever: a failure after 10 s, not a hang.
        give_up = time.monotonic() + 10.0
        while True:
            try:
                return update(data)
            except ConcurrentUseError:
                worker_refused += 1
                if time.monotonic() > give_up:
                    raise AssertionError(
                        f"refused {worker_refused} times in 10 s: the stream stayed busy"
                    ) from None

    w = _Worker(big_call)
    mine: list[bytes] = []
    refused = 0
    w.start()
    w.started_event.wait()
    while w.is_alive():
        try:
            mine.append(update(b"\0"))
        except ConcurrentUseError:
            refused += 1
    w.join()
    assert w.error is None, f"the worker's own call failed: {w.error!r}"
    assert isinstance(w.result, bytes)
    return w.result, mine, refused + worker_refused


BIG = 16 << 20


# A race needs the second thread to be scheduled while the first is inside
# the C call.  Under pytest -n 2 on a 2-CPU machine both CPUs may be busy
# with the other test process, and the two threads of this one then share
# one CPU: an attempt (a 16 MiB call, a few ms) can pass with no overlap,
# and the last CI run saw 25 such attempts in a row.  So attempts go on
# until one sees a refusal or RACE_SECONDS pass; every attempt must leave
# the stream consistent, and at least one must see a refusal.
RACE_SECONDS = 30.0


def _attempts() -> Iterator[int]:
    """0, 1, 2 ... until RACE_SECONDS have passed (at least one attempt)."""
    deadline = time.monotonic() + RACE_SECONDS
    i = 0
    while i == 0 or time.monotonic() < deadline:
        yield i
        i += 1


def test_gcm_stream_refuses_a_second_thread_and_stays_consistent() -> None:
    refused = tries = 0
    for tries in _attempts():
        enc = AESGCM(KEY1).encryptor(NONCE)
        big_out, mine, refused = _race_one_big_call(enc.update, BIG)
        enc.finalize()
        total = BIG + len(mine)
        ks, tag = _gcm_tag_of_zeros(KEY1, total)
        assert enc.tag == tag, "stream state corrupted by the concurrent calls"
        at = ks.find(big_out[:64])
        assert at >= 0 and ks[at : at + BIG] == big_out
        assert all(len(b) == 1 and b in ks for b in mine)
        if refused:
            break
    assert refused > 0, (
        f"in {tries + 1} attempts ({RACE_SECONDS:.0f} s), no 1-byte update overlapped "
        "another thread's 16 MiB update of the same stream, or concurrent use was not refused"
    )


@pytest.mark.parametrize("segment_size", [128, 8])
def test_cfb_stream_refuses_a_second_thread_and_stays_consistent(segment_size: int) -> None:
    big = BIG if segment_size == 128 else 1 << 20  # CFB8 is one AES per byte
    refn = ref.cfb128 if segment_size == 128 else ref.cfb8
    refused = tries = 0
    for tries in _attempts():
        enc = AESCFB(KEY1, segment_size=segment_size).encryptor(IV)
        big_out, mine, refused = _race_one_big_call(enc.update, big)
        total = big + len(mine)
        # CFB encryption of zeros: the ciphertext does not depend on how the
        # calls were cut or interleaved, so the next bytes prove the state.
        expect = refn(KEY1, IV, bytes(total + 40), True)
        assert enc.update(bytes(40)) == expect[total:], "CFB stream state corrupted"
        at = expect.find(big_out[:64])
        assert at >= 0 and expect[at : at + big] == big_out
        if refused:
            break
    assert refused > 0, (
        f"in {tries + 1} attempts ({RACE_SECONDS:.0f} s), concurrent use of one CFB stream "
        "was not refused"
    )


def _stress(stream: object, calls: int) -> tuple[list[bytes], int]:
    """Two threads, each update_into with alternating 1- and 15-byte slices
    of zeros (the issue's reproducer).  (every output chunk, refusals)."""
    outs: list[bytes] = []
    refused = [0]
    lock = threading.Lock()
    zeros = bytes(15)
    update_into = stream.update_into  # type: ignore[attr-defined]

    def run() -> None:
        # Views made once: the loop should spend its time in the C call,
        # where the two threads can meet (cffi releases the GIL there).
        buf = bytearray(16)
        dst = (memoryview(buf)[:1], memoryview(buf)[1:16])
        src = (memoryview(zeros)[:1], memoryview(zeros)[:15])
        mine: list[bytes] = []
        n_ref = 0
        for i in range(calls):
            j = i & 1
            try:
                update_into(src[j], dst[j])
            except ConcurrentUseError:
                n_ref += 1
                continue
            mine.append(bytes(dst[j]))
        with lock:
            outs.extend(mine)
            refused[0] += n_ref

    ts = [_Worker(run) for _ in range(2)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
        assert t.error is None, f"a thread failed: {t.error!r}"
    return outs, refused[0]


# Fresh streams, ROUND_CALLS calls per thread each, for about STRESS_SECONDS
# (a round is checked when it ends).  Before the busy flag this crashed or
# corrupted the stream within a few rounds on the development host.
ROUND_CALLS = 5000
STRESS_SECONDS = 2.0


def test_gcm_threaded_stress_never_corrupts() -> None:
    deadline = time.monotonic() + STRESS_SECONDS
    rounds = refused_all = 0
    while rounds == 0 or time.monotonic() < deadline:
        enc = AESGCM(KEY1).encryptor(NONCE)
        outs, refused = _stress(enc, ROUND_CALLS)
        enc.finalize()
        assert len(outs) + refused == 2 * ROUND_CALLS
        total = sum(map(len, outs))
        ks, tag = _gcm_tag_of_zeros(KEY1, total)
        assert enc.tag == tag, f"round {rounds}: stream state corrupted ({refused} refused)"
        assert all(o in ks for o in outs if len(o) == 15)
        rounds += 1
        refused_all += refused
    print(f"{rounds} rounds, {refused_all} concurrent calls refused")


def test_cfb_threaded_stress_never_corrupts() -> None:
    deadline = time.monotonic() + STRESS_SECONDS
    rounds = 0
    while rounds == 0 or time.monotonic() < deadline:
        enc = AESCFB(KEY1).encryptor(IV)
        outs, refused = _stress(enc, ROUND_CALLS)
        assert len(outs) + refused == 2 * ROUND_CALLS
        total = sum(map(len, outs))
        expect = _cfb_of_zeros(KEY1, total + 40)
        assert enc.update(bytes(40)) == expect[total:], f"round {rounds}: CFB state corrupted"
        assert all(o in expect for o in outs if len(o) == 15)
        rounds += 1


def test_concurrent_use_error_is_a_stream_state_error() -> None:
    assert issubclass(ConcurrentUseError, StreamStateError)
    assert issubclass(ConcurrentUseError, RuntimeError)
    assert vaescrypt.ConcurrentUseError is ConcurrentUseError
    # A call really out of order is still StreamStateError, not "another thread".
    enc = AESGCM(KEY1).encryptor(NONCE)
    enc.update(b"x")
    with pytest.raises(StreamStateError) as ei:
        enc.update_aad(b"late")
    assert not isinstance(ei.value, ConcurrentUseError)
    cfb1 = AESCFB(KEY1, segment_size=1).encryptor(IV)
    cfb1.update(b"\x80", bits=3)
    with pytest.raises(StreamStateError) as ei:
        cfb1.update(b"\x00")
    assert not isinstance(ei.value, ConcurrentUseError)


def test_c_stream_call_while_busy_is_vc_err_state_and_changes_nothing() -> None:
    """C level: the busy flag is the first word after the context; a call
    that finds it set returns VC_ERR_STATE and leaves the stream untouched.
    The flag is set here by hand (as another thread inside would: the value
    2g+1 for fork generation g = 0, a process that never forked)."""
    g = AESGCM(KEY1)
    sp = ffi.new("vc_gcm_stream **")
    assert lib.vc_gcm_stream_new(sp, g._key, 0, NONCE, 12) == 0
    s = ffi.gc(sp[0], lib.vc_gcm_stream_free)
    raw = ffi.cast("uint8_t *", s)
    before = bytes(ffi.buffer(raw, CTX + 144))
    # The kind tag (padded to 16), then gcm_ctx: 144 bytes (five 16-byte
    # blocks, three pointers, two ints, nbuf, two uint64 lengths, 16-byte
    # aligned); busy follows it.
    raw[CTX + 144] = 1
    out = ffi.new("uint8_t[5]")
    assert lib.vc_gcm_stream_update(s, b"hello", out, 5) == lib.VC_ERR_STATE
    assert lib.vc_gcm_stream_aad(s, b"a", 1) == lib.VC_ERR_STATE
    assert lib.vc_gcm_stream_finish(s, ffi.new("uint8_t[16]"), 16) == lib.VC_ERR_STATE
    assert bytes(ffi.buffer(raw, CTX + 144)) == before and bytes(out) == bytes(5)
    raw[CTX + 144] = 0
    assert lib.vc_gcm_stream_update(s, b"hello", out, 5) == lib.VC_OK
    assert (
        bytes(x ^ y for x, y in zip(bytes(out), b"hello", strict=True))
        == (_gcm_tag_of_zeros(KEY1, 5)[0])
    )


# -------------------------------------------- stream indices stay in range --


def _u32_at(raw: object, off: int) -> int:
    return int.from_bytes(bytes(ffi.buffer(raw + off, 4)), "little")  # type: ignore[operator]


def _find_index(
    raw: object, lo: int, hi: int, step: Callable[[], None], values: tuple[int, int]
) -> int:
    """The offset of the 4-byte field in [lo, hi) that is values[0] now and
    values[1] after step() (the partial-block index, found, not assumed;
    the byte count differs from both values)."""
    first = [o for o in range(lo, hi, 4) if _u32_at(raw, o) == values[0]]
    step()
    found = [o for o in first if _u32_at(raw, o) == values[1]]
    assert len(found) == 1, f"partial-block index not found uniquely: {found}"
    return found[0]


@pytest.mark.parametrize(
    ("cls", "start", "lo", "hi", "past_buf"),
    [
        # after the kind tag (CTX bytes): nbuf lives in [80, 144) of the
        # context; buf + 40 is the GHASH key pointer
        (AESGCM, (NONCE, 12), CTX + 80, CTX + 144, (40, 24)),
        # num lives in [48, 80) after the tag; cbuf + 16 is the key pointer
        (AESCFB, (IV,), CTX + 48, CTX + 80, (16, 16)),
    ],
)
def test_partial_block_index_is_bounded(
    cls: type, start: tuple[object, ...], lo: int, hi: int, past_buf: tuple[int, int]
) -> None:
    """A corrupted partial-block index (GCM's nbuf, CFB128's num: what a race
    the busy flag missed could leave) must not index the 16-byte buffer past
    its end: here it would overwrite the context's pointers, the `size`
    bytes at lo."""
    bad, size = past_buf
    mode = "gcm" if cls is AESGCM else "cfb"
    owner = cls(KEY1)
    update = getattr(lib, f"vc_{mode}_stream_update")
    sp = ffi.new(f"vc_{mode}_stream **")
    assert getattr(lib, f"vc_{mode}_stream_new")(sp, owner._key, 0, *start) == 0
    s = ffi.gc(sp[0], getattr(lib, f"vc_{mode}_stream_free"))
    raw = ffi.cast("uint8_t *", s)
    out = ffi.new("uint8_t[16]")
    assert update(s, bytes(5), out, 5) == 0
    off = _find_index(raw, lo, hi, lambda: update(s, bytes(14), out, 14), (5, 3))
    pointers = bytes(ffi.buffer(raw + lo, size))
    ffi.memmove(raw + off, bad.to_bytes(4, "little"), 4)
    assert update(s, bytes(11), out, 11) == 0
    assert bytes(ffi.buffer(raw + lo, size)) == pointers, "index went past the 16-byte buffer"
    assert _u32_at(raw, off) < 16


# ------------------------------------------- a stream holds its own key --


@pytest.mark.parametrize("how", ["reinit", "drop"])
def test_gcm_stream_keeps_its_key_when_the_owner_is_rekeyed(how: str) -> None:
    pt, aad = bytes(range(200)), b"header"
    ct_ref, tag_ref = ref.gcm_encrypt(KEY1, NONCE, pt, aad)
    g = AESGCM(KEY1)
    enc = g.encryptor(NONCE, aad)
    dec = g.decryptor(NONCE, aad)
    a = enc.update(pt[:37]) + dec.update(ct_ref[:37])
    if how == "reinit":
        g.__init__(KEY2, tag_length=12)  # type: ignore[misc]
        g.encrypt(NONCE, pt, None)  # the new key is live and used
    else:
        del g
    a = enc.update(pt[37:])
    assert enc.update(b"") == b""
    enc.finalize()
    assert enc.tag == tag_ref, "the stream used the owner's new key (or freed memory)"
    assert a == ct_ref[37:]
    assert dec.update(ct_ref[37:]) == pt[37:]
    dec.finalize(tag_ref)  # still the 16-byte tag of the stream's own key


def test_cfb_stream_keeps_its_key_and_segment_size_when_the_owner_is_rekeyed() -> None:
    data = bytes(range(100))
    c = AESCFB(KEY1, segment_size=128)
    enc = c.encryptor(IV)
    head = enc.update(data[:7])
    c.__init__(KEY2, segment_size=1)  # type: ignore[misc]
    tail = enc.update(data[7:])
    assert head + tail == ref.cfb128(KEY1, IV, data, True)


def test_one_shot_holds_its_key_while_another_thread_rekeys() -> None:
    """The general (cffi) methods release the GIL in C; another thread
    re-running __init__ must not free the key under them.  Results are
    whichever key was current when the call began, never a mixture."""
    pt = bytes(1 << 16)
    g = AESGCM(KEY1)
    good = {RefGCM(k).encrypt(NONCE, pt, None) for k in (KEY1, KEY2)}
    stop = threading.Event()

    def rekey() -> None:
        while not stop.is_set():
            g.__init__(KEY2)  # type: ignore[misc]
            g.__init__(KEY1)  # type: ignore[misc]

    t = _Worker(rekey)
    t.start()
    try:
        bad = 0
        for _ in range(300):
            # keywords: the general Python method, through cffi
            if g.encrypt(nonce=NONCE, data=pt, associated_data=None) not in good:
                bad += 1
    finally:
        stop.set()
        t.join()
    assert t.error is None
    assert bad == 0, f"{bad} of 300 encryptions used a key freed under them"


# ------------------------------------------------------ overlapping buffers --


def _overlap_views(n: int, shift: int) -> tuple[bytearray, memoryview, memoryview]:
    buf = bytearray(range(256)) * 2
    mv = memoryview(buf)
    return (
        (buf, mv[:n], mv[shift : shift + n])
        if shift >= 0
        else (buf, mv[-shift : -shift + n], mv[:n])
    )


@pytest.mark.parametrize("shift", [16, 1, -16, -5])
@pytest.mark.parametrize("kind", ["gcm-enc", "gcm-dec", "cfb128", "cfb8", "cfb1"])
def test_partial_overlap_is_refused(kind: str, shift: int) -> None:
    stream: object
    if kind.startswith("gcm"):
        g = AESGCM(KEY1)
        stream = g.encryptor(NONCE) if kind == "gcm-enc" else g.decryptor(NONCE)
    else:
        seg = {"cfb128": 128, "cfb8": 8, "cfb1": 1}[kind]
        stream = AESCFB(KEY1, segment_size=seg).encryptor(IV)
    buf, src, dst = _overlap_views(64, shift)
    snapshot = bytes(buf)
    with pytest.raises(ValueError, match="overlap"):
        stream.update_into(src, dst)  # type: ignore[attr-defined]
    assert bytes(buf) == snapshot, "a refused call wrote output"


@pytest.mark.parametrize("kind", ["gcm", "cfb128", "cfb8", "cfb1"])
def test_exact_in_place_and_adjacent_buffers_stay_allowed(kind: str) -> None:
    data = bytes(range(64))
    if kind == "gcm":
        expect = ref.gcm_encrypt(KEY1, NONCE, data, b"")[0]
        mk = lambda: AESGCM(KEY1).encryptor(NONCE)
    else:
        seg = {"cfb128": 128, "cfb8": 8, "cfb1": 1}[kind]
        expect = (
            ref.cfb128(KEY1, IV, data, True)
            if seg == 128
            else ref.cfb8(KEY1, IV, data, True)
            if seg == 8
            else ref.cfb1(KEY1, IV, data, 8 * len(data), True)
        )
        mk = lambda: AESCFB(KEY1, segment_size=seg).encryptor(IV)
    buf = bytearray(data)
    mk().update_into(buf, buf)  # in place: same address, same length
    assert bytes(buf) == expect
    two = bytearray(data) + bytearray(64)
    mv = memoryview(two)
    mk().update_into(mv[:64], mv[64:])  # adjacent, not overlapping
    assert bytes(two[64:]) == expect


def test_c_one_shots_refuse_partial_overlap() -> None:
    g, c = AESGCM(KEY1), AESCFB(KEY1)
    buf = ffi.new("uint8_t[96]")
    tag = ffi.new("uint8_t[16]")
    for i_off, o_off in ((0, 16), (16, 0), (0, 1)):
        i, o = buf + i_off, buf + o_off
        assert lib.vc_gcm_encrypt(g._key, NONCE, 12, ffi.NULL, 0, i, o, 64, tag, 16) == (
            lib.VC_ERR_OVERLAP
        )
        assert lib.vc_gcm_decrypt(g._key, NONCE, 12, ffi.NULL, 0, i, o, 64, tag, 16) == (
            lib.VC_ERR_OVERLAP
        )
        assert lib.vc_cfb_encrypt(c._key, IV, i, o, 64) == lib.VC_ERR_OVERLAP
        assert lib.vc_cfb_decrypt(c._key, IV, i, o, 64) == lib.VC_ERR_OVERLAP
    assert lib.vc_gcm_encrypt(g._key, NONCE, 12, ffi.NULL, 0, buf, buf, 64, tag, 16) == 0
    assert lib.vc_gcm_encrypt(g._key, NONCE, 12, ffi.NULL, 0, buf, buf + 64, 32, tag, 16) == 0
    assert ffi.string(lib.vc_status_message(lib.VC_ERR_OVERLAP)).startswith(b"input and output")


# ------------------------------------------- finish wipes the secret state --


@pytest.mark.parametrize("direction", ["encrypt", "decrypt", "decrypt-forged"])
def test_gcm_finish_wipes_ekj0_and_ghash_state(direction: str) -> None:
    """The first 80 bytes of a GCM stream's context (after the kind tag) are
    X (GHASH accumulator), the counter, E_K(J0), the partial block and its
    keystream (gcm.c asserts this layout: GCM_CTX_SECRET_BYTES).  After
    finalize they must all be zero."""
    g = AESGCM(KEY1)
    ct, tag = ref.gcm_encrypt(KEY1, NONCE, bytes(21), b"aad")
    stream = g.encryptor(NONCE, b"aad") if direction == "encrypt" else g.decryptor(NONCE, b"aad")
    stream.update(bytes(21) if direction == "encrypt" else ct)
    raw = ffi.cast("uint8_t *", stream._s) + CTX
    secret = bytes(ffi.buffer(raw, 80))
    assert all(any(secret[i : i + 16]) for i in (0, 16, 32, 48, 64)), "control: state is live"
    if direction == "encrypt":
        stream.finalize()  # type: ignore[call-arg]
    elif direction == "decrypt":
        stream.finalize(tag)  # type: ignore[call-arg]
    else:
        with pytest.raises(InvalidTag):
            stream.finalize(bytes(16))  # type: ignore[call-arg]
    assert bytes(ffi.buffer(raw, 80)) == bytes(80), "finish left E_K(J0) / GHASH state"
