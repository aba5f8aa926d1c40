/*
 * vc_fuzz_paths.c - libFuzzer differential harness: every code path against
 * the generic one (issue 13, "differential fuzzing across paths").
 *
 * From one fuzz input it derives an AES key (128/192/256), an IV (12 bytes
 * or 1..64 for GCM's GHASH-derived J0), AAD, a tag length, data, split points
 * and a buffer misalignment, then runs through the public API, for every
 * path vc_available() lists on this CPU (forced with vc_*_key_new(impl=path),
 * the generic path included):
 *   GCM   one-shot encrypt, streaming encrypt (AAD in 2 pieces, data in 3),
 *         in-place encrypt, one-shot and streaming decrypt of the reference
 *         ciphertext (the tag must verify), and both decrypts with one tag
 *         bit flipped (must fail with VC_ERR_AUTH; one-shot zeroes its output);
 *   CFB128 / CFB8 / CFB1  one-shot and streaming (3 pieces), both directions,
 *         of the fuzz data itself (so decryption also sees arbitrary
 *         ciphertext), plus decrypt(encrypt(x)) == x.  CFB1 lengths are in
 *         bits; the last piece may end inside a byte.
 * Every result must equal the generic path's one-shot result byte for byte;
 * any difference, unexpected status or failed round trip prints what differed
 * and abort()s, which libFuzzer records as a crash.  Build (see
 * tests/fuzz/build_fuzzer.py): clang -fsanitize=fuzzer,address,undefined,
 * the library compiled with -fsanitize=fuzzer-no-link,address,undefined.
 *
 * Output buffers are malloc'd at exactly the size a call may write (at a
 * fuzz-chosen 0..15 byte offset), so ASan flags a write one byte past.
 *
 * VC_FUZZ_TEETH (test build only): corrupt one byte of the widest path's
 * one-shot GCM ciphertext before the comparison, so the test suite can check
 * that a mismatch is caught.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vaescrypt.h"

/* Generic CFB1 is one block encryption per bit: keep its share of an input
 * small so the fuzzer stays fast (other modes use the whole data). */
#define CFB1_MAX_BYTES 24
#define CFB8_MAX_BYTES 96

typedef struct {
    const uint8_t *p;
    size_t n;
} reader;

static uint8_t rd_u8(reader *r)
{
    if (r->n == 0)
        return 0; /* a short input reads as zeros: every input is usable */
    r->n--;
    return *r->p++;
}

static size_t rd_u16(reader *r)
{
    size_t hi = rd_u8(r);
    return (hi << 8) | rd_u8(r);
}

/* Copy up to n bytes (zero-padded) into dst. */
static void rd_bytes(reader *r, uint8_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = rd_u8(r);
}

static const char *mode_names[] = {"gcm", "cfb128", "cfb8", "cfb1"};

static void fail(const char *what, int mode, int path, int dir, int st, size_t len)
{
    fprintf(stderr,
            "vc_fuzz_paths: MISMATCH %s: mode=%s path=%s dir=%s status=%d (%s) len=%zu\n", what,
            mode_names[mode], vc_path_name((vc_path)path), dir ? "decrypt" : "encrypt", st,
            vc_status_message(st), len);
    abort();
}

static void expect_same(const char *what, int mode, int path, int dir, const uint8_t *got,
                        const uint8_t *want, size_t n)
{
    if (n && memcmp(got, want, n) != 0) {
        size_t i = 0;
        while (got[i] == want[i])
            i++;
        fprintf(stderr, "vc_fuzz_paths: first difference at byte %zu of %zu: %02x != %02x\n", i,
                n, got[i], want[i]);
        fail(what, mode, path, dir, 0, n);
    }
}

static void check(int st, const char *what, int mode, int path, int dir, size_t len)
{
    if (st != VC_OK)
        fail(what, mode, path, dir, st, len);
}

/* An output buffer of exactly n bytes at offset `off` in its allocation. */
typedef struct {
    uint8_t *base;
    uint8_t *p;
} obuf;

static obuf obuf_new(size_t n, unsigned off)
{
    /* The allocation ends exactly at p + n: one byte more is in ASan's
     * redzone.  (Never malloc(0): its result may be NULL.) */
    obuf b;
    b.base = malloc(n + off ? n + off : 1);
    if (!b.base)
        abort();
    b.p = b.base + off;
    return b;
}

static void obuf_free(obuf *b)
{
    free(b->base);
    b->base = b->p = NULL;
}

typedef struct {
    uint8_t key[32];
    size_t key_len;
    uint8_t iv[64];
    size_t iv_len;
    const uint8_t *aad;
    size_t aad_len, aad_split;
    size_t tag_len;
    const uint8_t *data;
    size_t len;
    size_t split1, split2; /* 0 <= split1 <= split2 <= len */
    unsigned off;          /* output misalignment 0..15 */
    unsigned cfb1_drop;    /* CFB1: bits dropped from the end (0..7) */
} fuzz_case;

static const size_t tag_lengths[] = {16, 12, 13, 14, 15, 8, 4};

static void parse(const uint8_t *d, size_t n, fuzz_case *c)
{
    reader r = {d, n};
    static const size_t key_lengths[] = {16, 24, 32};
    c->key_len = key_lengths[rd_u8(&r) % 3];
    const uint8_t ivsel = rd_u8(&r);
    c->iv_len = ivsel < 192 ? 12 : 1 + (size_t)(ivsel % 64);
    c->tag_len = tag_lengths[rd_u8(&r) % (sizeof tag_lengths / sizeof tag_lengths[0])];
    size_t aad_len = rd_u8(&r);
    const size_t aad_split = rd_u8(&r);
    const size_t s1 = rd_u16(&r), s2 = rd_u16(&r);
    const uint8_t misc = rd_u8(&r);
    c->off = misc & 15;
    c->cfb1_drop = (misc >> 4) & 7;
    rd_bytes(&r, c->key, c->key_len);
    rd_bytes(&r, c->iv, c->iv_len);
    if (aad_len > r.n)
        aad_len = r.n;
    c->aad = r.p;
    c->aad_len = aad_len;
    c->aad_split = aad_len ? aad_split % (aad_len + 1) : 0;
    r.p += aad_len;
    r.n -= aad_len;
    c->data = r.p;
    c->len = r.n;
    size_t a = s1 % (c->len + 1), b = s2 % (c->len + 1);
    c->split1 = a < b ? a : b;
    c->split2 = a < b ? b : a;
}

static int paths_for(int mode, int dir, int out[VC_PATH_COUNT])
{
    const int n = vc_available((vc_mode)mode, (vc_dir)dir, out);
    if (n < 1 || n > VC_PATH_COUNT)
        fail("vc_available", mode, VC_PATH_GENERIC, dir, n, 0);
    int has_generic = 0;
    for (int i = 0; i < n; i++)
        has_generic |= out[i] == VC_PATH_GENERIC;
    if (!has_generic)
        fail("generic path not available", mode, VC_PATH_GENERIC, dir, n, 0);
    return n;
}

/* ---------------------------------------------------------------- GCM -- */

static vc_gcm_key *gcm_key(const fuzz_case *c, int path, int dir)
{
    vc_gcm_key *k = NULL;
    check(vc_gcm_key_new(&k, c->key, c->key_len, path), "gcm key_new", VC_MODE_GCM, path, dir,
          c->len);
    if (vc_gcm_key_path(k, dir) != path)
        fail("gcm key_path", VC_MODE_GCM, path, dir, vc_gcm_key_path(k, dir), c->len);
    return k;
}

/* Stream the three pieces [0,s1) [s1,s2) [s2,len) of in through s. */
static void gcm_stream_pieces(const fuzz_case *c, vc_gcm_stream *s, const uint8_t *in,
                              uint8_t *out, int path, int dir)
{
    const size_t cut[4] = {0, c->split1, c->split2, c->len};
    check(vc_gcm_stream_aad(s, c->aad, c->aad_split), "gcm stream aad 1", VC_MODE_GCM, path, dir,
          c->len);
    check(vc_gcm_stream_aad(s, c->aad + c->aad_split, c->aad_len - c->aad_split),
          "gcm stream aad 2", VC_MODE_GCM, path, dir, c->len);
    for (int i = 0; i < 3; i++)
        check(vc_gcm_stream_update(s, in + cut[i], out + cut[i], cut[i + 1] - cut[i]),
              "gcm stream update", VC_MODE_GCM, path, dir, c->len);
}

static void fuzz_gcm(const fuzz_case *c)
{
    const int M = VC_MODE_GCM;
    const size_t n = c->len;
    uint8_t ref_tag[16], tag[16];
    obuf ref = obuf_new(n, c->off), out = obuf_new(n, c->off);

    vc_gcm_key *gk = gcm_key(c, VC_PATH_GENERIC, VC_DIR_ENCRYPT);
    check(vc_gcm_encrypt(gk, c->iv, c->iv_len, c->aad, c->aad_len, c->data, ref.p, n, ref_tag,
                         c->tag_len),
          "generic encrypt", M, VC_PATH_GENERIC, VC_DIR_ENCRYPT, n);
    vc_gcm_key_free(gk);

    int paths[VC_PATH_COUNT];
    const int np = paths_for(M, VC_DIR_ENCRYPT, paths);
    for (int i = 0; i < np; i++) {
        const int p = paths[i];
        vc_gcm_key *k = gcm_key(c, p, VC_DIR_ENCRYPT);
        /* one-shot */
        memset(tag, 0xa5, sizeof tag);
        check(vc_gcm_encrypt(k, c->iv, c->iv_len, c->aad, c->aad_len, c->data, out.p, n, tag,
                             c->tag_len),
              "encrypt", M, p, VC_DIR_ENCRYPT, n);
#ifdef VC_FUZZ_TEETH
        if (i == 0 && n) /* the widest path */
            out.p[n / 2] ^= 0x01;
#endif
        expect_same("encrypt ciphertext", M, p, VC_DIR_ENCRYPT, out.p, ref.p, n);
        expect_same("encrypt tag", M, p, VC_DIR_ENCRYPT, tag, ref_tag, c->tag_len);
        /* streaming */
        vc_gcm_stream *s = NULL;
        memset(out.p, 0, n);
        check(vc_gcm_stream_new(&s, k, VC_DIR_ENCRYPT, c->iv, c->iv_len), "stream_new", M, p,
              VC_DIR_ENCRYPT, n);
        gcm_stream_pieces(c, s, c->data, out.p, p, VC_DIR_ENCRYPT);
        check(vc_gcm_stream_finish(s, tag, c->tag_len), "stream finish", M, p, VC_DIR_ENCRYPT, n);
        vc_gcm_stream_free(s);
        expect_same("stream ciphertext", M, p, VC_DIR_ENCRYPT, out.p, ref.p, n);
        expect_same("stream tag", M, p, VC_DIR_ENCRYPT, tag, ref_tag, c->tag_len);
        /* in place */
        if (n)
            memcpy(out.p, c->data, n);
        check(vc_gcm_encrypt(k, c->iv, c->iv_len, c->aad, c->aad_len, out.p, out.p, n, tag,
                             c->tag_len),
              "in-place encrypt", M, p, VC_DIR_ENCRYPT, n);
        expect_same("in-place ciphertext", M, p, VC_DIR_ENCRYPT, out.p, ref.p, n);
        expect_same("in-place tag", M, p, VC_DIR_ENCRYPT, tag, ref_tag, c->tag_len);
        vc_gcm_key_free(k);
    }

    const int nd = paths_for(M, VC_DIR_DECRYPT, paths);
    uint8_t bad_tag[16];
    memcpy(bad_tag, ref_tag, sizeof bad_tag);
    bad_tag[(n + c->aad_len) % c->tag_len] ^= (uint8_t)(1u << (n % 8));
    for (int i = 0; i < nd; i++) {
        const int p = paths[i];
        vc_gcm_key *k = gcm_key(c, p, VC_DIR_DECRYPT);
        check(vc_gcm_decrypt(k, c->iv, c->iv_len, c->aad, c->aad_len, ref.p, out.p, n, ref_tag,
                             c->tag_len),
              "decrypt (tag must verify)", M, p, VC_DIR_DECRYPT, n);
        expect_same("decrypt plaintext", M, p, VC_DIR_DECRYPT, out.p, c->data, n);

        vc_gcm_stream *s = NULL;
        memset(out.p, 0, n);
        check(vc_gcm_stream_new(&s, k, VC_DIR_DECRYPT, c->iv, c->iv_len), "stream_new", M, p,
              VC_DIR_DECRYPT, n);
        gcm_stream_pieces(c, s, ref.p, out.p, p, VC_DIR_DECRYPT);
        check(vc_gcm_stream_finish(s, ref_tag, c->tag_len), "stream finish (tag must verify)", M,
              p, VC_DIR_DECRYPT, n);
        vc_gcm_stream_free(s);
        expect_same("stream plaintext", M, p, VC_DIR_DECRYPT, out.p, c->data, n);

        /* a flipped tag bit: refused, and the one-shot releases nothing */
        memset(out.p, 0x5a, n);
        int st = vc_gcm_decrypt(k, c->iv, c->iv_len, c->aad, c->aad_len, ref.p, out.p, n,
                                bad_tag, c->tag_len);
        if (st != VC_ERR_AUTH)
            fail("decrypt accepted a forged tag", M, p, VC_DIR_DECRYPT, st, n);
        for (size_t j = 0; j < n; j++)
            if (out.p[j])
                fail("decrypt released plaintext on a bad tag", M, p, VC_DIR_DECRYPT, st, n);
        check(vc_gcm_stream_new(&s, k, VC_DIR_DECRYPT, c->iv, c->iv_len), "stream_new", M, p,
              VC_DIR_DECRYPT, n);
        gcm_stream_pieces(c, s, ref.p, out.p, p, VC_DIR_DECRYPT);
        st = vc_gcm_stream_finish(s, bad_tag, c->tag_len);
        vc_gcm_stream_free(s);
        if (st != VC_ERR_AUTH)
            fail("stream accepted a forged tag", M, p, VC_DIR_DECRYPT, st, n);
        vc_gcm_key_free(k);
    }
    obuf_free(&ref);
    obuf_free(&out);
}

/* ---------------------------------------------------------------- CFB -- */

static const int segment_bits[] = {[VC_MODE_CFB128] = 128, [VC_MODE_CFB8] = 8, [VC_MODE_CFB1] = 1};

static vc_cfb_key *cfb_key(const fuzz_case *c, int mode, int path, int dir)
{
    vc_cfb_key *k = NULL;
    check(vc_cfb_key_new(&k, c->key, c->key_len, segment_bits[mode], path), "cfb key_new", mode,
          path, dir, c->len);
    if (vc_cfb_key_path(k, dir) != path)
        fail("cfb key_path", mode, path, dir, vc_cfb_key_path(k, dir), c->len);
    return k;
}

static int cfb_run(const vc_cfb_key *k, int dir, const uint8_t iv[16], const uint8_t *in,
                   uint8_t *out, size_t units)
{
    return dir == VC_DIR_ENCRYPT ? vc_cfb_encrypt(k, iv, in, out, units)
                                 : vc_cfb_decrypt(k, iv, in, out, units);
}

/* Streaming in three pieces.  units: bytes, or bits for CFB1 (whose pieces
 * are whole bytes except the last). */
static void cfb_stream_pieces(const fuzz_case *c, const vc_cfb_key *k, int mode, int path, int dir,
                              const uint8_t *in, uint8_t *out, size_t nbytes, size_t units)
{
    /* CFB1: only whole bytes before the last piece, so a partial final
     * byte always falls in the last one. */
    const size_t scale = mode == VC_MODE_CFB1 ? 8 : 1;
    const size_t cap = mode == VC_MODE_CFB1 ? units / 8 : nbytes;
    const size_t s1 = c->split1 < cap ? c->split1 : cap;
    const size_t s2 = c->split2 < cap ? c->split2 : cap;
    const size_t cut[4] = {0, s1, s2, nbytes};
    vc_cfb_stream *s = NULL;
    check(vc_cfb_stream_new(&s, k, dir, c->iv), "cfb stream_new", mode, path, dir, units);
    for (int i = 0; i < 3; i++) {
        size_t u = (cut[i + 1] - cut[i]) * scale;
        if (i == 2)
            u = units - cut[2] * scale; /* the last piece may end inside a byte */
        check(vc_cfb_stream_update(s, in + cut[i], out + cut[i], u), "cfb stream update", mode,
              path, dir, units);
    }
    vc_cfb_stream_free(s);
}

static void fuzz_cfb(const fuzz_case *c, int mode)
{
    size_t nbytes = c->len;
    if (mode == VC_MODE_CFB1 && nbytes > CFB1_MAX_BYTES)
        nbytes = CFB1_MAX_BYTES;
    if (mode == VC_MODE_CFB8 && nbytes > CFB8_MAX_BYTES)
        nbytes = CFB8_MAX_BYTES;
    size_t units = nbytes;
    if (mode == VC_MODE_CFB1)
        units = nbytes * 8 >= c->cfb1_drop ? nbytes * 8 - c->cfb1_drop : 0;
    /* Reference input: the data, with CFB1's unused low bits cleared in the
     * last byte (so a round trip can be compared byte for byte). */
    obuf in = obuf_new(nbytes, 0);
    if (nbytes)
        memcpy(in.p, c->data, nbytes);
    if (mode == VC_MODE_CFB1 && units % 8)
        in.p[nbytes - 1] &= (uint8_t)(0xff00u >> (units % 8));

    for (int dir = 0; dir < VC_DIR_COUNT; dir++) {
        obuf ref = obuf_new(nbytes, c->off), out = obuf_new(nbytes, c->off);
        vc_cfb_key *gk = cfb_key(c, mode, VC_PATH_GENERIC, dir);
        check(cfb_run(gk, dir, c->iv, in.p, ref.p, units), "generic", mode, VC_PATH_GENERIC, dir,
              units);
        /* round trip through the generic path */
        check(cfb_run(gk, !dir, c->iv, ref.p, out.p, units), "generic inverse", mode,
              VC_PATH_GENERIC, !dir, units);
        expect_same("generic round trip", mode, VC_PATH_GENERIC, dir, out.p, in.p, nbytes);
        vc_cfb_key_free(gk);

        int paths[VC_PATH_COUNT];
        const int np = paths_for(mode, dir, paths);
        for (int i = 0; i < np; i++) {
            const int p = paths[i];
            vc_cfb_key *k = cfb_key(c, mode, p, dir);
            memset(out.p, 0xa5, nbytes);
            check(cfb_run(k, dir, c->iv, in.p, out.p, units), "one-shot", mode, p, dir, units);
            expect_same("one-shot", mode, p, dir, out.p, ref.p, nbytes);
            memset(out.p, 0xa5, nbytes);
            cfb_stream_pieces(c, k, mode, p, dir, in.p, out.p, nbytes, units);
            expect_same("stream", mode, p, dir, out.p, ref.p, nbytes);
            if (nbytes)
                memcpy(out.p, in.p, nbytes);
            check(cfb_run(k, dir, c->iv, out.p, out.p, units), "in-place", mode, p, dir, units);
            expect_same("in-place", mode, p, dir, out.p, ref.p, nbytes);
            vc_cfb_key_free(k);
        }
        obuf_free(&ref);
        obuf_free(&out);
    }
    obuf_free(&in);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Once, before fuzzing: the paths each mode/direction will compare, one line
 * each ("vc_fuzz_paths: paths gcm encrypt: avx512 ... generic"), so a run's
 * log (and the test) shows what was covered on this CPU. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    for (int m = 0; m < VC_MODE_COUNT; m++)
        for (int d = 0; d < VC_DIR_COUNT; d++) {
            int paths[VC_PATH_COUNT];
            const int n = paths_for(m, d, paths);
            fprintf(stderr, "vc_fuzz_paths: paths %s %s:", mode_names[m],
                    d ? "decrypt" : "encrypt");
            for (int i = 0; i < n; i++)
                fprintf(stderr, " %s", vc_path_name((vc_path)paths[i]));
            fputc('\n', stderr);
        }
    return 0;
}


int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_case c;
    parse(data, size, &c);
    /* CFB needs a 16-byte IV: the GCM IV bytes, zero-padded. */
    fuzz_case cfb = c;
    if (cfb.iv_len < 16)
        memset(cfb.iv + cfb.iv_len, 0, 16 - cfb.iv_len);
    cfb.iv_len = 16;
    fuzz_gcm(&c);
    fuzz_cfb(&cfb, VC_MODE_CFB128);
    fuzz_cfb(&cfb, VC_MODE_CFB8);
    fuzz_cfb(&cfb, VC_MODE_CFB1);
    return 0;
}
