/*
 * vg_driver.c - exercise one (mode, path) of vaescrypt through its C API with
 * exactly-sized heap buffers, for running under valgrind memcheck.
 *
 *   vg-driver MODE PATH [MAX_LEN] [--overrun]
 *
 * Every buffer (key, IV, AAD, input, output, tag) is its own malloc() of
 * exactly the size the call may touch, so memcheck reports any byte read or
 * written past it ("Invalid read/write") and any decision taken on bytes the
 * library never initialised ("Conditional jump ... uninitialised").
 *
 * Per length 0..MAX_LEN (CFB1: bit counts 0..MAX_LEN and whole bytes):
 *
 *   P --enc--> C --dec--> P'        out-of-place, P' must equal P
 *   P --enc in place--> C2          C2 must equal C
 *   C --dec in place--> P2          P2 must equal P
 *   P --stream enc (3 chunks)--> C3 C3 must equal C   (GCM: tag too)
 *   GCM: C with one tag bit flipped must fail with VC_ERR_AUTH and leave
 *        the output all zero.
 *
 * A direction the path cannot run (e.g. CFB128 encrypt on a VAES path) is
 * covered by the dispatcher's choice for that direction instead.
 *
 * stdout: "ok <calls> <checksum>"; the checksum (FNV-1a over every output)
 * lets the host compare a valgrind run with a native one.  Exit 0 ok,
 * 1 wrong result, 2 usage / set-up error.  --overrun makes one call claim
 * one byte more input than was allocated (the memcheck positive control).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vaescrypt.h"

static uint64_t fnv = 0xcbf29ce484222325ull;
static unsigned long calls;

static void mix(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        fnv ^= p[i];
        fnv *= 0x100000001b3ull;
    }
}

/* Deterministic bytes (xorshift64*): same inputs natively and under valgrind. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static void fill_random(uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        rng_state ^= rng_state >> 12;
        rng_state ^= rng_state << 25;
        rng_state ^= rng_state >> 27;
        p[i] = (uint8_t)((rng_state * 0x2545f4914f6cdd1dull) >> 56);
    }
}

/* malloc(0) may return NULL; the API allows NULL only for zero lengths, so a
 * one-byte block stands in (it is never touched for n == 0). */
static uint8_t *xmalloc(size_t n)
{
    uint8_t *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "vg-driver: out of memory\n");
        exit(2);
    }
    return p;
}

static uint8_t *xdup(const uint8_t *src, size_t n)
{
    uint8_t *p = xmalloc(n);
    if (n)
        memcpy(p, src, n);
    return p;
}

static int fail(const char *what, size_t len, int st)
{
    fprintf(stderr, "vg-driver: %s failed at length %zu (status %d: %s)\n", what, len, st,
            vc_status_message(st));
    return 1;
}

static int same(const uint8_t *a, const uint8_t *b, size_t n)
{
    return n == 0 || memcmp(a, b, n) == 0;
}

static int gcm_one(int impl, size_t len, int overrun)
{
    static const size_t tags[] = {16, 4, 8, 12, 13, 14, 15};
    size_t key_len = 16 + 8 * (len % 3), iv_len = len % 4 ? 1 + len % 64 : 12;
    size_t aad_len = (len * 7) % 61, tag_len = tags[len % 7];
    uint8_t *key = xmalloc(key_len), *iv = xmalloc(iv_len), *aad = xmalloc(aad_len);
    uint8_t *pt = xmalloc(len), *ct = xmalloc(len), *back = xmalloc(len);
    uint8_t *tag = xmalloc(tag_len), *tag2 = xmalloc(tag_len);
    vc_gcm_key *k = NULL, *kauto = NULL;
    vc_gcm_stream *s = NULL;
    int rc = 1, st;

    fill_random(key, key_len);
    fill_random(iv, iv_len);
    fill_random(aad, aad_len);
    fill_random(pt, len);
    if ((st = vc_gcm_key_new(&k, key, key_len, impl)) != VC_OK) {
        rc = fail("gcm key_new", len, st);
        goto out;
    }
    if ((st = vc_gcm_key_new(&kauto, key, key_len, VC_PATH_AUTO)) != VC_OK) {
        rc = fail("gcm key_new(auto)", len, st);
        goto out;
    }
    /* the forced path where it can run the direction, the dispatcher's otherwise */
    const vc_gcm_key *ke = vc_gcm_key_path(k, VC_DIR_ENCRYPT) >= 0 ? k : kauto;
    const vc_gcm_key *kd = vc_gcm_key_path(k, VC_DIR_DECRYPT) >= 0 ? k : kauto;

    calls++;
    st = vc_gcm_encrypt(ke, iv, iv_len, aad, aad_len, pt, ct, len + (overrun ? 1 : 0), tag,
                        tag_len);
    if (st != VC_OK) {
        rc = fail("gcm encrypt", len, st);
        goto out;
    }
    mix(ct, len);
    mix(tag, tag_len);
    calls++;
    if ((st = vc_gcm_decrypt(kd, iv, iv_len, aad, aad_len, ct, back, len, tag, tag_len)) != VC_OK
        || !same(back, pt, len)) {
        rc = fail("gcm decrypt round trip", len, st);
        goto out;
    }
    /* in place, both ways */
    uint8_t *buf = xdup(pt, len);
    calls += 2;
    st = vc_gcm_encrypt(ke, iv, iv_len, aad, aad_len, buf, buf, len, tag2, tag_len);
    int ok = st == VC_OK && same(buf, ct, len) && same(tag2, tag, tag_len);
    st = ok ? vc_gcm_decrypt(kd, iv, iv_len, aad, aad_len, buf, buf, len, tag, tag_len) : st;
    ok = ok && st == VC_OK && same(buf, pt, len);
    free(buf);
    if (!ok) {
        rc = fail("gcm in-place", len, st);
        goto out;
    }
    /* wrong tag: VC_ERR_AUTH and nothing released */
    memcpy(tag2, tag, tag_len);
    tag2[len % tag_len] ^= 0x01;
    memset(back, 0xa5, len);
    calls++;
    st = vc_gcm_decrypt(kd, iv, iv_len, aad, aad_len, ct, back, len, tag2, tag_len);
    for (size_t i = 0; i < len; i++)
        if (back[i])
            st = 1;
    if (st != VC_ERR_AUTH) {
        rc = fail("gcm wrong tag (must be VC_ERR_AUTH with zeroed output)", len, st);
        goto out;
    }
    /* stream encrypt: AAD in two pieces, data in three chunks */
    size_t c1 = len / 3, c2 = 2 * len / 3;
    memset(back, 0, len);
    calls += 6;
    if ((st = vc_gcm_stream_new(&s, ke, VC_DIR_ENCRYPT, iv, iv_len)) != VC_OK
        || (st = vc_gcm_stream_aad(s, aad, aad_len / 2)) != VC_OK
        || (st = vc_gcm_stream_aad(s, aad + aad_len / 2, aad_len - aad_len / 2)) != VC_OK
        || (st = vc_gcm_stream_update(s, pt, back, c1)) != VC_OK
        || (st = vc_gcm_stream_update(s, pt + c1, back + c1, c2 - c1)) != VC_OK
        || (st = vc_gcm_stream_update(s, pt + c2, back + c2, len - c2)) != VC_OK
        || (st = vc_gcm_stream_finish(s, tag2, tag_len)) != VC_OK || !same(back, ct, len)
        || !same(tag2, tag, tag_len)) {
        rc = fail("gcm stream", len, st);
        goto out;
    }
    rc = 0;
out:
    vc_gcm_stream_free(s);
    vc_gcm_key_free(k);
    vc_gcm_key_free(kauto);
    free(key), free(iv), free(aad), free(pt), free(ct), free(back), free(tag), free(tag2);
    return rc;
}

/* CFB: n is bytes (CFB128/CFB8) or bits (CFB1); nbytes the buffer size. */
static int cfb_one(int segment, int impl, size_t n, int overrun)
{
    size_t nbytes = segment == 1 ? (n + 7) / 8 : n;
    size_t key_len = 16 + 8 * (n % 3);
    uint8_t *key = xmalloc(key_len), *iv = xmalloc(16);
    uint8_t *pt = xmalloc(nbytes), *ct = xmalloc(nbytes), *back = xmalloc(nbytes);
    vc_cfb_key *k = NULL, *kauto = NULL;
    vc_cfb_stream *s = NULL;
    int rc = 1, st;

    fill_random(key, key_len);
    fill_random(iv, 16);
    fill_random(pt, nbytes);
    if (segment == 1 && n % 8) /* the result keeps the unused low bits zero */
        pt[nbytes - 1] &= (uint8_t)(0xff00u >> (n % 8));
    if ((st = vc_cfb_key_new(&k, key, key_len, segment, impl)) != VC_OK
        || (st = vc_cfb_key_new(&kauto, key, key_len, segment, VC_PATH_AUTO)) != VC_OK) {
        rc = fail("cfb key_new", n, st);
        goto out;
    }
    const vc_cfb_key *ke = vc_cfb_key_path(k, VC_DIR_ENCRYPT) >= 0 ? k : kauto;
    const vc_cfb_key *kd = vc_cfb_key_path(k, VC_DIR_DECRYPT) >= 0 ? k : kauto;
    size_t extra = overrun ? (segment == 1 ? 8 : 1) : 0;

    calls += 2;
    if ((st = vc_cfb_encrypt(ke, iv, pt, ct, n + extra)) != VC_OK
        || (st = vc_cfb_decrypt(kd, iv, ct, back, n)) != VC_OK || !same(back, pt, nbytes)) {
        rc = fail("cfb round trip", n, st);
        goto out;
    }
    mix(ct, nbytes);
    uint8_t *buf = xdup(pt, nbytes);
    calls += 2;
    st = vc_cfb_encrypt(ke, iv, buf, buf, n);
    int ok = st == VC_OK && same(buf, ct, nbytes);
    st = ok ? vc_cfb_decrypt(kd, iv, buf, buf, n) : st;
    ok = ok && st == VC_OK && same(buf, pt, nbytes);
    free(buf);
    if (!ok) {
        rc = fail("cfb in-place", n, st);
        goto out;
    }
    /* stream: three chunks; CFB1 cuts at whole bytes, the partial byte last */
    size_t unit = segment == 1 ? 8 : 1, whole = n / unit;
    size_t c1 = whole / 3, c2 = 2 * whole / 3;
    memset(back, 0, nbytes);
    calls += 4;
    if ((st = vc_cfb_stream_new(&s, ke, VC_DIR_ENCRYPT, iv)) != VC_OK
        || (st = vc_cfb_stream_update(s, pt, back, c1 * unit)) != VC_OK
        || (st = vc_cfb_stream_update(s, pt + c1, back + c1, (c2 - c1) * unit)) != VC_OK
        || (st = vc_cfb_stream_update(s, pt + c2, back + c2, n - c2 * unit)) != VC_OK
        || !same(back, ct, nbytes)) {
        rc = fail("cfb stream", n, st);
        goto out;
    }
    rc = 0;
out:
    vc_cfb_stream_free(s);
    vc_cfb_key_free(k);
    vc_cfb_key_free(kauto);
    free(key), free(iv), free(pt), free(ct), free(back);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: vg-driver gcm|cfb128|cfb8|cfb1 PATH [MAX_LEN] [--overrun]\n");
        return 2;
    }
    const char *mode = argv[1];
    int impl = vc_path_from_name(argv[2]);
    size_t max_len = 80;
    int overrun = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "--overrun") == 0)
            overrun = 1;
        else
            max_len = strtoul(argv[i], NULL, 10);
    }
    if (impl < 0) {
        fprintf(stderr, "vg-driver: unknown path %s\n", argv[2]);
        return 2;
    }
    int segment = strcmp(mode, "cfb128") == 0 ? 128 : strcmp(mode, "cfb8") == 0 ? 8
                  : strcmp(mode, "cfb1") == 0 ? 1 : 0;
    if (!segment && strcmp(mode, "gcm") != 0) {
        fprintf(stderr, "vg-driver: unknown mode %s\n", mode);
        return 2;
    }
    if (overrun) /* one deliberately out-of-bounds call, then stop */
        return segment ? cfb_one(segment, impl, 16, 1) : gcm_one(impl, 16, 1);
    for (size_t n = 0; n <= max_len; n++) {
        int rc = segment ? cfb_one(segment, impl, n, 0) : gcm_one(impl, n, 0);
        if (!rc && segment == 1)
            rc = cfb_one(segment, impl, 8 * n, 0); /* whole bytes as well */
        if (rc)
            return rc;
    }
    printf("ok %lu %016llx\n", calls, (unsigned long long)fnv);
    return 0;
}
