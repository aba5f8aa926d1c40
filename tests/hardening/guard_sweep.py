"""Guard-page sweep of one (mode, path) through the C API; run as a child process.

    python tests/hardening/guard_sweep.py --mode gcm --path avx512 [--max-len 300]

For every length 0..max-len and two placements ("end": every buffer ends flush
against a PROT_NONE page; "start": every buffer starts right after one) it
calls vaescrypt._native.lib directly with pointers into the guarded pages:
key, IV/nonce, AAD, input, output and tag all sit against a guard, so a single
byte read or written outside any of them kills the process with SIGSEGV.

Operations per length and placement (directions the path cannot run are
skipped; decrypt inputs come from the reference, not from the path):

    gcm:  encrypt / decrypt, out-of-place and in-place; decrypt with a wrong
          tag (status must be VC_ERR_AUTH and the output all zero, in-place
          too); streaming encrypt (AAD in two pieces, data in three chunks)
          and streaming in-place decrypt + tag check.  Nonce length, AAD length
          and tag length vary with the length so all of 1..64, 0..max-len and
          {4, 8, 12..16} are covered.
    cfb*: encrypt / decrypt, out-of-place and in-place, streaming in three
          chunks.  cfb1 sweeps bit counts 0..max-len (partial final bytes,
          unused input bits set to 1) and whole-byte lengths 0..max-len.

Protocol with the parent: before each call one line `CASE <description>` is
written to stdout and flushed, so when the process dies the last CASE line
names the call that faulted.  Wrong results print `FAIL <description>: ...`.
The last line is `DONE <calls>`; exit status 0 (all good), 1 (wrong results),
2 (usage); death by signal means an out-of-bounds access.
"""

from __future__ import annotations

import argparse
import faulthandler
import itertools
import random
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from vaescrypt._native import ffi, lib

import vaescrypt
from hardening import reference
from hardening.guard_mem import GuardedRegion, fill, read, write

TAG_LENGTHS = (16, 4, 8, 12, 13, 14, 15)
KEY_SIZES = (16, 24, 32)
MAX_FAILS = 25


class Sweep:
    def __init__(self, mode: str, path: str, max_len: int) -> None:
        self.mode = mode
        self.path = path
        self.path_code = int(lib.vc_path_from_name(path.encode()))
        self.max_len = max_len
        self.enc = vaescrypt.path_usable(mode, "encrypt", path)
        self.dec = vaescrypt.path_usable(mode, "decrypt", path)
        names = ("key", "iv", "aad", "inp", "out", "tag")
        self.r = {n: GuardedRegion() for n in names}
        self.calls = 0
        self.fails = 0
        self.where = ""

    # ----------------------------------------------------------- plumbing --
    def case(self, what: str) -> None:
        self.where = f"mode={self.mode} path={self.path} {what}"
        sys.stdout.write(f"CASE {self.where}\n")
        sys.stdout.flush()
        self.calls += 1

    def fail(self, msg: str) -> None:
        self.fails += 1
        sys.stdout.write(f"FAIL {self.where}: {msg}\n")
        sys.stdout.flush()
        if self.fails >= MAX_FAILS:
            sys.stdout.write(f"DONE {self.calls} (stopped after {MAX_FAILS} failures)\n")
            sys.exit(1)

    def expect(self, st: int, want: int, what: str) -> bool:
        if st != want:
            text = ffi.string(lib.vc_status_message(st)).decode()
            self.fail(f"{what}: status {st} ({text}), expected {want}")
            return False
        return True

    def check_bytes(self, got: bytes, want: bytes, what: str) -> None:
        if got != want:
            diff = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), None)
            self.fail(
                f"{what}: output differs from reference (first differing byte {diff}, "
                f"len {len(got)} vs {len(want)})"
            )

    @staticmethod
    def p(addr: int) -> object:
        return ffi.cast("uint8_t *", addr)

    # ---------------------------------------------------------------- gcm --
    def gcm_length(self, n: int, rnd: random.Random) -> None:
        ks = KEY_SIZES[n % 3]
        nonce_len = 12 if n % 4 == 0 else 1 + (n * 5) % 64
        aad_len = (n * 11) % (self.max_len + 1)
        tag_len = TAG_LENGTHS[n % len(TAG_LENGTHS)]
        key, nonce = rnd.randbytes(ks), rnd.randbytes(nonce_len)
        aad, pt = rnd.randbytes(aad_len), rnd.randbytes(n)
        ct, tag = reference.gcm_seal(key, nonce, aad, pt, tag_len)
        bad_tag = bytearray(tag)
        bad_tag[(n // 8) % tag_len] ^= 1 << (n % 8)
        desc = f"len={n} key={ks} nonce={nonce_len} aad={aad_len} tag={tag_len}"
        for place in ("end", "start"):
            self.gcm_placed(place, desc, key, nonce, aad, pt, ct, tag, bytes(bad_tag))

    def gcm_placed(
        self,
        place: str,
        desc: str,
        key: bytes,
        nonce: bytes,
        aad: bytes,
        pt: bytes,
        ct: bytes,
        tag: bytes,
        bad_tag: bytes,
    ) -> None:
        r = self.r
        n, tl = len(pt), len(tag)
        a_key = r["key"].place(place, len(key))
        a_iv = r["iv"].place(place, len(nonce))
        a_aad = r["aad"].place(place, len(aad))
        a_in = r["inp"].place(place, n)
        a_out = r["out"].place(place, n)
        a_tag = r["tag"].place(place, tl)
        write(a_key, key)
        write(a_iv, nonce)
        write(a_aad, aad)
        tag_p = self.p(a_tag)
        d = f"{desc} placement={place}"

        kp = ffi.new("vc_gcm_key **")
        self.case(f"op=key_new {d}")
        if not self.expect(
            lib.vc_gcm_key_new(kp, self.p(a_key), len(key), self.path_code), 0, "vc_gcm_key_new"
        ):
            return
        k = kp[0]
        try:

            def one(op: str, enc: bool, src: bytes, in_place: bool, t: bytes | None) -> int:
                write(a_in, src)
                dst = a_in if in_place else a_out
                if not in_place:
                    fill(a_out, 0xA5, n)
                if t is None:
                    fill(a_tag, 0xA5, tl)
                else:
                    write(a_tag, t)
                self.case(f"op={op} {d}")
                fn = lib.vc_gcm_encrypt if enc else lib.vc_gcm_decrypt
                return int(
                    fn(
                        k,
                        self.p(a_iv),
                        len(nonce),
                        self.p(a_aad),
                        len(aad),
                        self.p(a_in),
                        self.p(dst),
                        n,
                        tag_p,
                        tl,
                    )
                )

            if self.enc:
                for in_place in (False, True):
                    op = "encrypt_in_place" if in_place else "encrypt"
                    if self.expect(one(op, True, pt, in_place, None), 0, op):
                        self.check_bytes(read(a_in if in_place else a_out, n), ct, op)
                        self.check_bytes(read(a_tag, tl), tag, op + " tag")
                self.gcm_stream(
                    k,
                    "stream_encrypt",
                    True,
                    a_iv,
                    len(nonce),
                    a_aad,
                    aad,
                    a_in,
                    a_out,
                    pt,
                    ct,
                    a_tag,
                    tag,
                    d,
                )
            if self.dec:
                for in_place in (False, True):
                    op = "decrypt_in_place" if in_place else "decrypt"
                    if self.expect(one(op, False, ct, in_place, tag), 0, op):
                        self.check_bytes(read(a_in if in_place else a_out, n), pt, op)
                    op = "decrypt_bad_tag_in_place" if in_place else "decrypt_bad_tag"
                    if self.expect(one(op, False, ct, in_place, bad_tag), lib.VC_ERR_AUTH, op):
                        self.check_bytes(
                            read(a_in if in_place else a_out, n),
                            bytes(n),
                            op + " (output must be zeroed)",
                        )
                self.gcm_stream(
                    k,
                    "stream_decrypt_in_place",
                    False,
                    a_iv,
                    len(nonce),
                    a_aad,
                    aad,
                    a_in,
                    a_in,
                    ct,
                    pt,
                    a_tag,
                    tag,
                    d,
                )
        finally:
            lib.vc_gcm_key_free(k)

    def gcm_stream(
        self,
        k: object,
        op: str,
        enc: bool,
        a_iv: int,
        nonce_len: int,
        a_aad: int,
        aad: bytes,
        a_in: int,
        a_out: int,
        src: bytes,
        want: bytes,
        a_tag: int,
        tag: bytes,
        d: str,
    ) -> None:
        n, tl = len(src), len(tag)
        write(a_in, src)
        if a_out != a_in:
            fill(a_out, 0xA5, n)
        sp = ffi.new("vc_gcm_stream **")
        self.case(f"op={op}:new {d}")
        if not self.expect(
            lib.vc_gcm_stream_new(sp, k, 0 if enc else 1, self.p(a_iv), nonce_len), 0, op + " new"
        ):
            return
        s = sp[0]
        try:
            half = len(aad) // 2
            for off, ln in ((0, half), (half, len(aad) - half)):
                self.case(f"op={op}:aad[{off}:{off + ln}] {d}")
                if not self.expect(
                    lib.vc_gcm_stream_aad(s, self.p(a_aad + off), ln), 0, op + " aad"
                ):
                    return
            cuts = [0, n // 3, (2 * n) // 3, n]
            for lo, hi in itertools.pairwise(cuts):
                self.case(f"op={op}:update[{lo}:{hi}] {d}")
                if not self.expect(
                    lib.vc_gcm_stream_update(s, self.p(a_in + lo), self.p(a_out + lo), hi - lo),
                    0,
                    op + " update",
                ):
                    return
            self.check_bytes(read(a_out, n), want, op)
            if enc:
                fill(a_tag, 0xA5, tl)
            else:
                write(a_tag, tag)
            self.case(f"op={op}:finish {d}")
            if self.expect(lib.vc_gcm_stream_finish(s, self.p(a_tag), tl), 0, op + " finish"):
                self.check_bytes(read(a_tag, tl), tag, op + " tag")
        finally:
            lib.vc_gcm_stream_free(s)

    # ---------------------------------------------------------------- cfb --
    def cfb_length(self, n: int, rnd: random.Random, unit: str) -> None:
        ks = KEY_SIZES[n % 3]
        key, iv = rnd.randbytes(ks), rnd.randbytes(16)
        if unit == "bits":
            nbits, nbytes = n, (n + 7) // 8
        else:
            nbits, nbytes = 8 * n, n
        data = bytearray(rnd.randbytes(nbytes))
        if self.mode == "cfb1" and nbits % 8:
            data[-1] |= (1 << (8 - nbits % 8)) - 1  # unused input bits must not leak
        nb = nbits if self.mode == "cfb1" else None
        ct = reference.cfb(self.mode, key, iv, bytes(data), True, nb)
        # decrypt input: the reference ciphertext, its unused bits set as above
        ct_in = bytearray(ct)
        if self.mode == "cfb1" and nbits % 8:
            ct_in[-1] |= (1 << (8 - nbits % 8)) - 1
        pt = reference.cfb(self.mode, key, iv, bytes(ct_in), False, nb)
        clen = nbits if self.mode == "cfb1" else nbytes
        desc = f"len={n}{'bits' if unit == 'bits' else 'bytes'} key={ks}"
        for place in ("end", "start"):
            self.cfb_placed(place, desc, key, iv, bytes(data), ct, bytes(ct_in), pt, clen)

    def cfb_placed(
        self,
        place: str,
        desc: str,
        key: bytes,
        iv: bytes,
        data: bytes,
        ct: bytes,
        ct_in: bytes,
        pt: bytes,
        clen: int,
    ) -> None:
        r = self.r
        n = len(data)
        segment = {"cfb128": 128, "cfb8": 8, "cfb1": 1}[self.mode]
        a_key, a_iv = r["key"].place(place, len(key)), r["iv"].place(place, 16)
        a_in, a_out = r["inp"].place(place, n), r["out"].place(place, n)
        write(a_key, key)
        write(a_iv, iv)
        d = f"{desc} placement={place}"
        kp = ffi.new("vc_cfb_key **")
        self.case(f"op=key_new {d}")
        if not self.expect(
            lib.vc_cfb_key_new(kp, self.p(a_key), len(key), segment, self.path_code),
            0,
            "vc_cfb_key_new",
        ):
            return
        k = kp[0]
        try:
            jobs: list[tuple[str, bool, bytes, bytes]] = []
            if self.enc:
                jobs.append(("encrypt", True, data, ct))
            if self.dec:
                jobs.append(("decrypt", False, ct_in, pt))
            for name, enc, src, want in jobs:
                fn: Callable[..., int] = lib.vc_cfb_encrypt if enc else lib.vc_cfb_decrypt
                for in_place in (False, True):
                    op = name + ("_in_place" if in_place else "")
                    write(a_in, src)
                    dst = a_in if in_place else a_out
                    if not in_place:
                        fill(a_out, 0xA5, n)
                    self.case(f"op={op} {d}")
                    if self.expect(fn(k, self.p(a_iv), self.p(a_in), self.p(dst), clen), 0, op):
                        self.check_bytes(read(dst, n), want, op)
                self.cfb_stream(k, "stream_" + name, enc, a_iv, a_in, a_out, src, want, clen, d)
        finally:
            lib.vc_cfb_key_free(k)

    def cfb_stream(
        self,
        k: object,
        op: str,
        enc: bool,
        a_iv: int,
        a_in: int,
        a_out: int,
        src: bytes,
        want: bytes,
        clen: int,
        d: str,
    ) -> None:
        n = len(src)
        write(a_in, src)
        fill(a_out, 0xA5, n)
        sp = ffi.new("vc_cfb_stream **")
        self.case(f"op={op}:new {d}")
        if not self.expect(
            lib.vc_cfb_stream_new(sp, k, 0 if enc else 1, self.p(a_iv)), 0, op + " new"
        ):
            return
        s = sp[0]
        try:
            if self.mode == "cfb1":
                whole = clen // 8  # whole bytes first, the partial byte only at the end
                cuts = [0, whole // 3, (2 * whole) // 3, n]
                lens = [8 * (b - a) for a, b in itertools.pairwise(cuts)]
                lens[-1] = clen - 8 * cuts[2]
            else:
                cuts = [0, n // 3, (2 * n) // 3, n]
                lens = [b - a for a, b in itertools.pairwise(cuts)]
            for lo, hi, ln in zip(cuts, cuts[1:], lens):
                self.case(f"op={op}:update[{lo}:{hi}] {d}")
                if not self.expect(
                    lib.vc_cfb_stream_update(s, self.p(a_in + lo), self.p(a_out + lo), ln),
                    0,
                    op + " update",
                ):
                    return
            self.check_bytes(read(a_out, n), want, op)
        finally:
            lib.vc_cfb_stream_free(s)

    # ---------------------------------------------------------- self-test --
    def overrun(self) -> int:
        """Harness self-test: lie to the library that a 16-byte buffer at the
        guard holds 17 bytes.  The call must die with SIGSEGV; returning means
        the guard pages do not catch an over-read."""
        n = 16
        a_key = self.r["key"].place("end", 16)
        a_iv = self.r["iv"].place("end", 16)
        a_in, a_out = self.r["inp"].place("end", n), self.r["out"].place("start", 64)
        write(a_key, bytes(range(16)))
        write(a_iv, bytes(16))
        write(a_in, bytes(n))
        if self.mode == "gcm":
            kp = ffi.new("vc_gcm_key **")
            self.expect(lib.vc_gcm_key_new(kp, self.p(a_key), 16, self.path_code), 0, "key")
            tag = ffi.new("uint8_t[16]")
            self.case("op=deliberate_overrun len=17 placement=end")
            lib.vc_gcm_encrypt(
                kp[0], self.p(a_iv), 12, ffi.NULL, 0, self.p(a_in), self.p(a_out), n + 1, tag, 16
            )
        else:
            seg = {"cfb128": 128, "cfb8": 8, "cfb1": 1}[self.mode]
            kp = ffi.new("vc_cfb_key **")
            self.expect(lib.vc_cfb_key_new(kp, self.p(a_key), 16, seg, self.path_code), 0, "key")
            fn = lib.vc_cfb_encrypt if self.enc else lib.vc_cfb_decrypt
            self.case("op=deliberate_overrun len=17 placement=end")
            fn(kp[0], self.p(a_iv), self.p(a_in), self.p(a_out), 8 * (n + 1) if seg == 1 else n + 1)
        print("DONE 1 (the over-read was NOT caught)", flush=True)
        return 1

    # ---------------------------------------------------------------- run --
    def run(self) -> int:
        if not (self.enc or self.dec):
            print(f"FAIL mode={self.mode} path={self.path}: path usable in no direction")
            return 1
        rnd = random.Random(f"guard-{self.mode}-{self.path}")
        for n in range(self.max_len + 1):
            if self.mode == "gcm":
                self.gcm_length(n, rnd)
            elif self.mode == "cfb1":
                self.cfb_length(n, rnd, "bits")
                self.cfb_length(n, rnd, "bytes")
            else:
                self.cfb_length(n, rnd, "bytes")
        dirs = [x for x, ok in (("encrypt", self.enc), ("decrypt", self.dec)) if ok]
        print(f"DONE {self.calls} directions={','.join(dirs)}", flush=True)
        return 1 if self.fails else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="guard-page sweep of one vaescrypt path")
    ap.add_argument("--mode", required=True, choices=vaescrypt.MODES)
    ap.add_argument("--path", required=True, choices=vaescrypt.PATHS)
    ap.add_argument("--max-len", type=int, default=300)
    ap.add_argument(
        "--self-test-overrun",
        action="store_true",
        help="make one deliberately out-of-bounds call (must crash)",
    )
    a = ap.parse_args(argv)
    faulthandler.enable()  # a crash also leaves a Python stack on stderr
    if not 0 <= a.max_len <= 4000:
        ap.error("--max-len must be 0..4000 (buffers live in one page)")
    sweep = Sweep(a.mode, a.path, a.max_len)
    return sweep.overrun() if a.self_test_overrun else sweep.run()


if __name__ == "__main__":
    sys.exit(main())
