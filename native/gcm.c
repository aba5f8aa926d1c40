/*
 * gcm.c - AES-GCM front-end (NIST SP 800-38D): argument and length checks,
 * IV -> J0, AAD, streaming with partial blocks, tag.  The tiers do the bulk
 * CTR + GHASH on whole blocks (and a final partial block in one-shot calls);
 * the wide tiers take a one-shot call with a 12-byte IV whole (gcm_oneshot).
 *
 *   J0 = IV || 0^31 || 1                      (12-byte IV)
 *   J0 = GHASH_H(IV || 0^s || 0^64 || [len(IV)]_64)   (any other IV length)
 *
 *   counter blocks  inc32(J0), inc32^2(J0), ...   (low 32 bits wrap, no carry)
 *   C_i = P_i ^ E_K(counter_i)
 *   S   = GHASH_H(A || 0^v || C || 0^u || [len(A)]_64 || [len(C)]_64)
 *   T   = MSB_t(E_K(J0) ^ S)
 *
 * X below is the running GHASH accumulator; every block that enters it goes
 * through the tier's ghash (AAD, padded tails, the length block) or its
 * gcm_enc/gcm_dec (ciphertext).
 */
#include <string.h>

#include "front.h"

struct vc_gcm_key {
    uint32_t magic;         /* VC_MAGIC_GCM_KEY, first: see vc_kind_is */
    vc_aes_key aes;
    vc_ghash_key gh[2];     /* gh[1] used only when enc and dec tiers differ */
    const vc_tier *tier[VC_DIR_COUNT];
    /* Per direction: the AES schedule, that direction's GHASH table (in
     * gh) and the direction, as a one-shot call takes them (vc_gcm_dir). */
    vc_gcm_dir dk[VC_DIR_COUNT];
    int status[VC_DIR_COUNT]; /* VC_OK or why this direction cannot run */
    int path[VC_DIR_COUNT];
};

enum { PHASE_AAD = 0, PHASE_DATA = 1, PHASE_DONE = 2 };

/* One message in flight (a stream, or the stack frame of a one-shot call).
 * The five blocks come first and together: ctx_wipe clears exactly them
 * (the rest is pointers and counters, nothing secret). */
typedef struct gcm_ctx {
    alignas(16) uint8_t X[16];
    alignas(16) uint8_t ctr[16];  /* next counter block */
    alignas(16) uint8_t ekj0[16]; /* E_K(J0) */
    alignas(16) uint8_t buf[16];  /* partial AAD block, or partial ciphertext block */
    alignas(16) uint8_t ks[16];   /* keystream of the partial data block */
#define GCM_CTX_SECRET_BYTES 80
    const vc_aes_key *aes;
    const vc_ghash_key *gh;
    const vc_tier *t;
    int dir;
    int phase;
    unsigned nbuf;                /* bytes live in buf: 0..15 between calls */
    uint64_t aad_len, data_len;
} gcm_ctx;

/* nbuf as an index: read once into a local, masked to 0..15 (its range
 * between calls, so the mask changes nothing while the stream is used
 * correctly).  The stream's busy flag already refuses a second thread; the
 * mask makes sure that even a race the flag missed, or a corrupted struct,
 * cannot index buf[] or ks[] past their 16 bytes. */
static inline unsigned nbuf_get(const gcm_ctx *c)
{
    return c->nbuf & 15u;
}

struct vc_gcm_stream {
    uint32_t magic; /* VC_MAGIC_GCM_STREAM, first: see vc_kind_is */
    gcm_ctx c;
    vc_busy busy;   /* set while a call runs: see vc_busy_enter */
};

/* VC_OK for a live GCM key; VC_ERR_ARGUMENT for NULL; VC_ERR_OBJECT for
 * anything else (another kind of object, a freed key).  Every entry point
 * that takes a key runs this before reading any other member. */
static int key_ok(const vc_gcm_key *k)
{
    return !k ? VC_ERR_ARGUMENT : vc_kind_is(k, VC_MAGIC_GCM_KEY) ? VC_OK : VC_ERR_OBJECT;
}

static int stream_ok(const vc_gcm_stream *s)
{
    return !s ? VC_ERR_ARGUMENT : vc_kind_is(s, VC_MAGIC_GCM_STREAM) ? VC_OK : VC_ERR_OBJECT;
}

static int tag_len_ok(size_t n)
{
    return n == 4 || n == 8 || (n >= 12 && n <= 16);
}

static void ctx_wipe(gcm_ctx *c)
{
    static_assert(offsetof(gcm_ctx, ks) + 16 == GCM_CTX_SECRET_BYTES, "secret blocks not first");
    vc_secure_zero(c, GCM_CTX_SECRET_BYTES);
}

/* J0 for a 12-byte IV: IV || 0^31 || 1. */
static void j0_from_iv96(uint8_t j0[16], const uint8_t *iv)
{
    memcpy(j0, iv, 12);
    static const uint8_t one_be[4] = {0, 0, 0, 1};
    memcpy(j0 + 12, one_be, 4);
}

/* ------------------------------------------------------------------ key -- */

int vc_gcm_key_new(vc_gcm_key **out, const uint8_t *key, size_t key_len, int impl)
{
    if (!out)
        return VC_ERR_ARGUMENT;
    *out = NULL;
    if (!key)
        return VC_ERR_ARGUMENT;
    if (key_len != 16 && key_len != 24 && key_len != 32)
        return VC_ERR_KEY_LENGTH;

    vc_path path[VC_DIR_COUNT];
    int st[VC_DIR_COUNT];
    for (int d = 0; d < VC_DIR_COUNT; d++)
        st[d] = vc_front_resolve(VC_MODE_GCM, (vc_dir)d, impl, &path[d]);
    /* A forced path may exist for one direction only; that is reported when
     * the other direction is used.  Neither direction: fail now. */
    if (st[VC_DIR_ENCRYPT] != VC_OK && st[VC_DIR_DECRYPT] != VC_OK)
        return st[VC_DIR_ENCRYPT];

    vc_gcm_key *k = vc_front_alloc(sizeof *k);
    if (!k)
        return VC_ERR_NOMEM;
    k->magic = VC_MAGIC_GCM_KEY;

    /* Every tier that will touch the key runs its own setkey: the round
     * keys are identical in all tiers, and a tier may add private material
     * (the generic tier's bitsliced copy). */
    const vc_tier *first = NULL;
    for (int d = 0; d < VC_DIR_COUNT; d++) {
        k->status[d] = st[d];
        k->path[d] = st[d] == VC_OK ? (int)path[d] : st[d];
        if (st[d] != VC_OK)
            continue;
        k->tier[d] = vc_tier_get(path[d]);
        if (!first || k->tier[d] != first)
            k->tier[d]->setkey(&k->aes, key, (unsigned)key_len * 8);
        if (!first)
            first = k->tier[d];
    }

    /* Whether the one-shot pass may run an encryption round by round where
     * the tier leaves it to the CPU (VC_RM_ENC 2: see VC_PASS_RM).  The
     * vendor stands in for the core: the two orders were measured on one
     * AMD core (Zen 4) and one Intel core (Sapphire Rapids class), and each
     * measurement is taken as the best guess for its vendor's other cores,
     * an assumption, not a measurement. */
    const int round_major = strcmp(vc_cpu_features_get()->vendor, "AuthenticAMD") == 0;

    /* H = E_K(0^128); each distinct tier lays out its own table from it. */
    static const uint8_t zero[16];
    uint8_t h[16];
    first->encrypt_block(&k->aes, zero, h);
    int used = 0;
    for (int d = 0; d < VC_DIR_COUNT; d++) {
        if (st[d] != VC_OK)
            continue;
        int slot = -1;
        for (int e = 0; e < d; e++)
            if (st[e] == VC_OK && k->tier[e] == k->tier[d])
                slot = (int)(k->dk[e].g - k->gh);
        if (slot < 0) {
            slot = used++;
            memcpy(k->gh[slot].h, h, 16);
            k->tier[d]->ghash_init(&k->gh[slot]);
        }
        k->dk[d] = (vc_gcm_dir){&k->aes, &k->gh[slot], d == VC_DIR_ENCRYPT, round_major};
    }
    vc_secure_zero(h, sizeof h);
    *out = k;
    return VC_OK;
}

/* An object of another kind is not freed: freeing it with this size would
 * zero past its end (or leave part of it unwiped); leaking it is the lesser
 * harm, and only a caller that already confused two objects gets there. */
void vc_gcm_key_free(vc_gcm_key *k)
{
    if (key_ok(k) == VC_OK)
        vc_front_free(k, sizeof *k);
}

int vc_gcm_key_path(const vc_gcm_key *k, int dir)
{
    const int st = key_ok(k);
    if (st != VC_OK)
        return st;
    if (dir < 0 || dir >= VC_DIR_COUNT)
        return VC_ERR_ARGUMENT;
    return k->path[dir];
}

/* ---------------------------------------------------------- the engine -- */

/* GHASH of len bytes, the last partial block zero-padded (AAD, IV). */
static void ghash_padded(gcm_ctx *c, uint8_t X[16], const uint8_t *p, size_t len)
{
    size_t full = len & ~(size_t)15;
    if (full)
        c->t->ghash(c->gh, X, p, full);
    if (len > full) {
        uint8_t blk[16] = {0};
        memcpy(blk, p + full, len - full);
        c->t->ghash(c->gh, X, blk, 16);
    }
}

static int ctx_init(gcm_ctx *c, const vc_gcm_key *k, int dir, const uint8_t *iv, size_t iv_len)
{
    const int kst = key_ok(k);
    if (kst != VC_OK)
        return kst;
    if (dir < 0 || dir >= VC_DIR_COUNT)
        return VC_ERR_ARGUMENT;
    if (k->status[dir] != VC_OK)
        return k->status[dir];
    if (!iv && iv_len)
        return VC_ERR_ARGUMENT;
    if (iv_len == 0 || (uint64_t)iv_len > VC_GCM_MAX_IV)
        return VC_ERR_IV_LENGTH;

    /* Field by field, not memset(c): buf and ks are always written before
     * they are read (nbuf says how much of buf is live). */
    memset(c->X, 0, 16);
    c->aes = &k->aes;
    c->gh = k->dk[dir].g;
    c->t = k->tier[dir];
    c->dir = dir;
    c->phase = PHASE_AAD;
    c->nbuf = 0;
    c->aad_len = 0;
    c->data_len = 0;

    alignas(16) uint8_t j0[16] = {0};
    if (iv_len == 12) {
        j0_from_iv96(j0, iv);
    } else {
        uint8_t lenblk[16] = {0};
        ghash_padded(c, j0, iv, iv_len);
        vc_store_be64(lenblk + 8, (uint64_t)iv_len * 8);
        c->t->ghash(c->gh, j0, lenblk, 16);
    }
    c->t->encrypt_block(c->aes, j0, c->ekj0);
    memcpy(c->ctr, j0, 16);
    vc_store_be32(c->ctr + 12, vc_load_be32(j0 + 12) + 1);
    vc_secure_zero(j0, sizeof j0);
    return VC_OK;
}

static int ctx_aad(gcm_ctx *c, const uint8_t *aad, size_t len)
{
    if (c->phase != PHASE_AAD)
        return VC_ERR_STATE;
    if (!aad && len)
        return VC_ERR_ARGUMENT;
    if ((uint64_t)len > VC_GCM_MAX_AAD - c->aad_len)
        return VC_ERR_DATA_LENGTH;
    c->aad_len += len;
    unsigned nb = nbuf_get(c);
    if (nb) { /* top up the pending partial block first */
        size_t n = 16 - nb < len ? 16 - nb : len;
        memcpy(c->buf + nb, aad, n);
        nb += (unsigned)n;
        aad += n;
        len -= n;
        if (nb < 16) {
            c->nbuf = nb;
            return VC_OK;
        }
        c->t->ghash(c->gh, c->X, c->buf, 16);
        c->nbuf = 0;
    }
    size_t full = len & ~(size_t)15;
    if (full)
        c->t->ghash(c->gh, c->X, aad, full);
    if (len > full) {
        memcpy(c->buf, aad + full, len - full);
        c->nbuf = (unsigned)(len - full);
    }
    return VC_OK;
}

/* Close the AAD: its last partial block enters GHASH zero-padded. */
static void ctx_start_data(gcm_ctx *c)
{
    if (c->phase != PHASE_AAD)
        return;
    const unsigned nb = nbuf_get(c);
    if (nb) {
        memset(c->buf + nb, 0, 16 - nb);
        c->t->ghash(c->gh, c->X, c->buf, 16);
        c->nbuf = 0;
    }
    c->phase = PHASE_DATA;
}

/* CTR + GHASH through the tier, cut so that no call runs the 32-bit counter
 * past 0xFFFFFFFF -> 0: a tier may keep the counter in a wider lane and must
 * not see the wrap.  (With the length limit at most one cut ever happens.)
 * len % 16 != 0 only for the last data of a message. */
static void ctx_bulk(gcm_ctx *c, const uint8_t *in, uint8_t *out, size_t len)
{
    while (len) {
        uint32_t ctr32 = vc_load_be32(c->ctr + 12);
        uint64_t to_wrap = ((uint64_t)1 << 32) - ctr32; /* blocks left before wrap */
        size_t n = len;
        if ((uint64_t)n > to_wrap * 16)
            n = (size_t)(to_wrap * 16);
        if (c->dir == VC_DIR_ENCRYPT)
            c->t->gcm_enc(c->aes, c->gh, c->ctr, c->X, in, out, n);
        else
            c->t->gcm_dec(c->aes, c->gh, c->ctr, c->X, in, out, n);
        /* The next counter is defined here, not left to the tier. */
        vc_store_be32(c->ctr + 12, ctr32 + (uint32_t)((n + 15) / 16));
        in += n;
        out += n;
        len -= n;
    }
}

/* Streaming data: whole blocks to the tier; a partial block is XORed with
 * keystream from encrypt_block here and its ciphertext held in buf until the
 * block is complete (or the message ends) and can enter GHASH. */
static int ctx_update(gcm_ctx *c, const uint8_t *in, uint8_t *out, size_t len)
{
    if (c->phase == PHASE_DONE)
        return VC_ERR_STATE;
    if ((!in || !out) && len)
        return VC_ERR_ARGUMENT;
    if ((uint64_t)len > VC_GCM_MAX_DATA - c->data_len)
        return VC_ERR_DATA_LENGTH;
    ctx_start_data(c);
    c->data_len += len;

    const int enc = c->dir == VC_DIR_ENCRYPT;
    unsigned nb = nbuf_get(c); /* the index lives in a register, 0..15 */
    if (nb && len) {
        while (nb < 16 && len) {
            uint8_t x = *in++;
            uint8_t y = x ^ c->ks[nb];
            *out++ = y;
            c->buf[nb++] = enc ? y : x; /* GHASH always eats ciphertext */
            len--;
        }
        if (nb == 16) {
            c->t->ghash(c->gh, c->X, c->buf, 16);
            nb = 0;
        }
        c->nbuf = nb;
    }
    size_t full = len & ~(size_t)15;
    if (full) {
        ctx_bulk(c, in, out, full);
        in += full;
        out += full;
        len -= full;
    }
    if (len) {
        c->t->encrypt_block(c->aes, c->ctr, c->ks);
        vc_store_be32(c->ctr + 12, vc_load_be32(c->ctr + 12) + 1);
        for (size_t i = 0; i < len; i++) {
            uint8_t x = in[i];
            uint8_t y = x ^ c->ks[i];
            out[i] = y;
            c->buf[i] = enc ? y : x;
        }
        c->nbuf = (unsigned)len;
    }
    return VC_OK;
}

/* S = GHASH(... || [len(A)]_64 || [len(C)]_64); full tag = E_K(J0) ^ S. */
static void ctx_tag(gcm_ctx *c, uint8_t full_tag[16])
{
    ctx_start_data(c);
    const unsigned nb = nbuf_get(c);
    if (nb) {
        memset(c->buf + nb, 0, 16 - nb);
        c->t->ghash(c->gh, c->X, c->buf, 16);
        c->nbuf = 0;
    }
    uint8_t lenblk[16];
    vc_store_be64(lenblk, c->aad_len * 8);
    vc_store_be64(lenblk + 8, c->data_len * 8);
    c->t->ghash(c->gh, c->X, lenblk, 16);
    for (int i = 0; i < 16; i++)
        full_tag[i] = c->X[i] ^ c->ekj0[i];
    c->phase = PHASE_DONE;
}

/* ----------------------------------------------------------- one-shot -- */

/*
 * One-shot calls with a 12-byte IV (the common case) go to the tier's
 * gcm_oneshot where it has one (the wide tiers): the whole message, AAD,
 * E(J0), length block and tag check in one call, with no copies; see
 * vaes_common.h.  Other IV lengths, and the tiers without it, take the
 * general path, one_shot_ctx (J0 by GHASH, then the calls a stream makes).
 *
 * The checks and the tier call are inlined into vc_gcm_encrypt/decrypt,
 * and the general path is a function of its own: when both were one
 * function, its prologue saved six callee-saved registers and reloaded the
 * five stack arguments for the general path's sake on every call, and the
 * public functions re-pushed their arguments to call it: about 100
 * instructions of the front-end's own per call, 76 after this split (gdb
 * stepi, vaes_avx2, 16 B; see one_shot for the call itself).  In-process A/B
 * (Sapphire Rapids class, AES-256, three processes, 9 pairs): at 16 B
 * +4 to +6 % on the three wide paths (avx10_256 encrypt +1.4 %); at 64 B
 * vaes_avx2 +4.5 to +5.2 %, the others +0.3 to +4 %; at 512 B decrypt
 * +0.6 to +3.1 % (vaes_avx2 +1.7 to +2.2 %: the one point where Linux's
 * vaes_avx2 code was ahead on that host); level from 1420 B; aesni, which
 * takes the general path, level.  avx10_256 encrypt at 256 B read -2 %:
 * the tiers' code moved by 352 B, and a pure 352 B shift of it alone
 * moves 256 B points by -2 to +2.5 %.
 */

static __attribute__((noinline)) int one_shot_ctx(const vc_gcm_key *k, int dir,
                                                  const uint8_t *iv, size_t iv_len,
                                                  const uint8_t *aad, size_t aad_len,
                                                  const uint8_t *in, uint8_t *out, size_t len,
                                                  uint8_t *tag_io, size_t tag_len)
{
    gcm_ctx c;
    alignas(16) uint8_t full[16];
    int st;

    if ((st = ctx_init(&c, k, dir, iv, iv_len)) != VC_OK)
        return st;
    ctx_aad(&c, aad, aad_len);
    ctx_start_data(&c);
    c.data_len = len;
    /* One-shot: the tier may take the partial final block itself. */
    ctx_bulk(&c, in, out, len);
    ctx_tag(&c, full);

    st = VC_OK;
    if (dir == VC_DIR_ENCRYPT) {
        memcpy(tag_io, full, tag_len);
    } else if (!vc_ct_memeq(full, tag_io, tag_len)) {
        vc_secure_zero(out, len);
        st = VC_ERR_AUTH;
    }
    vc_secure_zero(full, sizeof full);
    ctx_wipe(&c);
    return st;
}

static inline __attribute__((always_inline)) int one_shot(const vc_gcm_key *k, int dir,
                                                          const uint8_t *iv, size_t iv_len,
                                                          const uint8_t *aad, size_t aad_len,
                                                          const uint8_t *in, uint8_t *out,
                                                          size_t len, uint8_t *tag_io,
                                                          size_t tag_len)
{
    int st;

    if ((st = key_ok(k)) != VC_OK)
        return st;
    if ((!in || !out) && len)
        return VC_ERR_ARGUMENT;
    if (!aad && aad_len)
        return VC_ERR_ARGUMENT;
    if (!tag_io)
        return VC_ERR_ARGUMENT;
    if (!tag_len_ok(tag_len))
        return VC_ERR_TAG_LENGTH;
    if ((uint64_t)len > VC_GCM_MAX_DATA || (uint64_t)aad_len > VC_GCM_MAX_AAD)
        return VC_ERR_DATA_LENGTH;
    if (vc_overlap_partial(in, out, len))
        return VC_ERR_OVERLAP;

    const vc_tier *t = k->tier[dir];
    if (iv && iv_len == 12 && k->status[dir] == VC_OK && t->gcm_oneshot) {
        /* The route (see vc_tier), then one call, a jump (sibling call):
         * the tier takes these arguments where the public functions got
         * them (see vc_gcm_oneshot_fn), and returns to their caller.
         * Against the build before the front-end routing (d8d8396),
         * in-process A/B, Sapphire Rapids class, AES-256, three processes,
         * 9 pairs: avx512 +3.5 to +5.8 % at 16 B, +2.3 to +6.6 % at 48 B,
         * +6.8 to +11.8 % at 64 B, +7.3 to +8.7 % at 256 B decrypt, +1.4
         * to +4 % at 512 B decrypt; avx10_256 +2.1 to +4.3 % at 16 B;
         * everything else -0.7 to +2.8 %.  The front-end's own
         * instructions per call (gdb stepi, 16 and 512 B): 77-82 on the
         * ymm tiers, 79-86 on avx512 (its routing). */
        vc_gcm_oneshot_fn *fn = t->gcm_oneshot;
        if (len > t->whole_min && t->gcm_whole && (len & (t->whole_step[dir] - 1)) == 0)
            fn = t->gcm_whole;
        else if (t->gcm_oneshot_short && len <= t->short_max) {
            if (t->tiny && len <= t->tiny_max)
                fn = t->tiny->gcm_oneshot;
            else if ((aad_len + 15) / 16 + (len + 15) / 16 + 1 <= t->short_powers)
                fn = t->gcm_oneshot_short;
        }
        return fn(&k->dk[dir], iv, iv_len, aad, aad_len, in, out, len, tag_io, tag_len);
    }
    return one_shot_ctx(k, dir, iv, iv_len, aad, aad_len, in, out, len, tag_io, tag_len);
}

int vc_gcm_encrypt(const vc_gcm_key *k, const uint8_t *iv, size_t iv_len, const uint8_t *aad,
                   size_t aad_len, const uint8_t *in, uint8_t *out, size_t len, uint8_t *tag,
                   size_t tag_len)
{
    return one_shot(k, VC_DIR_ENCRYPT, iv, iv_len, aad, aad_len, in, out, len, tag, tag_len);
}

int vc_gcm_decrypt(const vc_gcm_key *k, const uint8_t *iv, size_t iv_len, const uint8_t *aad,
                   size_t aad_len, const uint8_t *in, uint8_t *out, size_t len,
                   const uint8_t *tag, size_t tag_len)
{
    /* one_shot only reads the tag when decrypting */
    return one_shot(k, VC_DIR_DECRYPT, iv, iv_len, aad, aad_len, in, out, len, (uint8_t *)tag,
                    tag_len);
}

/* ---------------------------------------------------------- streaming -- */

int vc_gcm_stream_new(vc_gcm_stream **out, const vc_gcm_key *k, int dir, const uint8_t *iv,
                      size_t iv_len)
{
    if (!out)
        return VC_ERR_ARGUMENT;
    *out = NULL;
    gcm_ctx c;
    int st = ctx_init(&c, k, dir, iv, iv_len);
    if (st != VC_OK)
        return st;
    vc_gcm_stream *s = vc_front_alloc(sizeof *s);
    if (!s) {
        ctx_wipe(&c);
        return VC_ERR_NOMEM;
    }
    vc_fork_watch();
    s->magic = VC_MAGIC_GCM_STREAM;
    s->c = c;
    vc_busy_init(&s->busy);
    ctx_wipe(&c);
    *out = s;
    return VC_OK;
}

void vc_gcm_stream_free(vc_gcm_stream *s)
{
    if (stream_ok(s) == VC_OK) /* another kind: not freed, see vc_gcm_key_free */
        vc_front_free(s, sizeof *s);
}

/* Each stream call runs under the stream's busy flag: a call that finds it
 * set (another thread is inside) is refused with VC_ERR_STATE and touches
 * nothing. */
int vc_gcm_stream_aad(vc_gcm_stream *s, const uint8_t *aad, size_t len)
{
    int st = stream_ok(s);
    if (st != VC_OK)
        return st;
    if ((st = vc_busy_enter(&s->busy)) != VC_OK)
        return st;
    st = ctx_aad(&s->c, aad, len);
    vc_busy_leave(&s->busy);
    return st;
}

int vc_gcm_stream_update(vc_gcm_stream *s, const uint8_t *in, uint8_t *out, size_t len)
{
    int st = stream_ok(s);
    if (st != VC_OK)
        return st;
    if (vc_overlap_partial(in, out, len))
        return VC_ERR_OVERLAP;
    if ((st = vc_busy_enter(&s->busy)) != VC_OK)
        return st;
    st = ctx_update(&s->c, in, out, len);
    vc_busy_leave(&s->busy);
    return st;
}

/* The tag ends the stream: E_K(J0), the GHASH accumulator, the counter and
 * the partial block are wiped now, not when the stream is freed (which may be
 * much later, or never in a long-lived process that leaks it).  phase stays
 * PHASE_DONE, so every later call is VC_ERR_STATE. */
int vc_gcm_stream_finish(vc_gcm_stream *s, uint8_t *tag, size_t tag_len)
{
    uint8_t full[16];
    int st = stream_ok(s);
    if (st != VC_OK)
        return st;
    if (!tag)
        return VC_ERR_ARGUMENT;
    if ((st = vc_busy_enter(&s->busy)) != VC_OK)
        return st;
    if (s->c.phase == PHASE_DONE) {
        st = VC_ERR_STATE;
    } else if (!tag_len_ok(tag_len)) {
        st = VC_ERR_TAG_LENGTH;
    } else {
        ctx_tag(&s->c, full);
        ctx_wipe(&s->c);
        if (s->c.dir == VC_DIR_ENCRYPT)
            memcpy(tag, full, tag_len);
        else if (!vc_ct_memeq(full, tag, tag_len))
            st = VC_ERR_AUTH;
        vc_secure_zero(full, sizeof full);
    }
    vc_busy_leave(&s->busy);
    return st;
}
