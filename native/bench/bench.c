/*
 * bench.c - C-loop throughput measurements (see vc_bench.h).
 *
 * Four things are timed the same way, so their ratios mean something:
 *   - our one-shot public API (what an application calls),
 *   - OpenSSL's EVP interface, loaded with dlopen("libcrypto.so.3") so the
 *     library never links against OpenSSL (absent -> "unavailable"),
 *   - the "roof": a bare zmm VAES CTR loop with no GHASH and no front-end,
 *   - the "floor": the roof plus the carry-less multiplies GHASH needs,
 *     the most any GCM path could approach where the two share ports.
 * Each point is calibrated so one batch lasts ~seconds/5; five batches run
 * and the fastest is kept (least disturbed by the other core's load).
 * Time is the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), not wall
 * time: on a small shared machine a batch that loses the CPU to another
 * process for a while is not charged for it, so the competitors, measured
 * one after the other, are compared on the same footing.
 */
#define _POSIX_C_SOURCE 200809L

#include <dlfcn.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "internal.h"
#include "vc_bench.h"

#define VC_BENCH_BATCHES 5

typedef int (*vc_bench_op)(void *ctx);

static double vc_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Returns the best rate in operations per second, or a negative status. */
static double vc_bench_run(vc_bench_op op, void *ctx, double seconds)
{
    int st = op(ctx); /* warm-up, and the error check */
    if (st < 0)
        return st;
    if (!(seconds > 0))
        seconds = 0.2;
    const double batch_s = seconds / VC_BENCH_BATCHES;
    uint64_t n = 1;
    double el;
    for (;;) { /* calibrate */
        const double t0 = vc_now();
        for (uint64_t i = 0; i < n; i++)
            op(ctx);
        el = vc_now() - t0;
        if (el >= batch_s / 4 || n >= ((uint64_t)1 << 40))
            break;
        n *= el > 0 ? (uint64_t)(batch_s / 4 / el) + 2 : 16;
    }
    n = (uint64_t)((double)n * batch_s / (el > 0 ? el : 1e-9)) + 1;
    double best = 0;
    for (int b = 0; b < VC_BENCH_BATCHES; b++) {
        const double t0 = vc_now();
        for (uint64_t i = 0; i < n; i++)
            op(ctx);
        el = vc_now() - t0;
        const double rate = (double)n / (el > 0 ? el : 1e-9);
        if (rate > best)
            best = rate;
    }
    return best;
}

typedef struct vc_bench_ctx {
    int mode, dir;
    size_t size;
    uint8_t *in, *out;
    uint8_t iv[16], aad[16], tag[16];
    vc_gcm_key *gk;
    vc_cfb_key *ck;
    /* OpenSSL */
    void *evp;
    int (*init)(void *, const void *, void *, const uint8_t *, const uint8_t *);
    int (*update)(void *, uint8_t *, int *, const uint8_t *, int);
    int (*final)(void *, uint8_t *, int *);
    int (*ctrl)(void *, int, int, void *);
    /* key set-up */
    const uint8_t *key;
    unsigned key_bits;
    int path;
} vc_bench_ctx;

static int vc_bench_alloc(vc_bench_ctx *c, size_t size)
{
    const size_t cap = (size + 63) & ~(size_t)63;
    c->size = size;
    c->in = aligned_alloc(64, cap ? cap : 64);
    c->out = aligned_alloc(64, cap ? cap : 64);
    if (!c->in || !c->out)
        return VC_ERR_NOMEM;
    for (size_t i = 0; i < size; i++)
        c->in[i] = (uint8_t)(i * 131u + 7u);
    for (int i = 0; i < 16; i++) {
        c->iv[i] = (uint8_t)(0xa0 + i);
        c->aad[i] = (uint8_t)(0x30 + i);
    }
    return VC_OK;
}

static void vc_bench_release(vc_bench_ctx *c)
{
    free(c->in);
    free(c->out);
}

static const uint8_t vc_bench_key[32] = {0x60, 0x3d, 0xeb, 0x10, 0x15, 0xca, 0x71, 0xbe,
                                         0x2b, 0x73, 0xae, 0xf0, 0x85, 0x7d, 0x77, 0x81,
                                         0x1f, 0x35, 0x2c, 0x07, 0x3b, 0x61, 0x08, 0xd7,
                                         0x2d, 0x98, 0x10, 0xa3, 0x09, 0x14, 0xdf, 0xf4};

static int vc_bench_valid(int mode, int dir, unsigned key_bits)
{
    return mode >= 0 && mode < VC_MODE_COUNT && dir >= 0 && dir < VC_DIR_COUNT &&
           (key_bits == 128 || key_bits == 192 || key_bits == 256);
}

/* ------------------------------------------------------------ library -- */

static int vc_op_lib(void *p)
{
    vc_bench_ctx *c = p;
    if (c->mode == VC_MODE_GCM)
        return c->dir == VC_DIR_ENCRYPT
                   ? vc_gcm_encrypt(c->gk, c->iv, 12, c->aad, 16, c->in, c->out, c->size, c->tag, 16)
                   : vc_gcm_decrypt(c->gk, c->iv, 12, c->aad, 16, c->in, c->out, c->size, c->tag, 16);
    const size_t len = c->mode == VC_MODE_CFB1 ? 8 * c->size : c->size;
    return c->dir == VC_DIR_ENCRYPT ? vc_cfb_encrypt(c->ck, c->iv, c->in, c->out, len)
                                    : vc_cfb_decrypt(c->ck, c->iv, c->in, c->out, len);
}

double vc_bench_lib(int mode, int dir, int path, unsigned key_bits, size_t size, double seconds)
{
    if (!vc_bench_valid(mode, dir, key_bits))
        return VC_ERR_ARGUMENT;
    vc_bench_ctx c = {.mode = mode, .dir = dir};
    int st = vc_bench_alloc(&c, size);
    double r = st;
    if (st == VC_OK && mode == VC_MODE_GCM) {
        st = vc_gcm_key_new(&c.gk, vc_bench_key, key_bits / 8, path);
        /* decryption needs a valid tag: encrypt once, decrypt that */
        if (st == VC_OK && dir == VC_DIR_DECRYPT) {
            st = vc_gcm_encrypt(c.gk, c.iv, 12, c.aad, 16, c.in, c.out, size, c.tag, 16);
            memcpy(c.in, c.out, size);
        }
    } else if (st == VC_OK) {
        const int seg = mode == VC_MODE_CFB128 ? 128 : mode == VC_MODE_CFB8 ? 8 : 1;
        st = vc_cfb_key_new(&c.ck, vc_bench_key, key_bits / 8, seg, path);
    }
    if (st == VC_OK) {
        const double ops = vc_bench_run(vc_op_lib, &c, seconds);
        r = ops < 0 ? ops : ops * (double)size / 1e6;
    } else {
        r = st;
    }
    vc_gcm_key_free(c.gk);
    vc_cfb_key_free(c.ck);
    vc_bench_release(&c);
    return r;
}

static int vc_op_keysetup(void *p)
{
    vc_bench_ctx *c = p;
    int st;
    if (c->mode == VC_MODE_GCM) {
        vc_gcm_key *k = NULL;
        st = vc_gcm_key_new(&k, c->key, c->key_bits / 8, c->path);
        vc_gcm_key_free(k);
    } else {
        vc_cfb_key *k = NULL;
        const int seg = c->mode == VC_MODE_CFB128 ? 128 : c->mode == VC_MODE_CFB8 ? 8 : 1;
        st = vc_cfb_key_new(&k, c->key, c->key_bits / 8, seg, c->path);
        vc_cfb_key_free(k);
    }
    return st;
}

double vc_bench_keysetup(int mode, int path, unsigned key_bits, double seconds)
{
    if (!vc_bench_valid(mode, VC_DIR_ENCRYPT, key_bits))
        return VC_ERR_ARGUMENT;
    vc_bench_ctx c = {.mode = mode, .key = vc_bench_key, .key_bits = key_bits, .path = path};
    const double ops = vc_bench_run(vc_op_keysetup, &c, seconds);
    return ops < 0 ? ops : 1e9 / ops;
}

/* ------------------------------------------------------------ OpenSSL -- */

/* The few EVP entry points we use, resolved once. */
static struct {
    int tried;
    void *h;
    void *(*ctx_new)(void);
    void (*ctx_free)(void *);
    void *(*fetch)(void *, const char *, const char *);
    void (*cipher_free)(void *);
    int (*enc_init)(void *, const void *, void *, const uint8_t *, const uint8_t *);
    int (*dec_init)(void *, const void *, void *, const uint8_t *, const uint8_t *);
    int (*enc_update)(void *, uint8_t *, int *, const uint8_t *, int);
    int (*dec_update)(void *, uint8_t *, int *, const uint8_t *, int);
    int (*enc_final)(void *, uint8_t *, int *);
    int (*dec_final)(void *, uint8_t *, int *);
    int (*ctrl)(void *, int, int, void *);
    const char *(*version)(int);
} vc_ossl;

#define VC_EVP_CTRL_AEAD_GET_TAG 0x10
#define VC_EVP_CTRL_AEAD_SET_TAG 0x11

static int vc_ossl_load(void)
{
    if (vc_ossl.tried)
        return vc_ossl.h != NULL;
    vc_ossl.tried = 1;
    void *h = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
    if (!h)
        return 0;
#define VC_SYM(field, name)                                                                        \
    do {                                                                                           \
        void *s_ = dlsym(h, name);                                                                 \
        if (!s_) {                                                                                 \
            dlclose(h);                                                                            \
            return 0;                                                                              \
        }                                                                                          \
        memcpy(&vc_ossl.field, &s_, sizeof s_);                                                    \
    } while (0)
    VC_SYM(ctx_new, "EVP_CIPHER_CTX_new");
    VC_SYM(ctx_free, "EVP_CIPHER_CTX_free");
    VC_SYM(fetch, "EVP_CIPHER_fetch");
    VC_SYM(cipher_free, "EVP_CIPHER_free");
    VC_SYM(enc_init, "EVP_EncryptInit_ex");
    VC_SYM(dec_init, "EVP_DecryptInit_ex");
    VC_SYM(enc_update, "EVP_EncryptUpdate");
    VC_SYM(dec_update, "EVP_DecryptUpdate");
    VC_SYM(enc_final, "EVP_EncryptFinal_ex");
    VC_SYM(dec_final, "EVP_DecryptFinal_ex");
    VC_SYM(ctrl, "EVP_CIPHER_CTX_ctrl");
    VC_SYM(version, "OpenSSL_version");
#undef VC_SYM
    vc_ossl.h = h;
    return 1;
}

const char *vc_bench_openssl_version(void)
{
    return vc_ossl_load() ? vc_ossl.version(0 /* OPENSSL_VERSION */) : NULL;
}

static int vc_op_ossl(void *p)
{
    vc_bench_ctx *c = p;
    int n = 0, m = 0;
    const int len = (int)c->size;
    if (c->mode == VC_MODE_GCM && c->dir == VC_DIR_DECRYPT) {
        if (c->init(c->evp, NULL, NULL, NULL, c->iv) != 1 ||
            c->ctrl(c->evp, VC_EVP_CTRL_AEAD_SET_TAG, 16, c->tag) != 1 ||
            c->update(c->evp, NULL, &n, c->aad, 16) != 1 ||
            c->update(c->evp, c->out, &n, c->in, len) != 1 || c->final(c->evp, c->out + n, &m) != 1)
            return VC_ERR_AUTH;
        return VC_OK;
    }
    if (c->init(c->evp, NULL, NULL, NULL, c->iv) != 1)
        return -1;
    if (c->mode == VC_MODE_GCM && c->update(c->evp, NULL, &n, c->aad, 16) != 1)
        return -1;
    if (c->update(c->evp, c->out, &n, c->in, len) != 1 || c->final(c->evp, c->out + n, &m) != 1)
        return -1;
    if (c->mode == VC_MODE_GCM && c->ctrl(c->evp, VC_EVP_CTRL_AEAD_GET_TAG, 16, c->tag) != 1)
        return -1;
    return VC_OK;
}

double vc_bench_openssl(int mode, int dir, unsigned key_bits, size_t size, double seconds)
{
    if (!vc_bench_valid(mode, dir, key_bits) || size > (size_t)0x7fffffff)
        return VC_ERR_ARGUMENT;
    if (!vc_ossl_load())
        return -1;
    static const char *const suffix[VC_MODE_COUNT] = {"GCM", "CFB", "CFB8", "CFB1"};
    char name[32] = "AES-128-";
    name[4] = (char)('0' + key_bits / 100);
    name[5] = (char)('0' + key_bits / 10 % 10);
    name[6] = (char)('0' + key_bits % 10);
    strcat(name, suffix[mode]);
    void *cipher = vc_ossl.fetch(NULL, name, NULL);
    if (!cipher)
        return -1;
    vc_bench_ctx c = {.mode = mode, .dir = dir, .ctrl = vc_ossl.ctrl};
    double r = -1;
    c.evp = vc_ossl.ctx_new();
    if (c.evp && vc_bench_alloc(&c, size) == VC_OK) {
        const int enc = dir == VC_DIR_ENCRYPT;
        int ok = (enc ? vc_ossl.enc_init : vc_ossl.dec_init)(c.evp, cipher, NULL, vc_bench_key, c.iv);
        c.init = enc ? vc_ossl.enc_init : vc_ossl.dec_init;
        c.update = enc ? vc_ossl.enc_update : vc_ossl.dec_update;
        c.final = enc ? vc_ossl.enc_final : vc_ossl.dec_final;
        if (ok == 1 && mode == VC_MODE_GCM && !enc) {
            /* a valid ciphertext + tag to verify: encrypt it once */
            void *e = vc_ossl.ctx_new();
            vc_bench_ctx ce = c;
            ce.evp = e;
            ce.dir = VC_DIR_ENCRYPT;
            ce.init = vc_ossl.enc_init;
            ce.update = vc_ossl.enc_update;
            ce.final = vc_ossl.enc_final;
            ok = e && vc_ossl.enc_init(e, cipher, NULL, vc_bench_key, c.iv) == 1 &&
                 vc_op_ossl(&ce) == VC_OK;
            if (ok) {
                memcpy(c.in, c.out, size);
                memcpy(c.tag, ce.tag, 16);
            }
            vc_ossl.ctx_free(e);
        }
        if (ok == 1) {
            const double ops = vc_bench_run(vc_op_ossl, &c, seconds);
            r = ops < 0 ? -1 : ops * (double)size / 1e6;
        }
    }
    vc_ossl.ctx_free(c.evp);
    vc_ossl.cipher_free(cipher);
    vc_bench_release(&c);
    return r;
}

/* ------------------------------------------------------- roof, floor -- */

#define VC_ROOF_TGT __attribute__((target("avx512f,avx512vl,avx512bw,vaes,vpclmulqdq")))

/* The GHASH multiplies of one 64-byte vector (4 blocks), as the avx512 GCM
 * loop issues them: Karatsuba, three VPCLMULQDQ per block (lo, hi and the
 * middle "kara" product), summed into three accumulators.  Only the count
 * and the data flow (each product depends on loaded data, every sum stays
 * live) matter here, not the field arithmetic. */
#define VC_FLOOR_MUL(d)                                                                            \
    do {                                                                                           \
        g0 = _mm512_xor_si512(g0, _mm512_clmulepi64_epi128((d), hk, 0x00));                        \
        g1 = _mm512_xor_si512(g1, _mm512_clmulepi64_epi128((d), hk, 0x11));                        \
        g2 = _mm512_xor_si512(g2, _mm512_clmulepi64_epi128((d), hk, 0x01));                        \
    } while (0)

#define VC_ROOF_ROUND(r)                                                                           \
    do {                                                                                           \
        x0 = _mm512_aesenc_epi128(x0, rk[r]);                                                      \
        x1 = _mm512_aesenc_epi128(x1, rk[r]);                                                      \
        x2 = _mm512_aesenc_epi128(x2, rk[r]);                                                      \
        x3 = _mm512_aesenc_epi128(x3, rk[r]);                                                      \
    } while (0)

/* CTR over len bytes with 16 blocks (4 zmm) per iteration: exactly the AES
 * work of the avx512 GCM loop minus GHASH, front-end and tag -- the roof.
 *
 * With ghash set it is the floor instead: the same loop plus the carry-less
 * multiplies any GHASH of that data needs at one reduction per 16 blocks,
 * i.e. 4 x 3 Karatsuba products + 1 reduction multiply = 13 zmm VPCLMULQDQ
 * per 16 blocks (the avx512 tier averages the same: 2 reduction multiplies
 * per 32 blocks).  No shuffles, counters or front-end are added, so GCM can
 * only approach it.  Why it matters: on a core where VAESENC and VPCLMULQDQ
 * share execution ports (Zen 4: two 256-bit FP pipes take both, a zmm
 * instruction occupies one for two cycles), GHASH is not free next to the
 * AES rounds as it is on Intel cores, and the floor -- not the roof --
 * bounds any AES-GCM implementation.  The multiplies sit between the first
 * rounds, as in the GCM loop. */
static inline VC_ROOF_TGT __m512i vc_roof_body(const vc_aes_key *k, const uint8_t ctr[16],
                                               const uint8_t *in, uint8_t *out, size_t len,
                                               const int ghash)
{
    const __m512i bs = _mm512_broadcast_i32x4(
        _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
    const __m512i step = _mm512_set_epi32(0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4, 0, 0, 0, 4);
    const unsigned nr = k->rounds;
    __m512i rk[15];
    for (unsigned i = 0; i <= nr; i++)
        rk[i] = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)k->rk[i]));
    __m512i c = _mm512_add_epi32(
        _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)(const void *)ctr)), bs),
        _mm512_set_epi32(0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0));
    const __m512i hk = rk[1]; /* any fixed multiplier: stands for the key powers */
    __m512i g0 = _mm512_setzero_si512(), g1 = g0, g2 = g0;
    for (size_t done = 0; done < len; done += 256) {
        __m512i x0, x1, x2, x3; /* named, not an array: kept in registers */
        x0 = _mm512_xor_si512(_mm512_shuffle_epi8(c, bs), rk[0]);
        c = _mm512_add_epi32(c, step);
        x1 = _mm512_xor_si512(_mm512_shuffle_epi8(c, bs), rk[0]);
        c = _mm512_add_epi32(c, step);
        x2 = _mm512_xor_si512(_mm512_shuffle_epi8(c, bs), rk[0]);
        c = _mm512_add_epi32(c, step);
        x3 = _mm512_xor_si512(_mm512_shuffle_epi8(c, bs), rk[0]);
        c = _mm512_add_epi32(c, step);
        const int full = len - done >= 256;
        /* Rounds 1..5 carry the multiplies (nr >= 10 for every key size). */
        VC_ROOF_ROUND(1);
        if (ghash && full)
            VC_FLOOR_MUL(_mm512_loadu_si512(in + done));
        VC_ROOF_ROUND(2);
        if (ghash && full)
            VC_FLOOR_MUL(_mm512_loadu_si512(in + done + 64));
        VC_ROOF_ROUND(3);
        if (ghash && full)
            VC_FLOOR_MUL(_mm512_loadu_si512(in + done + 128));
        VC_ROOF_ROUND(4);
        if (ghash && full)
            VC_FLOOR_MUL(_mm512_loadu_si512(in + done + 192));
        VC_ROOF_ROUND(5);
        if (ghash) /* the reduction's multiply, on the sums */
            g2 = _mm512_xor_si512(g2, _mm512_clmulepi64_epi128(g0, hk, 0x00));
        for (unsigned r = 6; r < nr; r++)
            VC_ROOF_ROUND(r);
        if (full) {
            _mm512_storeu_si512(out + done, _mm512_aesenclast_epi128(x0, _mm512_xor_si512(rk[nr], _mm512_loadu_si512(in + done))));
            _mm512_storeu_si512(out + done + 64, _mm512_aesenclast_epi128(x1, _mm512_xor_si512(rk[nr], _mm512_loadu_si512(in + done + 64))));
            _mm512_storeu_si512(out + done + 128, _mm512_aesenclast_epi128(x2, _mm512_xor_si512(rk[nr], _mm512_loadu_si512(in + done + 128))));
            _mm512_storeu_si512(out + done + 192, _mm512_aesenclast_epi128(x3, _mm512_xor_si512(rk[nr], _mm512_loadu_si512(in + done + 192))));
            continue;
        }
        const __m512i xs[4] = {x0, x1, x2, x3};
        for (int j = 0; j < 4; j++) { /* masked tail */
            const size_t off = done + 64 * (size_t)j;
            if (off >= len)
                break;
            const size_t n = len - off < 64 ? len - off : 64;
            const __mmask64 m = n == 64 ? ~(__mmask64)0 : (((__mmask64)1 << n) - 1);
            const __m512i d = _mm512_maskz_loadu_epi8(m, in + off);
            if (ghash)
                VC_FLOOR_MUL(d);
            _mm512_mask_storeu_epi8(out + off, m,
                                    _mm512_aesenclast_epi128(xs[j], _mm512_xor_si512(rk[nr], d)));
        }
    }
    return _mm512_xor_si512(g0, _mm512_xor_si512(g1, g2));
}

typedef struct {
    vc_aes_key *k;
    vc_bench_ctx c;
    int ghash;
} vc_roof_ctx;

static __attribute__((noinline)) VC_ROOF_TGT int vc_op_roof(void *p)
{
    vc_roof_ctx *r = p;
    if (!r->ghash) {
        vc_roof_body(r->k, r->c.iv, r->c.in, r->c.out, r->c.size, 0);
        return VC_OK;
    }
    /* The products land in the tag buffer so they cannot be optimised away. */
    _mm_storeu_si128((__m128i *)(void *)r->c.tag,
                     _mm512_castsi512_si128(vc_roof_body(r->k, r->c.iv, r->c.in, r->c.out, r->c.size, 1)));
    return VC_OK;
}

static double vc_bench_roof_floor(unsigned key_bits, size_t size, double seconds, int ghash)
{
    if (!vc_bench_valid(VC_MODE_GCM, VC_DIR_ENCRYPT, key_bits))
        return VC_ERR_ARGUMENT;
    if (!vc_path_supported(vc_cpu_features_get(), VC_PATH_AVX512) ||
        !vc_tier_avx512.setkey)
        return VC_ERR_UNSUPPORTED;
    vc_roof_ctx r = {.ghash = ghash};
    r.k = aligned_alloc(VC_ALIGN, sizeof(vc_aes_key));
    double res = VC_ERR_NOMEM;
    if (r.k && vc_bench_alloc(&r.c, size) == VC_OK) {
        vc_tier_avx512.setkey(r.k, vc_bench_key, key_bits);
        const double ops = vc_bench_run(vc_op_roof, &r, seconds);
        res = ops * (double)size / 1e6;
        vc_secure_zero(r.k, sizeof *r.k);
    }
    free(r.k);
    vc_bench_release(&r.c);
    return res;
}

double vc_bench_roof(unsigned key_bits, size_t size, double seconds)
{
    return vc_bench_roof_floor(key_bits, size, seconds, 0);
}

double vc_bench_floor(unsigned key_bits, size_t size, double seconds)
{
    return vc_bench_roof_floor(key_bits, size, seconds, 1);
}
