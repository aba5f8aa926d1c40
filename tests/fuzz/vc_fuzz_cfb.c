/*
 * vc_fuzz_cfb.c - libFuzzer differential harness for AES-CFB (CFB128, CFB8,
 * CFB1): every code path the CPU can run (generic included) against OpenSSL's
 * libcrypto.
 *
 * Each input picks one segment size (the first byte), a key (128/192/256), a
 * 16-byte IV, a length drawn to hit every tail (fuzz_common.h fz_len):
 *   CFB128  bytes, up to 64 blocks + 0..15 (the wide tiers' parallel decrypt
 *           loops and their remainders, the partial final segment);
 *   CFB8    bytes, 0..79 (every tier is one AES call per byte);
 *   CFB1    BITS, 0..103: whole bytes and a final byte ending at any bit
 *           (one AES call per bit, so kept short);
 * two split points, an output misalignment and style bits.  OpenSSL encrypts
 * and decrypts the data once each (the data is also taken as arbitrary
 * ciphertext; CFB1 with EVP_CIPH_FLAG_LENGTH_BITS, so lengths are in bits).
 * Then for every path, both directions: one-shot, and streaming in three
 * pieces (CFB1: whole bytes, the partial byte last) or, by a style bit,
 * in place.  Everything must equal OpenSSL byte for byte (a CFB1 output's
 * unused low bits are zero); any difference or unexpected status aborts.
 * Inputs and outputs are malloc'd to exactly their size (ASan redzones).
 *
 * VC_FUZZ_TEETH (test build only): flip one byte of the generic path's
 * one-shot output, so the test suite can see that the generic path -- no
 * longer compared with itself -- is caught by the reference.
 */
#include <openssl/evp.h>

#include "fuzz_common.h"

static const int segment_bits[] = {[VC_MODE_CFB128] = 128, [VC_MODE_CFB8] = 8, [VC_MODE_CFB1] = 1};

typedef struct {
    int mode;
    fz_buf kb, ivb, inb;
    size_t key_len;
    unsigned style, off;
    size_t nbytes, units;  /* units: bytes, or bits for CFB1 */
    size_t split1, split2; /* byte offsets, split1 <= split2 <= nbytes */
} cfb_case;

static void parse(const uint8_t *d, size_t n, cfb_case *c)
{
    static const size_t key_lengths[] = {16, 24, 32};
    static const int modes[] = {VC_MODE_CFB128, VC_MODE_CFB8, VC_MODE_CFB1};
    fz_reader r = {d, n};
    const uint64_t seed = fz_seed(d, n);
    c->mode = modes[fz_u8(&r) % 3];
    c->key_len = key_lengths[fz_u8(&r) % 3];
    c->style = fz_u8(&r);
    c->off = fz_u8(&r) & 15;
    switch (c->mode) {
    case VC_MODE_CFB128: c->units = fz_len(&r, 16, 64); break;
    case VC_MODE_CFB8: c->units = fz_len(&r, 16, 4); break;
    default: c->units = fz_len(&r, 8, 12); break;
    }
    c->nbytes = c->mode == VC_MODE_CFB1 ? (c->units + 7) / 8 : c->units;
    /* CFB1 streams take whole bytes before the last piece */
    const size_t whole = c->mode == VC_MODE_CFB1 ? c->units / 8 : c->nbytes;
    const size_t a = fz_u8(&r) % (whole + 1), b = fz_u8(&r) % (whole + 1);
    c->split1 = a < b ? a : b;
    c->split2 = a < b ? b : a;
    c->kb = fz_buf_new(c->key_len, 0);
    c->ivb = fz_buf_new(16, 0);
    c->inb = fz_buf_new(c->nbytes, 0);
    fz_fill(&r, c->kb.p, c->key_len, seed);
    fz_fill(&r, c->ivb.p, 16, seed ^ 1);
    fz_fill(&r, c->inb.p, c->nbytes, seed ^ 2);
    /* CFB1: the unused low bits of a partial last byte are cleared, so
     * outputs compare byte for byte (they are zero in every output). */
    if (c->mode == VC_MODE_CFB1 && c->units % 8)
        c->inb.p[c->nbytes - 1] &= (uint8_t)(0xff00u >> (c->units % 8));
}

static void case_free(cfb_case *c)
{
    fz_buf_free(&c->kb);
    fz_buf_free(&c->ivb);
    fz_buf_free(&c->inb);
}

/* ---------------------------------------------------------- reference -- */

static EVP_CIPHER_CTX *ossl_ctx;
static EVP_CIPHER *ossl_cfb[VC_MODE_COUNT][3]; /* [mode][key size], fetched once */

static void ossl_fail(const char *what)
{
    fprintf(stderr, "%s: OpenSSL reference failed: %s\n", fz_name, what);
    abort();
}

/*
 * OpenSSL is not instrumented, so it writes into a scratch buffer with a
 * guard band that is checked afterwards, and the result is copied out.
 * EVP_CIPH_FLAG_LENGTH_BITS reaches OpenSSL 3's provider only when the flag
 * CHANGES (EVP_CIPHER_CTX_set_flags / _clear_flags), and re-initialising the
 * context for another cipher makes a new provider context without it: so it
 * is cleared and set again after every init (a stale flag made OpenSSL take
 * a bit count as bytes and write 8x past the output).
 */
#define GUARD 64
static uint8_t scratch[64 * 16 + 16 + GUARD];

static void reference(const cfb_case *c, int dir, uint8_t *out)
{
    int outl = 0;
    if (!EVP_CipherInit_ex(ossl_ctx, ossl_cfb[c->mode][(c->key_len - 16) / 8], NULL, c->kb.p,
                           c->ivb.p, dir == VC_DIR_ENCRYPT))
        ossl_fail("init");
    EVP_CIPHER_CTX_clear_flags(ossl_ctx, EVP_CIPH_FLAG_LENGTH_BITS);
    if (c->mode == VC_MODE_CFB1)
        EVP_CIPHER_CTX_set_flags(ossl_ctx, EVP_CIPH_FLAG_LENGTH_BITS); /* inl counts bits */
    /* OpenSSL's CFB1 sets output bits one at a time and leaves the others:
     * zeroed first, the unused low bits of a partial byte stay zero. */
    memset(scratch, 0, c->nbytes);
    memset(scratch + c->nbytes, 0xee, GUARD);
    if (c->units && !EVP_CipherUpdate(ossl_ctx, scratch, &outl, c->inb.p, (int)c->units))
        ossl_fail("update");
    if (!EVP_CipherFinal_ex(ossl_ctx, scratch + c->nbytes, &outl) || outl != 0)
        ossl_fail("final");
    for (size_t i = 0; i < GUARD; i++)
        if (scratch[c->nbytes + i] != 0xee)
            ossl_fail("wrote past the output (a bit count taken as bytes?)");
    if (c->nbytes)
        memcpy(out, scratch, c->nbytes);
}

/* -------------------------------------------------------------- paths -- */

static fz_paths paths[VC_MODE_COUNT][VC_DIR_COUNT];

static int run(const vc_cfb_key *k, int dir, const uint8_t *iv, const uint8_t *in, uint8_t *out,
               size_t units)
{
    return dir == VC_DIR_ENCRYPT ? vc_cfb_encrypt(k, iv, in, out, units)
                                 : vc_cfb_decrypt(k, iv, in, out, units);
}

/* Three pieces [0,s1) [s1,s2) [s2,end); CFB1's last may end inside a byte. */
static void stream(const cfb_case *c, const vc_cfb_key *k, int path, int dir, const uint8_t *in,
                   uint8_t *out)
{
    const size_t scale = c->mode == VC_MODE_CFB1 ? 8 : 1;
    const size_t cut[4] = {0, c->split1, c->split2, c->nbytes};
    vc_cfb_stream *s = NULL;
    fz_ok(vc_cfb_stream_new(&s, k, dir, c->ivb.p), "stream_new", c->mode, path, dir, c->units);
    for (int i = 0; i < 3; i++) {
        const size_t u = i == 2 ? c->units - cut[2] * scale : (cut[i + 1] - cut[i]) * scale;
        fz_ok(vc_cfb_stream_update(s, in + cut[i], out + cut[i], u), "stream update", c->mode,
              path, dir, c->units);
    }
    vc_cfb_stream_free(s);
}

/* One key per path, used for both directions (a path may be listed for one
 * direction only: vc_cfb_key_new accepts it if either can run). */
static vc_cfb_key *key_for(const cfb_case *c, int p)
{
    vc_cfb_key *k = NULL;
    fz_ok(vc_cfb_key_new(&k, c->kb.p, c->key_len, segment_bits[c->mode], p), "key_new", c->mode,
          p, 0, c->units);
    return k;
}

static void fuzz_dir(const cfb_case *c, int dir, const uint8_t *ref, uint8_t *out,
                     vc_cfb_key *keys[VC_PATH_COUNT])
{
    const int m = c->mode;
    const fz_paths *ps = &paths[m][dir];
    for (int i = 0; i < ps->n; i++) {
        const int p = ps->path[i];
        if (!keys[p])
            keys[p] = key_for(c, p);
        const vc_cfb_key *k = keys[p];
        if (vc_cfb_key_path(k, dir) != p)
            fz_fail("key_path", m, p, dir, vc_cfb_key_path(k, dir), c->units);
        memset(out, 0xa5, c->nbytes);
        fz_ok(run(k, dir, c->ivb.p, c->inb.p, out, c->units), "one-shot", m, p, dir, c->units);
#ifdef VC_FUZZ_TEETH
        if (p == VC_PATH_GENERIC && c->nbytes)
            out[c->nbytes / 2] ^= 0x01;
#endif
        fz_same("one-shot", m, p, dir, out, ref, c->nbytes);
        if (c->style & (1u << dir)) {
            if (c->nbytes)
                memcpy(out, c->inb.p, c->nbytes);
            fz_ok(run(k, dir, c->ivb.p, out, out, c->units), "in-place", m, p, dir, c->units);
            fz_same("in-place", m, p, dir, out, ref, c->nbytes);
        } else {
            memset(out, 0xa5, c->nbytes);
            stream(c, k, p, dir, c->inb.p, out);
            fz_same("stream", m, p, dir, out, ref, c->nbytes);
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_start("vc_fuzz_cfb");
    static const char *const suffix[VC_MODE_COUNT] = {
        [VC_MODE_CFB128] = "CFB", [VC_MODE_CFB8] = "CFB8", [VC_MODE_CFB1] = "CFB1"};
    if (!(ossl_ctx = EVP_CIPHER_CTX_new()))
        ossl_fail("EVP_CIPHER_CTX_new");
    for (int m = VC_MODE_CFB128; m <= VC_MODE_CFB1; m++) {
        for (int ks = 0; ks < 3; ks++) {
            char name[32];
            snprintf(name, sizeof name, "AES-%d-%s", 128 + 64 * ks, suffix[m]);
            if (!(ossl_cfb[m][ks] = EVP_CIPHER_fetch(NULL, name, NULL)))
                ossl_fail(name);
        }
        for (int d = 0; d < VC_DIR_COUNT; d++)
            paths[m][d] = fz_paths_for(m, d);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cfb_case c;
    fz_enter();
    parse(data, size, &c);
    fz_buf ref = fz_buf_new(c.nbytes, c.off), out = fz_buf_new(c.nbytes, c.off);
    vc_cfb_key *keys[VC_PATH_COUNT] = {0};
    for (int dir = 0; dir < VC_DIR_COUNT; dir++) {
        reference(&c, dir, ref.p);
        fuzz_dir(&c, dir, ref.p, out.p, keys);
    }
    for (int p = 0; p < VC_PATH_COUNT; p++)
        vc_cfb_key_free(keys[p]); /* NULL is fine */
    fz_buf_free(&ref);
    fz_buf_free(&out);
    case_free(&c);
    fz_leave();
    return 0;
}
