/*
 * bench.c - C-loop throughput measurements (see vc_bench.h).
 *
 * Four things are timed the same way, so their ratios mean something:
 *   - our one-shot public API (what an application calls),
 *   - OpenSSL's EVP interface, loaded with dlopen("libcrypto.so.3") so the
 *     library never links against OpenSSL (absent -> "unavailable"),
 *   - the AES issue rate of each register width (lane-rounds per second),
 *     from which the Python side derives the roof, a real upper bound,
 *   - a bare zmm VAES CTR loop (no GHASH, no front-end): a measured
 *     reference point, NOT a bound (good GCM code reaches 96-102 % of it).
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
#include "vc_tier_isa.h"

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

/* ------------------------------------------------- AES issue rate (roof) -- */

/* The roof is an issue-rate bound.  Whatever else a GCM or CFB path does,
 * every block it produces costs Nr AES round instructions (Nr-1 AESENC + one
 * AESENCLAST, Nr = 10/12/14) on the core's AES unit, one 128-bit lane per
 * block.  So no path can produce blocks faster than
 *
 *     lane-rounds per second / Nr
 *
 * where "lane-rounds per second" is the most AES round work the unit can
 * issue: an xmm AESENC is one lane-round, a ymm VAESENC two, a zmm VAESENC
 * four.  That rate is measured here, per register width, with a loop of
 * AESENC on many INDEPENDENT accumulators and nothing else (no loads, no
 * stores, no dependence between accumulators), so latency is hidden and
 * only issue throughput counts: 12 accumulators at every width (legacy and
 * VEX code has 16 registers, the key takes one; GCC's asm takes at most 30
 * operands, an in-out operand counting twice).  Hiding the latency takes
 * latency x throughput rounds in flight: 8 on Zen 4 (4 cycles, 2 xmm/ymm
 * per cycle; zmm 4 x 1), no more than 12 on the Intel cores we know of.
 * A loop limited by latency would read low and the roof with it, which the
 * bench's "above its roof" check then reports.  AESENCLAST runs on the same
 * unit at the same rate as AESENC, so the loop uses AESENC only.
 *
 * The whitening XOR of round 0 is NOT counted: it is a plain vector XOR,
 * which current cores can issue on ports the AES unit does not use (Zen 4:
 * VAESENC on FP0/FP1, VPXOR on any of FP0-FP3; recent Intel cores: AES on
 * port 0 (and 1), vector XOR also on port 5), so counting it could put the
 * bound below what a path reaches.
 * The Python side turns the rate into MB/s per message size
 * (vaescrypt.bench.issue_roof_mbps). */

typedef struct {
    uint8_t key[16];
    uint8_t seed[16];
    uint8_t sink[64];
} vc_issue_ctx;

/* Loop iterations per call, each one AES round on each of the 12
 * accumulators: 1024 x 12 = 12288 rounds per call, so the call and the
 * loop's one fused decrement-and-branch per 12 rounds (integer ports) cost
 * nothing measurable. */
#define VC_ISSUE_ITERS 1024
#define VC_ISSUE_ACCS 12

/* X(M, a, b) expands M(i, a, b) for every accumulator number i. */
#define VC_X12(M, a, b)                                                                            \
    M(0, a, b) M(1, a, b) M(2, a, b) M(3, a, b) M(4, a, b) M(5, a, b) M(6, a, b) M(7, a, b)        \
    M(8, a, b) M(9, a, b) M(10, a, b) M(11, a, b)

#define VC_ISSUE_DECL(i, T, SEED) T a##i = SEED(s128, i);
#define VC_ISSUE_OUT(i, CON, unused) , [a##i] "+" CON(a##i)
#define VC_ISSUE_SUM(i, XOR, unused) sum = XOR(sum, a##i);
/* One round on accumulator i: "aesenc k, a" (legacy SSE, 2 operands) or
 * "vaesenc k, a, a" (VEX / EVEX, 3 operands), AT&T operand order. */
#define VC_ISSUE_INSN2(i, insn, unused) insn " %[k], %[a" #i "]\n\t"
#define VC_ISSUE_INSN3(i, insn, unused) insn " %[k], %[a" #i "], %[a" #i "]\n\t"

/* One call: 12 accumulators of type T, each VC_ISSUE_ITERS
 * rounds with the same key k (which key does not matter for throughput);
 * the XOR of the results is stored so nothing is dead code.  The loop is
 * written in asm so that it is exactly the AES rounds, one decrement and
 * one branch: compiled from intrinsics, GCC rotated the accumulators
 * through spare registers and even the stack, with vector moves and stores
 * inside the loop (measured 6-37 % lower). */
#define VC_ISSUE_FN(name, tgt, T, X, SEED, INSN, insn, CON, XOR, STORE)                            \
    static __attribute__((noinline, target(tgt))) int name(void *p)                                \
    {                                                                                              \
        vc_issue_ctx *c = p;                                                                       \
        const __m128i k128 = _mm_loadu_si128((const __m128i *)(const void *)c->key);               \
        const __m128i s128 = _mm_loadu_si128((const __m128i *)(const void *)c->seed);              \
        const T k = SEED(k128, 0);                                                                 \
        X(VC_ISSUE_DECL, T, SEED)                                                                  \
        unsigned n = VC_ISSUE_ITERS;                                                               \
        __asm__ volatile("1:\n\t" X(INSN, insn, 0) "dec %[n]\n\t"                                  \
                         "jnz 1b\n\t"                                                              \
                         : [n] "+r"(n) X(VC_ISSUE_OUT, CON, 0)                                     \
                         : [k] CON(k)                                                              \
                         : "cc");                                                                  \
        T sum = k;                                                                                 \
        X(VC_ISSUE_SUM, XOR, 0)                                                                    \
        STORE(c->sink, sum);                                                                       \
        return VC_OK;                                                                              \
    }

/* Distinct starting states (the seed with lane 0 bumped by i), so no two
 * accumulators are the same value a compiler could merge. */
#define VC_SEED128(s, i) _mm_add_epi32((s), _mm_cvtsi32_si128(i))
#define VC_SEED256(s, i) _mm256_broadcastsi128_si256(VC_SEED128((s), (i)))
#define VC_SEED512(s, i) _mm512_broadcast_i32x4(VC_SEED128((s), (i)))
#define VC_STORE128(p, v) _mm_storeu_si128((__m128i *)(void *)(p), (v))
#define VC_STORE256(p, v) _mm256_storeu_si256((__m256i *)(void *)(p), (v))
#define VC_STORE512(p, v) _mm512_storeu_si512((void *)(p), (v))

VC_ISSUE_FN(vc_op_issue128, VC_ISA_TARGET(VC_ISA_AESNI_BLOCK), __m128i, VC_X12, VC_SEED128,
            VC_ISSUE_INSN2, "aesenc", "x", _mm_xor_si128, VC_STORE128)
VC_ISSUE_FN(vc_op_issue256, VC_ISA_TARGET(VC_ISA_VAES_AVX2), __m256i, VC_X12, VC_SEED256,
            VC_ISSUE_INSN3, "vaesenc", "x", _mm256_xor_si256, VC_STORE256)
VC_ISSUE_FN(vc_op_issue512, VC_ISA_TARGET(VC_ISA_AVX512), __m512i, VC_X12, VC_SEED512,
            VC_ISSUE_INSN3, "vaesenc", "v", _mm512_xor_si512, VC_STORE512)

double vc_bench_aes_issue(unsigned width_bits, double seconds)
{
    const vc_cpu_features *f = vc_cpu_features_get();
    vc_bench_op op;
    vc_path need;
    switch (width_bits) {
    case 128:
        op = vc_op_issue128, need = VC_PATH_AESNI;
        break;
    case 256:
        op = vc_op_issue256, need = VC_PATH_VAES_AVX2;
        break;
    case 512:
        op = vc_op_issue512, need = VC_PATH_AVX512;
        break;
    default:
        return VC_ERR_ARGUMENT;
    }
    if (!vc_path_supported(f, need))
        return VC_ERR_UNSUPPORTED;
    vc_issue_ctx c;
    memcpy(c.key, vc_bench_key, 16);
    memcpy(c.seed, vc_bench_key + 16, 16);
    const double calls = vc_bench_run(op, &c, seconds);
    if (calls < 0)
        return calls;
    const double lanes = (double)(width_bits / 128);
    return calls * VC_ISSUE_ITERS * VC_ISSUE_ACCS * lanes;
}

/* --------------------------------------- carry-less multiply and mix -- */

/* The port-aware roof (vaescrypt.bench.port_roof_mbps) needs two more
 * rates beside the AES one, measured the same way:
 *   - VPCLMULQDQ issue rate per width (lane-multiplies per second), 12
 *     independent accumulators, nothing else in the loop;
 *   - a MIX of the two in about GCM's proportion (AES-256: 14 rounds per
 *     block against 3 Karatsuba multiplies plus a share of a reduction,
 *     4.5 : 1): 9 AES accumulators x 3 rounds and 3 multiply accumulators
 *     x 2 per loop pass, i.e. 27 VAESENC + 6 VPCLMULQDQ.  Where the two
 *     run on separate ports the pass costs the larger of the two halves;
 *     where they share one (Zen 4; ymm VAESENC on Intel takes port 5 too)
 *     it costs up to the sum.  The Python side reads the sharing off the
 *     measured pass time. */
#define VC_X9(M, a, b)                                                                             \
    M(0, a, b) M(1, a, b) M(2, a, b) M(3, a, b) M(4, a, b) M(5, a, b) M(6, a, b) M(7, a, b)        \
    M(8, a, b)
#define VC_X3C(M, a, b) M(9, a, b) M(10, a, b) M(11, a, b)

VC_ISSUE_FN(vc_op_clmul128, VC_ISA_TARGET(VC_ISA_AESNI_GCM), __m128i, VC_X12, VC_SEED128,
            VC_ISSUE_INSN2, "pclmulqdq $0x11,", "x", _mm_xor_si128, VC_STORE128)
VC_ISSUE_FN(vc_op_clmul256, VC_ISA_TARGET(VC_ISA_VAES_AVX2), __m256i, VC_X12, VC_SEED256,
            VC_ISSUE_INSN3, "vpclmulqdq $0x11,", "x", _mm256_xor_si256, VC_STORE256)
VC_ISSUE_FN(vc_op_clmul512, VC_ISA_TARGET(VC_ISA_AVX512), __m512i, VC_X12, VC_SEED512,
            VC_ISSUE_INSN3, "vpclmulqdq $0x11,", "v", _mm512_xor_si512, VC_STORE512)

/* One pass of the mix: AES on accumulators 0..8 three times, a multiply on
 * 9..11 twice (27 + 6 instructions, VC_MIX_AES / VC_MIX_CLMUL). */
#define VC_MIX_AES 27
#define VC_MIX_CLMUL 6
#define VC_MIX_FN(name, tgt, T, SEED, aes, clm, CON, XOR, STORE)                                   \
    static __attribute__((noinline, target(tgt))) int name(void *p)                                \
    {                                                                                              \
        vc_issue_ctx *c = p;                                                                       \
        const __m128i k128 = _mm_loadu_si128((const __m128i *)(const void *)c->key);               \
        const __m128i s128 = _mm_loadu_si128((const __m128i *)(const void *)c->seed);              \
        const T k = SEED(k128, 0);                                                                 \
        VC_X12(VC_ISSUE_DECL, T, SEED)                                                             \
        unsigned n = VC_ISSUE_ITERS / 2;                                                           \
        __asm__ volatile("1:\n\t" VC_X9(VC_ISSUE_INSN3, aes, 0) VC_X3C(VC_ISSUE_INSN3, clm, 0)    \
                             VC_X9(VC_ISSUE_INSN3, aes, 0) VC_X3C(VC_ISSUE_INSN3, clm, 0)          \
                                 VC_X9(VC_ISSUE_INSN3, aes, 0) "dec %[n]\n\t"                      \
                                                               "jnz 1b\n\t"                        \
                         : [n] "+r"(n) VC_X12(VC_ISSUE_OUT, CON, 0)                                \
                         : [k] CON(k)                                                              \
                         : "cc");                                                                  \
        T sum = k;                                                                                 \
        VC_X12(VC_ISSUE_SUM, XOR, 0)                                                               \
        STORE(c->sink, sum);                                                                       \
        return VC_OK;                                                                              \
    }

VC_MIX_FN(vc_op_mix256, VC_ISA_TARGET(VC_ISA_VAES_AVX2), __m256i, VC_SEED256, "vaesenc",
          "vpclmulqdq $0x00,", "x", _mm256_xor_si256, VC_STORE256)
VC_MIX_FN(vc_op_mix512, VC_ISA_TARGET(VC_ISA_AVX512), __m512i, VC_SEED512, "vaesenc",
          "vpclmulqdq $0x00,", "v", _mm512_xor_si512, VC_STORE512)

double vc_bench_clmul_issue(unsigned width_bits, double seconds)
{
    const vc_cpu_features *f = vc_cpu_features_get();
    vc_bench_op op;
    vc_path need;
    switch (width_bits) {
    case 128:
        op = vc_op_clmul128, need = VC_PATH_AESNI;
        break;
    case 256:
        op = vc_op_clmul256, need = VC_PATH_VAES_AVX2;
        break;
    case 512:
        op = vc_op_clmul512, need = VC_PATH_AVX512;
        break;
    default:
        return VC_ERR_ARGUMENT;
    }
    if (!vc_path_supported(f, need))
        return VC_ERR_UNSUPPORTED;
    vc_issue_ctx c;
    memcpy(c.key, vc_bench_key, 16);
    memcpy(c.seed, vc_bench_key + 16, 16);
    const double calls = vc_bench_run(op, &c, seconds);
    if (calls < 0)
        return calls;
    return calls * VC_ISSUE_ITERS * VC_ISSUE_ACCS * (double)(width_bits / 128);
}

double vc_bench_mix_passes(unsigned width_bits, double seconds)
{
    const vc_cpu_features *f = vc_cpu_features_get();
    vc_bench_op op;
    vc_path need;
    switch (width_bits) {
    case 256:
        op = vc_op_mix256, need = VC_PATH_VAES_AVX2;
        break;
    case 512:
        op = vc_op_mix512, need = VC_PATH_AVX512;
        break;
    default:
        return VC_ERR_ARGUMENT;
    }
    if (!vc_path_supported(f, need))
        return VC_ERR_UNSUPPORTED;
    vc_issue_ctx c;
    memcpy(c.key, vc_bench_key, 16);
    memcpy(c.seed, vc_bench_key + 16, 16);
    const double calls = vc_bench_run(op, &c, seconds);
    if (calls < 0)
        return calls;
    return calls * (VC_ISSUE_ITERS / 2);
}

/* ------------------------------------------------ quiet-state check -- */

/* The shared host has a slow state that the load average does not show
 * (a neighbour on the sibling hyperthread, a lower clock): a fixed chain
 * of 64 dependent integer multiplies takes measurably longer in it.  The
 * chain touches no memory and no vector unit, so what it measures is the
 * core's state, not the code being benchmarked.  Timed before and after
 * every point; returns ns per 64-step chain (best of the batches of a
 * short run: a brief interruption does not count, a state that lasts the
 * whole run does). */
#define VC_CHAIN_REPS 64
static __attribute__((noinline)) int vc_op_chain(void *p)
{
    uint64_t *x = p;
    uint64_t v = *x;
    for (int r = 0; r < VC_CHAIN_REPS; r++)
        __asm__ volatile(".rept 64\n\timul %[m], %[v]\n\t.endr"
                         : [v] "+r"(v)
                         : [m] "r"((uint64_t)0x9e3779b97f4a7c15u)
                         : "cc");
    *x = v;
    return VC_OK;
}

double vc_bench_chain_ns(double seconds)
{
    uint64_t x = 1;
    const double calls = vc_bench_run(vc_op_chain, &x, seconds);
    return calls > 0 ? 1e9 / (calls * VC_CHAIN_REPS) : -1;
}

/* The memory probe.  The host has a second slow state the chain does not
 * see: integer multiplies, AES rounds and carry-less multiplies run at
 * full rate while code that loads and stores runs 35-45 % slower (library
 * and OpenSSL alike; measured on the Zen 4 VM of issue 23: over 80 rounds
 * of 512 B GCM, the rounds whose memory probe read within 10 % of its
 * best had vaescrypt and EVP at 0.98-1.00 of their best and C/EVP within
 * 0.99-1.01, the others at 0.55-0.65 and C/EVP anywhere in 0.63-1.29).
 * So: 512 bytes loaded, XORed and stored with SSE2 (x86-64's baseline),
 * 16 times per call over the same two cache-resident buffers; returns ns
 * per 512-byte pass. */
#define VC_MEM_BYTES 512
#define VC_MEM_REPS 16
typedef struct vc_mem_ctx {
    __m128i in[VC_MEM_BYTES / 16], out[VC_MEM_BYTES / 16];
} vc_mem_ctx;

static __attribute__((noinline)) int vc_op_mem(void *p)
{
    vc_mem_ctx *m = p;
    __m128i x = _mm_set1_epi32(0x5a5a5a5a);
    for (int r = 0; r < VC_MEM_REPS; r++) {
        for (int i = 0; i < VC_MEM_BYTES / 16; i++)
            _mm_store_si128(&m->out[i], _mm_xor_si128(_mm_load_si128(&m->in[i]), x));
        /* the next pass depends on this one's stores: the compiler may
         * neither drop nor merge the passes */
        x = _mm_add_epi32(x, _mm_load_si128(&m->out[r]));
        __asm__ volatile("" : "+x"(x)::"memory");
    }
    m->in[0] = x;
    return VC_OK;
}

double vc_bench_mem_ns(double seconds)
{
    vc_mem_ctx *m = aligned_alloc(64, sizeof *m);
    if (!m)
        return VC_ERR_NOMEM;
    memset(m, 0x3c, sizeof *m);
    const double calls = vc_bench_run(vc_op_mem, m, seconds);
    free(m);
    return calls > 0 ? 1e9 / (calls * VC_MEM_REPS) : -1;
}

/* ----------------------------------------------------- CTR loop (model) -- */

#define VC_CTR_TGT __attribute__((target(VC_ISA_TARGET(VC_ISA_AVX512))))

#define VC_CTR_ROUND(r)                                                                            \
    do {                                                                                           \
        x0 = _mm512_aesenc_epi128(x0, rk[r]);                                                      \
        x1 = _mm512_aesenc_epi128(x1, rk[r]);                                                      \
        x2 = _mm512_aesenc_epi128(x2, rk[r]);                                                      \
        x3 = _mm512_aesenc_epi128(x3, rk[r]);                                                      \
    } while (0)

/* CTR over len bytes with 16 blocks (4 zmm) per iteration: the AES work of
 * the avx512 GCM loop minus GHASH, front-end and tag.  A measured reference
 * point, not a bound: it pays byte swaps, counter adds, loads and stores
 * that a real GCM can overlap differently, and well-tuned GCM code has
 * been measured at 96-102 % of it (issue 16, Intel Sapphire Rapids class). */
static inline VC_CTR_TGT void vc_ctr_body(const vc_aes_key *k, const uint8_t ctr[16],
                                          const uint8_t *in, uint8_t *out, size_t len)
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
        for (unsigned r = 1; r < nr; r++)
            VC_CTR_ROUND(r);
        if (len - done >= 256) {
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
            _mm512_mask_storeu_epi8(out + off, m,
                                    _mm512_aesenclast_epi128(xs[j], _mm512_xor_si512(rk[nr], d)));
        }
    }
}

typedef struct {
    vc_aes_key *k;
    vc_bench_ctx c;
} vc_ctr_ctx;

static __attribute__((noinline)) VC_CTR_TGT int vc_op_ctr(void *p)
{
    vc_ctr_ctx *r = p;
    vc_ctr_body(r->k, r->c.iv, r->c.in, r->c.out, r->c.size);
    return VC_OK;
}

double vc_bench_ctr_loop(unsigned key_bits, size_t size, double seconds)
{
    if (!vc_bench_valid(VC_MODE_GCM, VC_DIR_ENCRYPT, key_bits))
        return VC_ERR_ARGUMENT;
    if (!vc_path_supported(vc_cpu_features_get(), VC_PATH_AVX512) ||
        !vc_tier_avx512.setkey)
        return VC_ERR_UNSUPPORTED;
    vc_ctr_ctx r = {0};
    r.k = aligned_alloc(VC_ALIGN, sizeof(vc_aes_key));
    double res = VC_ERR_NOMEM;
    if (r.k && vc_bench_alloc(&r.c, size) == VC_OK) {
        vc_tier_avx512.setkey(r.k, vc_bench_key, key_bits);
        const double ops = vc_bench_run(vc_op_ctr, &r, seconds);
        res = ops * (double)size / 1e6;
        vc_secure_zero(r.k, sizeof *r.k);
    }
    free(r.k);
    vc_bench_release(&r.c);
    return res;
}
