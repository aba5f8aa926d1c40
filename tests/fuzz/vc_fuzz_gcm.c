/*
 * vc_fuzz_gcm.c - libFuzzer differential harness for AES-GCM: every code
 * path the CPU can run (generic included) against OpenSSL's libcrypto.
 *
 * From one input: an AES key (128/192/256), an IV (12 bytes, or 1..64 for
 * the GHASH-derived J0), a tag length (4, 8, 12..16), AAD and data lengths
 * drawn to hit every tail (fuzz_common.h fz_len: up to 80 blocks of data, 8 of
 * AAD), split points, an output misalignment and a few style bits.  OpenSSL
 * computes the ciphertext and 16-byte tag once (a t-byte GCM tag is the
 * first t bytes of it).  Then, for every path, through the public API with
 * the path forced:
 *   always   one-shot encrypt; one-shot decrypt (the tag must verify); a
 *            decrypt with one tag bit flipped, one-shot or (style bit 2)
 *            streaming: VC_ERR_AUTH, the one-shot output all zero;
 *   one of   (style bits 0-1) streaming encrypt (AAD in 2 pieces, data in
 *            3); in-place encrypt (one-shot; streaming when bit 3 is set);
 *            streaming decrypt (in place when bit 3 is set); streaming
 *            encrypt in place and streaming decrypt.
 * Four or five passes per path instead of seven: every call style still
 * meets every path and size within a few executions, at ~1.5x the rate.
 * Every result must equal OpenSSL's byte for byte; any difference or
 * unexpected status prints what differed and aborts (a libFuzzer crash).
 * Outputs are malloc'd to exactly their size at the drawn offset, so a write
 * one byte past is in ASan's redzone.
 *
 * VC_FUZZ_TEETH (test build only): flip one byte of the widest path's
 * one-shot ciphertext before the comparison, so the test suite can see a
 * mismatch caught.
 */
#include <openssl/evp.h>

#include "fuzz_common.h"

/* 80 blocks: the avx512 tier's 32-block main loop (two 16-block batches per
 * reduction) twice, and every smaller remainder after it. */
#define MAX_DATA_BLOCKS 80
#define MAX_AAD_BLOCKS 8

/* key, IV, AAD and data each in a malloc'd block of exactly their size
 * (fz_buf): a read one byte past any of them is in ASan's redzone. */
typedef struct {
    fz_buf kb, ivb, aadb, datab;
    const uint8_t *key, *iv, *aad, *data;
    size_t key_len, iv_len, tag_len;
    unsigned style, off;
    size_t aad_len, aad_split;
    size_t len, split1, split2;
} gcm_case;

static const size_t tag_lengths[] = {16, 12, 13, 14, 15, 8, 4};

static void parse(const uint8_t *d, size_t n, gcm_case *c)
{
    static const size_t key_lengths[] = {16, 24, 32};
    fz_reader r = {d, n};
    const uint64_t seed = fz_seed(d, n);
    c->key_len = key_lengths[fz_u8(&r) % 3];
    const uint8_t ivsel = fz_u8(&r);
    c->iv_len = ivsel < 192 ? 12 : 1 + (size_t)(ivsel % 64);
    c->tag_len = tag_lengths[fz_u8(&r) % (sizeof tag_lengths / sizeof tag_lengths[0])];
    c->style = fz_u8(&r);
    c->off = fz_u8(&r) & 15;
    c->len = fz_len(&r, 16, MAX_DATA_BLOCKS);
    c->aad_len = fz_len(&r, 16, MAX_AAD_BLOCKS);
    const size_t s1 = (size_t)fz_u8(&r) << 8 | fz_u8(&r);
    const size_t s2 = (size_t)fz_u8(&r) << 8 | fz_u8(&r);
    const size_t sa = fz_u8(&r);
    size_t a = s1 % (c->len + 1), b = s2 % (c->len + 1);
    c->split1 = a < b ? a : b;
    c->split2 = a < b ? b : a;
    c->aad_split = sa % (c->aad_len + 1);
    c->kb = fz_buf_new(c->key_len, 0);
    c->ivb = fz_buf_new(c->iv_len, 0);
    c->aadb = fz_buf_new(c->aad_len, 0);
    c->datab = fz_buf_new(c->len, 0);
    fz_fill(&r, c->kb.p, c->key_len, seed);
    fz_fill(&r, c->ivb.p, c->iv_len, seed ^ 1);
    fz_fill(&r, c->aadb.p, c->aad_len, seed ^ 2);
    fz_fill(&r, c->datab.p, c->len, seed ^ 3);
    c->key = c->kb.p;
    c->iv = c->ivb.p;
    c->aad = c->aadb.p;
    c->data = c->datab.p;
}

static void case_free(gcm_case *c)
{
    fz_buf_free(&c->kb);
    fz_buf_free(&c->ivb);
    fz_buf_free(&c->aadb);
    fz_buf_free(&c->datab);
}

/* ---------------------------------------------------------- reference -- */

static EVP_CIPHER_CTX *ossl_ctx;
static EVP_CIPHER *ossl_gcm[3]; /* AES-128/192/256-GCM, fetched once */

static void ossl_fail(const char *what)
{
    fprintf(stderr, "%s: OpenSSL reference failed: %s\n", fz_name, what);
    abort();
}

/* ct (len bytes) and the full 16-byte tag of the case, by OpenSSL. */
static void reference(const gcm_case *c, uint8_t *ct, uint8_t tag[16])
{
    EVP_CIPHER *ciph = ossl_gcm[(c->key_len - 16) / 8];
    int outl = 0;
    uint8_t fin[16];
    if (!EVP_EncryptInit_ex(ossl_ctx, ciph, NULL, NULL, NULL) ||
        !EVP_CIPHER_CTX_ctrl(ossl_ctx, EVP_CTRL_GCM_SET_IVLEN, (int)c->iv_len, NULL) ||
        !EVP_EncryptInit_ex(ossl_ctx, NULL, NULL, c->key, c->iv))
        ossl_fail("init");
    if (c->aad_len && !EVP_EncryptUpdate(ossl_ctx, NULL, &outl, c->aad, (int)c->aad_len))
        ossl_fail("aad");
    if (c->len && (!EVP_EncryptUpdate(ossl_ctx, ct, &outl, c->data, (int)c->len) ||
                   (size_t)outl != c->len))
        ossl_fail("update");
    if (!EVP_EncryptFinal_ex(ossl_ctx, fin, &outl) ||
        !EVP_CIPHER_CTX_ctrl(ossl_ctx, EVP_CTRL_GCM_GET_TAG, 16, tag))
        ossl_fail("final");
}

/* -------------------------------------------------------------- paths -- */

static fz_paths enc_paths, dec_paths;

/* One key per path for both directions (made on first use: a path may be
 * listed for one direction only, and vc_gcm_key_new accepts it if either can
 * run); the key setup is ~10 % of an execution, so not twice. */
static vc_gcm_key *key_for(const gcm_case *c, vc_gcm_key *keys[VC_PATH_COUNT], int path, int dir)
{
    if (!keys[path])
        fz_ok(vc_gcm_key_new(&keys[path], c->key, c->key_len, path), "key_new", VC_MODE_GCM, path,
              dir, c->len);
    if (vc_gcm_key_path(keys[path], dir) != path)
        fz_fail("key_path", VC_MODE_GCM, path, dir, vc_gcm_key_path(keys[path], dir), c->len);
    return keys[path];
}

/* Stream in out of the case through a new stream: AAD in 2 pieces, data in
 * 3; then finish with tag (written when encrypting, checked when not).
 * Returns the finish status. */
static int stream(const gcm_case *c, const vc_gcm_key *k, int path, int dir, const uint8_t *in,
                  uint8_t *out, uint8_t *tag)
{
    const int M = VC_MODE_GCM;
    const size_t cut[4] = {0, c->split1, c->split2, c->len};
    vc_gcm_stream *s = NULL;
    fz_ok(vc_gcm_stream_new(&s, k, dir, c->iv, c->iv_len), "stream_new", M, path, dir, c->len);
    fz_ok(vc_gcm_stream_aad(s, c->aad, c->aad_split), "stream aad 1", M, path, dir, c->len);
    fz_ok(vc_gcm_stream_aad(s, c->aad + c->aad_split, c->aad_len - c->aad_split), "stream aad 2",
          M, path, dir, c->len);
    for (int i = 0; i < 3; i++)
        fz_ok(vc_gcm_stream_update(s, in + cut[i], out + cut[i], cut[i + 1] - cut[i]),
              "stream update", M, path, dir, c->len);
    const int st = vc_gcm_stream_finish(s, tag, c->tag_len);
    vc_gcm_stream_free(s);
    return st;
}

/* The streaming / in-place variants (style bits 0-1 pick one, bit 3 says
 * in place), each a full pass compared with OpenSSL. */
static void enc_stream(const gcm_case *c, const vc_gcm_key *k, int p, const uint8_t *ref,
                       const uint8_t *ref_tag, uint8_t *out, int in_place)
{
    const int M = VC_MODE_GCM, D = VC_DIR_ENCRYPT;
    uint8_t tag[16];
    memset(tag, 0xa5, sizeof tag);
    if (in_place) {
        if (c->len)
            memcpy(out, c->data, c->len);
        fz_ok(stream(c, k, p, D, out, out, tag), "in-place stream finish", M, p, D, c->len);
    } else {
        memset(out, 0, c->len);
        fz_ok(stream(c, k, p, D, c->data, out, tag), "stream finish", M, p, D, c->len);
    }
    fz_same(in_place ? "in-place stream ciphertext" : "stream ciphertext", M, p, D, out, ref,
            c->len);
    fz_same(in_place ? "in-place stream tag" : "stream tag", M, p, D, tag, ref_tag, c->tag_len);
}

static void enc_in_place(const gcm_case *c, const vc_gcm_key *k, int p, const uint8_t *ref,
                         const uint8_t *ref_tag, uint8_t *out)
{
    const int M = VC_MODE_GCM, D = VC_DIR_ENCRYPT;
    uint8_t tag[16];
    if (c->len)
        memcpy(out, c->data, c->len);
    fz_ok(vc_gcm_encrypt(k, c->iv, c->iv_len, c->aad, c->aad_len, out, out, c->len, tag,
                         c->tag_len),
          "in-place encrypt", M, p, D, c->len);
    fz_same("in-place ciphertext", M, p, D, out, ref, c->len);
    fz_same("in-place tag", M, p, D, tag, ref_tag, c->tag_len);
}

static void dec_stream(const gcm_case *c, const vc_gcm_key *k, int p, const uint8_t *ref,
                       const uint8_t *ref_tag, uint8_t *out, int in_place)
{
    const int M = VC_MODE_GCM, D = VC_DIR_DECRYPT;
    uint8_t tag[16];
    memcpy(tag, ref_tag, 16);
    if (in_place) {
        if (c->len)
            memcpy(out, ref, c->len);
        fz_ok(stream(c, k, p, D, out, out, tag), "in-place stream (tag must verify)", M, p, D,
              c->len);
    } else {
        memset(out, 0, c->len);
        fz_ok(stream(c, k, p, D, ref, out, tag), "stream (tag must verify)", M, p, D, c->len);
    }
    fz_same("stream plaintext", M, p, D, out, c->data, c->len);
}

static void fuzz_encrypt(const gcm_case *c, const uint8_t *ref, const uint8_t *ref_tag,
                         uint8_t *out, vc_gcm_key *keys[VC_PATH_COUNT])
{
    const int M = VC_MODE_GCM, D = VC_DIR_ENCRYPT;
    const size_t n = c->len;
    const int in_place = (c->style >> 3) & 1;
    uint8_t tag[16];
    for (int i = 0; i < enc_paths.n; i++) {
        const int p = enc_paths.path[i];
        const vc_gcm_key *k = key_for(c, keys, p, D);
        memset(tag, 0xa5, sizeof tag);
        fz_ok(vc_gcm_encrypt(k, c->iv, c->iv_len, c->aad, c->aad_len, c->data, out, n, tag,
                             c->tag_len),
              "encrypt", M, p, D, n);
#ifdef VC_FUZZ_TEETH
        if (i == 0 && n) /* the widest path */
            out[n / 2] ^= 0x01;
#endif
        fz_same("encrypt ciphertext", M, p, D, out, ref, n);
        fz_same("encrypt tag", M, p, D, tag, ref_tag, c->tag_len);
        switch (c->style & 3) {
        case 0: enc_stream(c, k, p, ref, ref_tag, out, 0); break;
        case 1:
            if (in_place)
                enc_stream(c, k, p, ref, ref_tag, out, 1);
            else
                enc_in_place(c, k, p, ref, ref_tag, out);
            break;
        case 3: enc_stream(c, k, p, ref, ref_tag, out, 1); break;
        default: break; /* 2: the decrypt side streams */
        }
    }
}

static void fuzz_decrypt(const gcm_case *c, const uint8_t *ref, const uint8_t *ref_tag,
                         uint8_t *out, vc_gcm_key *keys[VC_PATH_COUNT])
{
    const int M = VC_MODE_GCM, D = VC_DIR_DECRYPT;
    const size_t n = c->len;
    uint8_t tag[16], bad_tag[16];
    memcpy(bad_tag, ref_tag, 16);
    bad_tag[(n + c->aad_len) % c->tag_len] ^= (uint8_t)(1u << (c->style >> 5));
    for (int i = 0; i < dec_paths.n; i++) {
        const int p = dec_paths.path[i];
        const vc_gcm_key *k = key_for(c, keys, p, D);
        fz_ok(vc_gcm_decrypt(k, c->iv, c->iv_len, c->aad, c->aad_len, ref, out, n, ref_tag,
                             c->tag_len),
              "decrypt (tag must verify)", M, p, D, n);
        fz_same("decrypt plaintext", M, p, D, out, c->data, n);
        if ((c->style & 3) >= 2)
            dec_stream(c, k, p, ref, ref_tag, out, (c->style >> 3) & 1);

        /* a flipped tag bit: refused, and the one-shot releases nothing */
        int st;
        if (c->style & 4) {
            memcpy(tag, bad_tag, 16);
            st = stream(c, k, p, D, ref, out, tag);
            if (st != VC_ERR_AUTH)
                fz_fail("stream accepted a forged tag", M, p, D, st, n);
        } else {
            memset(out, 0x5a, n);
            st = vc_gcm_decrypt(k, c->iv, c->iv_len, c->aad, c->aad_len, ref, out, n, bad_tag,
                                c->tag_len);
            if (st != VC_ERR_AUTH)
                fz_fail("decrypt accepted a forged tag", M, p, D, st, n);
            for (size_t j = 0; j < n; j++)
                if (out[j])
                    fz_fail("decrypt released plaintext on a bad tag", M, p, D, st, n);
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    fz_start("vc_fuzz_gcm");
    static const char *const names[3] = {"AES-128-GCM", "AES-192-GCM", "AES-256-GCM"};
    ossl_ctx = EVP_CIPHER_CTX_new();
    for (int i = 0; i < 3; i++)
        if (!(ossl_gcm[i] = EVP_CIPHER_fetch(NULL, names[i], NULL)))
            ossl_fail(names[i]);
    if (!ossl_ctx)
        ossl_fail("EVP_CIPHER_CTX_new");
    enc_paths = fz_paths_for(VC_MODE_GCM, VC_DIR_ENCRYPT);
    dec_paths = fz_paths_for(VC_MODE_GCM, VC_DIR_DECRYPT);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    gcm_case c;
    fz_enter();
    parse(data, size, &c);
    fz_buf ref = fz_buf_new(c.len, c.off), out = fz_buf_new(c.len, c.off);
    uint8_t ref_tag[16];
    reference(&c, ref.p, ref_tag);
    vc_gcm_key *keys[VC_PATH_COUNT] = {0};
    fuzz_encrypt(&c, ref.p, ref_tag, out.p, keys);
    fuzz_decrypt(&c, ref.p, ref_tag, out.p, keys);
    for (int p = 0; p < VC_PATH_COUNT; p++)
        vc_gcm_key_free(keys[p]); /* NULL is fine */
    fz_buf_free(&ref);
    fz_buf_free(&out);
    case_free(&c);
    fz_leave();
    return 0;
}
