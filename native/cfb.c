/*
 * cfb.c - AES-CFB front-end (NIST SP 800-38A, segment sizes 128, 8 and 1).
 *
 * CFB128 data flow (s = 128; every "E" is the forward cipher):
 *
 *   encrypt (serial)                      decrypt (parallel)
 *   IV ->E-> ks1                          IV ->E-> ks1   C1 ->E-> ks2   C2 ->E-> ks3
 *   P1 ^ ks1 = C1 ->E-> ks2                      |              |              |
 *   P2 ^ ks2 = C2 ->E-> ks3               C1 ^ ks1 = P1  C2 ^ ks2 = P2  C3 ^ ks3 = P3
 *
 * Whole 16-byte segments go to the tier.  A message or stream chunk that
 * ends inside a segment is finished here: ks = E(feedback) is kept and `num`
 * counts the keystream bytes used (OpenSSL's `num`), while the ciphertext
 * bytes of the segment collect in cbuf; when the segment is complete cbuf
 * becomes the next feedback block.
 *
 * CFB8 (shift register by one byte per output byte) and CFB1 (by one bit)
 * are entirely in the tiers; streams only carry the register across calls.
 */
#include <string.h>

#include "front.h"

struct vc_cfb_key {
    uint32_t magic; /* VC_MAGIC_CFB_KEY, first: see vc_kind_is */
    vc_aes_key aes;
    const vc_tier *tier[VC_DIR_COUNT];
    int status[VC_DIR_COUNT];
    int path[VC_DIR_COUNT];
    int mode; /* VC_MODE_CFB128 / CFB8 / CFB1 */
};

struct vc_cfb_stream {
    uint32_t magic;               /* VC_MAGIC_CFB_STREAM (0 in a one-shot's frame) */
    alignas(16) uint8_t fb[16];   /* feedback register (IV, then ciphertext) */
    alignas(16) uint8_t ks[16];   /* CFB128: keystream of the open segment */
    alignas(16) uint8_t cbuf[16]; /* CFB128: ciphertext of the open segment */
    const vc_cfb_key *k;
    const vc_tier *t;
    int dir;
    unsigned num;                 /* CFB128: bytes of the open segment done, 0..15 */
    int ended;                    /* CFB1: a partial byte closed the stream */
    vc_busy busy;                 /* streams: set while a call runs */
};

/* As in gcm.c: VC_OK, VC_ERR_ARGUMENT (NULL) or VC_ERR_OBJECT (another
 * kind of object, or freed), checked before any other member is read. */
static int key_ok(const vc_cfb_key *k)
{
    return !k ? VC_ERR_ARGUMENT : vc_kind_is(k, VC_MAGIC_CFB_KEY) ? VC_OK : VC_ERR_OBJECT;
}

static int stream_ok(const vc_cfb_stream *s)
{
    return !s ? VC_ERR_ARGUMENT : vc_kind_is(s, VC_MAGIC_CFB_STREAM) ? VC_OK : VC_ERR_OBJECT;
}

static int mode_for_segment(int segment_bits)
{
    switch (segment_bits) {
    case 128: return VC_MODE_CFB128;
    case 8: return VC_MODE_CFB8;
    case 1: return VC_MODE_CFB1;
    default: return -1;
    }
}

int vc_cfb_key_new(vc_cfb_key **out, const uint8_t *key, size_t key_len, int segment_bits,
                   int impl)
{
    if (!out)
        return VC_ERR_ARGUMENT;
    *out = NULL;
    int mode = mode_for_segment(segment_bits);
    if (!key || mode < 0)
        return VC_ERR_ARGUMENT;
    if (key_len != 16 && key_len != 24 && key_len != 32)
        return VC_ERR_KEY_LENGTH;

    vc_path path[VC_DIR_COUNT];
    int st[VC_DIR_COUNT];
    for (int d = 0; d < VC_DIR_COUNT; d++)
        st[d] = vc_front_resolve((vc_mode)mode, (vc_dir)d, impl, &path[d]);
    if (st[VC_DIR_ENCRYPT] != VC_OK && st[VC_DIR_DECRYPT] != VC_OK)
        return st[VC_DIR_ENCRYPT];

    vc_cfb_key *k = vc_front_alloc(sizeof *k);
    if (!k)
        return VC_ERR_NOMEM;
    k->magic = VC_MAGIC_CFB_KEY;
    k->mode = mode;
    const vc_tier *first = NULL;
    for (int d = 0; d < VC_DIR_COUNT; d++) {
        k->status[d] = st[d];
        k->path[d] = st[d] == VC_OK ? (int)path[d] : st[d];
        if (st[d] != VC_OK)
            continue;
        k->tier[d] = vc_tier_get(path[d]);
        /* same round keys from every tier; each may add private material */
        if (!first || k->tier[d] != first)
            k->tier[d]->setkey(&k->aes, key, (unsigned)key_len * 8);
        if (!first)
            first = k->tier[d];
    }
    *out = k;
    return VC_OK;
}

/* Another kind of object is not freed (see vc_gcm_key_free). */
void vc_cfb_key_free(vc_cfb_key *k)
{
    if (key_ok(k) == VC_OK)
        vc_front_free(k, sizeof *k);
}

int vc_cfb_key_path(const vc_cfb_key *k, int dir)
{
    const int st = key_ok(k);
    if (st != VC_OK)
        return st;
    if (dir < 0 || dir >= VC_DIR_COUNT)
        return VC_ERR_ARGUMENT;
    return k->path[dir];
}

static void stream_init(vc_cfb_stream *s, const vc_cfb_key *k, int dir, const uint8_t iv[16])
{
    memset(s, 0, sizeof *s);
    vc_busy_init(&s->busy);
    memcpy(s->fb, iv, 16);
    s->k = k;
    s->t = k->tier[dir];
    s->dir = dir;
}

/* Bytes of in/out for a length argument (CFB1 counts bits). */
static size_t byte_len(const vc_cfb_key *k, size_t len)
{
    return k->mode == VC_MODE_CFB1 ? len / 8 + (len % 8 != 0) : len;
}

/* The engine behind one-shot calls and streams.  in == out is allowed. */
static void stream_run(vc_cfb_stream *s, const uint8_t *in, uint8_t *out, size_t len)
{
    const vc_tier *t = s->t;
    const vc_aes_key *aes = &s->k->aes;
    const int enc = s->dir == VC_DIR_ENCRYPT;

    if (!len)
        return;
    switch (s->k->mode) {
    case VC_MODE_CFB8:
        (enc ? t->cfb8_enc : t->cfb8_dec)(aes, s->fb, in, out, len);
        return;
    case VC_MODE_CFB1:
        (enc ? t->cfb1_enc : t->cfb1_dec)(aes, s->fb, in, out, len);
        if (len % 8)
            s->ended = 1;
        return;
    default:
        break;
    }

    /* CFB128: finish the open segment byte by byte ...  The index is read
     * once and masked to 0..15, its range between calls: the stream's busy
     * flag refuses a second thread, and even a race it missed (or a corrupt
     * struct) cannot index ks[] / cbuf[] past their 16 bytes. */
    unsigned num = s->num & 15u;
    if (num && len) {
        while (num < 16 && len) {
            uint8_t x = *in++;
            uint8_t y = x ^ s->ks[num];
            *out++ = y;
            s->cbuf[num++] = enc ? y : x; /* feedback is always ciphertext */
            len--;
        }
        if (num == 16) {
            memcpy(s->fb, s->cbuf, 16);
            num = 0;
        }
        s->num = num;
    }
    /* ... whole segments in the tier (it leaves the last C in fb) ... */
    size_t full = len & ~(size_t)15;
    if (full) {
        (enc ? t->cfb128_enc : t->cfb128_dec)(aes, s->fb, in, out, full);
        in += full;
        out += full;
        len -= full;
    }
    /* ... and open a new segment for the tail. */
    if (len) {
        t->encrypt_block(aes, s->fb, s->ks);
        for (size_t i = 0; i < len; i++) {
            uint8_t x = in[i];
            uint8_t y = x ^ s->ks[i];
            out[i] = y;
            s->cbuf[i] = enc ? y : x;
        }
        s->num = (unsigned)len;
    }
}

static int one_shot(const vc_cfb_key *k, int dir, const uint8_t iv[16], const uint8_t *in,
                    uint8_t *out, size_t len)
{
    const int kst = key_ok(k);
    if (kst != VC_OK)
        return kst;
    if (!iv)
        return VC_ERR_ARGUMENT;
    if ((!in || !out) && len)
        return VC_ERR_ARGUMENT;
    if (k->status[dir] != VC_OK)
        return k->status[dir];
    if (vc_overlap_partial(in, out, byte_len(k, len)))
        return VC_ERR_OVERLAP;
    vc_cfb_stream s;
    stream_init(&s, k, dir, iv);
    stream_run(&s, in, out, len);
    vc_secure_zero(&s, sizeof s);
    return VC_OK;
}

int vc_cfb_encrypt(const vc_cfb_key *k, const uint8_t iv[16], const uint8_t *in, uint8_t *out,
                   size_t len)
{
    return one_shot(k, VC_DIR_ENCRYPT, iv, in, out, len);
}

int vc_cfb_decrypt(const vc_cfb_key *k, const uint8_t iv[16], const uint8_t *in, uint8_t *out,
                   size_t len)
{
    return one_shot(k, VC_DIR_DECRYPT, iv, in, out, len);
}

int vc_cfb_stream_new(vc_cfb_stream **out, const vc_cfb_key *k, int dir, const uint8_t iv[16])
{
    if (!out)
        return VC_ERR_ARGUMENT;
    *out = NULL;
    const int kst = key_ok(k);
    if (kst != VC_OK)
        return kst;
    if (!iv || dir < 0 || dir >= VC_DIR_COUNT)
        return VC_ERR_ARGUMENT;
    if (k->status[dir] != VC_OK)
        return k->status[dir];
    vc_cfb_stream *s = vc_front_alloc(sizeof *s);
    if (!s)
        return VC_ERR_NOMEM;
    vc_fork_watch();
    stream_init(s, k, dir, iv);
    s->magic = VC_MAGIC_CFB_STREAM;
    *out = s;
    return VC_OK;
}

void vc_cfb_stream_free(vc_cfb_stream *s)
{
    if (stream_ok(s) == VC_OK) /* another kind: not freed, see vc_gcm_key_free */
        vc_front_free(s, sizeof *s);
}

int vc_cfb_stream_update(vc_cfb_stream *s, const uint8_t *in, uint8_t *out, size_t len)
{
    int st = stream_ok(s);
    if (st != VC_OK)
        return st;
    if ((!in || !out) && len)
        return VC_ERR_ARGUMENT;
    if (vc_overlap_partial(in, out, byte_len(s->k, len)))
        return VC_ERR_OVERLAP;
    /* one caller at a time: a concurrent call is refused, changes nothing */
    if ((st = vc_busy_enter(&s->busy)) != VC_OK)
        return st;
    st = VC_ERR_STATE;
    if (!s->ended) {
        stream_run(s, in, out, len);
        st = VC_OK;
    }
    vc_busy_leave(&s->busy);
    return st;
}
