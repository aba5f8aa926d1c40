/*
 * probe_main.c - vc-probe: run one vaescrypt operation between SSC marks and
 * report what ran as one JSON line (contract: docs/PROBE.md).
 *
 * The probe is what every sdematrix backend executes under its emulator or
 * tracer.  It must therefore be small, deterministic and self-checking:
 *
 *   seed --splitmix64--> key | iv | aad | data        (same stream on the host)
 *          |
 *          |  mark 0x111  ----------------------------------------.
 *          |     library init (first call: CPU detection)          |
 *          |     key set-up (the chosen path's key schedule)       |
 *          |     one encrypt / decrypt call                        | measured
 *          |     key free (--impl / auto: the API's key object)    |
 *          |  mark 0x222  ----------------------------------------'
 *          v
 *   SHA-256(output) --> JSON {path, features, selected, digest, ...}
 *
 * Two ways of choosing the code path:
 *   --impl P        through the public API: a path the CPU lacks is refused
 *                   by the library (status "unsupported"), as a user sees it;
 *   --force-tier P  straight into the tier's function table, skipping the
 *                   dispatcher's supported check, so that an emulator's chip
 *                   check (or a real SIGILL) can be shown to fire.  This
 *                   needs a tiny GCM/CFB front-end of its own (below).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "sha256.h"
#include "vaescrypt.h"
#include "vc_dispatch.h"

#define EXIT_PROBE_OK 0
#define EXIT_PROBE_USAGE 2
#define EXIT_PROBE_FAILED 3

/* Upper bound on --length: keeps the three buffers and CFB1's bit count
 * (8 * length) far from any overflow. */
#define PROBE_MAX_LENGTH ((size_t)1 << 30)
#define GCM_IV_BYTES 12
#define GCM_AAD_BYTES 16
#define GCM_TAG_BYTES 16
#define CFB_IV_BYTES 16

/* ------------------------------------------------------------ SSC marks --
 * `mov ebx, imm32` followed by `64 67 90` (fs addr32 nop): a no-op on
 * hardware that SDE (and our QEMU plugin / ptrace tracer) recognise as a
 * region boundary.  ebx is overwritten, so rbx is declared clobbered and
 * the compiler preserves it; the memory clobber keeps the workload's loads
 * and stores from being moved across the mark. */
static inline void ssc_mark_start(void)
{
    __asm__ volatile("movl $0x111, %%ebx\n\t.byte 0x64, 0x67, 0x90" ::: "rbx", "memory");
}

static inline void ssc_mark_stop(void)
{
    __asm__ volatile("movl $0x222, %%ebx\n\t.byte 0x64, 0x67, 0x90" ::: "rbx", "memory");
}

/* ----------------------------------------------------------- options -- */

typedef struct probe_opts {
    int mode;          /* vc_mode                                           */
    int dir;           /* vc_dir                                            */
    unsigned key_bits; /* 128 / 192 / 256                                   */
    size_t length;     /* bytes of data (CFB1: 8 * length bits)             */
    uint64_t seed;
    int impl;          /* VC_PATH_AUTO or a vc_path                         */
    int force_tier;    /* -1 or a vc_path                                   */
    unsigned long repeat;
} probe_opts;

static const char usage_text[] =
    "usage: vc-probe --mode gcm|cfb128|cfb8|cfb1 --dir encrypt|decrypt "
    "--key-bits 128|192|256 --length N [--seed S] "
    "[--impl auto|generic|aesni|vaes_avx2|avx10_256|avx512] [--force-tier PATH] "
    "[--repeat R]";

static int usage_error(const char *what, const char *arg)
{
    if (arg)
        fprintf(stderr, "vc-probe: %s: '%s' (try --help)\n", what, arg);
    else
        fprintf(stderr, "vc-probe: %s (try --help)\n", what);
    return EXIT_PROBE_USAGE;
}

/* Strict unsigned parse: decimal or 0x-hex, whole string, no sign. */
static int parse_u64(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+' || *s == ' ')
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno || !end || *end)
        return 0;
    *out = (uint64_t)v;
    return 1;
}

static int parse_args(int argc, char **argv, probe_opts *o)
{
    int have_mode = 0, have_dir = 0, have_bits = 0, have_len = 0, have_impl = 0;
    o->seed = 1;
    o->impl = VC_PATH_AUTO;
    o->force_tier = -1;
    o->repeat = 1;

    for (int i = 1; i < argc; i++) {
        const char *name = argv[i];
        if (!strcmp(name, "--help") || !strcmp(name, "-h")) {
            puts(usage_text);
            exit(EXIT_PROBE_OK);
        }
        /* Accept both "--opt value" and "--opt=value". */
        const char *val = NULL;
        char namebuf[32];
        const char *eq = strchr(name, '=');
        if (eq && (size_t)(eq - name) < sizeof namebuf) {
            memcpy(namebuf, name, (size_t)(eq - name));
            namebuf[eq - name] = '\0';
            name = namebuf;
            val = eq + 1;
        } else {
            if (i + 1 >= argc)
                return usage_error(strncmp(name, "--", 2) ? "unexpected argument"
                                                          : "option needs a value",
                                   name);
            val = argv[++i];
        }
        uint64_t n = 0;
        if (!strcmp(name, "--mode")) {
            o->mode = vc_mode_from_name(val);
            if (o->mode < 0)
                return usage_error("unknown --mode", val);
            have_mode = 1;
        } else if (!strcmp(name, "--dir")) {
            if (!strcmp(val, "encrypt"))
                o->dir = VC_DIR_ENCRYPT;
            else if (!strcmp(val, "decrypt"))
                o->dir = VC_DIR_DECRYPT;
            else
                return usage_error("--dir must be encrypt or decrypt", val);
            have_dir = 1;
        } else if (!strcmp(name, "--key-bits")) {
            if (!parse_u64(val, &n) || (n != 128 && n != 192 && n != 256))
                return usage_error("--key-bits must be 128, 192 or 256", val);
            o->key_bits = (unsigned)n;
            have_bits = 1;
        } else if (!strcmp(name, "--length")) {
            if (!parse_u64(val, &n) || n > PROBE_MAX_LENGTH)
                return usage_error("--length must be an integer 0..2^30", val);
            o->length = (size_t)n;
            have_len = 1;
        } else if (!strcmp(name, "--seed")) {
            if (!parse_u64(val, &n))
                return usage_error("--seed must be an unsigned 64-bit integer", val);
            o->seed = n;
        } else if (!strcmp(name, "--impl")) {
            if (!strcmp(val, "auto")) {
                o->impl = VC_PATH_AUTO;
            } else {
                o->impl = vc_path_from_name(val);
                if (o->impl < 0)
                    return usage_error("unknown --impl path", val);
            }
            have_impl = 1;
        } else if (!strcmp(name, "--force-tier")) {
            o->force_tier = vc_path_from_name(val);
            if (o->force_tier < 0)
                return usage_error("unknown --force-tier path", val);
        } else if (!strcmp(name, "--repeat")) {
            if (!parse_u64(val, &n) || n < 1 || n > 1000000)
                return usage_error("--repeat must be 1..1000000", val);
            o->repeat = (unsigned long)n;
        } else {
            return usage_error("unknown option", name);
        }
    }
    if (!have_mode || !have_dir || !have_bits || !have_len)
        return usage_error("--mode, --dir, --key-bits and --length are required", NULL);
    if (have_impl && o->force_tier >= 0)
        return usage_error("--impl and --force-tier are exclusive", NULL);
    return -1; /* parsed */
}

/* ------------------------------------------------------------ inputs --
 * splitmix64 (Steele, Lea, Flood 2014): a Weyl sequence scrambled by two
 * xor-shift-multiply rounds.  The host regenerates the identical stream in
 * Python (sdematrix.backends.probe.derive_inputs), so every byte is reproducible. */
typedef struct byte_stream {
    uint64_t state;
    uint8_t word[8];
    unsigned used; /* bytes of word already handed out (8 = empty) */
} byte_stream;

static uint64_t splitmix64_next(uint64_t *state)
{
    *state += 0x9E3779B97F4A7C15ull;
    uint64_t z = *state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void stream_fill(byte_stream *s, uint8_t *out, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s->used == 8) {
            uint64_t z = splitmix64_next(&s->state);
            for (unsigned b = 0; b < 8; b++)
                s->word[b] = (uint8_t)(z >> (8 * b)); /* little-endian bytes */
            s->used = 0;
        }
        out[i] = s->word[s->used++];
    }
}

typedef struct probe_inputs {
    uint8_t key[32];
    uint8_t iv[16];
    size_t iv_len;
    uint8_t aad[GCM_AAD_BYTES];
    size_t aad_len;
    uint8_t *data; /* length bytes (at least 1 allocated) */
} probe_inputs;

static int derive_inputs(const probe_opts *o, probe_inputs *in)
{
    byte_stream s = {.state = o->seed, .used = 8};
    int gcm = o->mode == VC_MODE_GCM;
    in->iv_len = gcm ? GCM_IV_BYTES : CFB_IV_BYTES;
    in->aad_len = gcm ? GCM_AAD_BYTES : 0;
    in->data = malloc(o->length ? o->length : 1);
    if (!in->data)
        return 0;
    stream_fill(&s, in->key, o->key_bits / 8);
    stream_fill(&s, in->iv, in->iv_len);
    stream_fill(&s, in->aad, in->aad_len);
    stream_fill(&s, in->data, o->length);
    return 1;
}

/* ------------------------------------------------------------ result -- */

typedef struct probe_result {
    const char *status;  /* "ok" | "unsupported" | "auth_failed" | "error" */
    char message[160];   /* when status != ok                              */
    int path;            /* path the operation used (or was asked for), -1 */
    uint8_t *out;
    size_t out_len;
} probe_result;

static void set_failure(probe_result *r, const char *status, const char *fmt, const char *a,
                        const char *b)
{
    r->status = status;
    snprintf(r->message, sizeof r->message, fmt, a ? a : "", b ? b : "");
}

/* Map a library status to the probe's status vocabulary. */
static void set_lib_failure(probe_result *r, int st, const char *what)
{
    const char *msg = vc_status_message(st);
    if (st == VC_ERR_UNSUPPORTED || st == VC_ERR_INELIGIBLE)
        set_failure(r, "unsupported", "%s: %s", what, msg);
    else if (st == VC_ERR_AUTH)
        set_failure(r, "auth_failed", "%s: %s", what, msg);
    else
        set_failure(r, "error", "%s: %s", what, msg);
}

/* ---------------------------------------------- through the public API -- */

static int prepare_gcm_ciphertext(const probe_opts *o, const probe_inputs *in, uint8_t *ct,
                                  uint8_t tag[GCM_TAG_BYTES]);

static void run_api(const probe_opts *o, const probe_inputs *in, probe_result *r)
{
    const uint8_t *src = in->data;
    uint8_t *ct = NULL;
    uint8_t tag[GCM_TAG_BYTES];
    int st;

    if (o->mode == VC_MODE_GCM && o->dir == VC_DIR_DECRYPT) {
        /* Make a valid ciphertext + tag first, outside the measured region
         * (see prepare_gcm_ciphertext: the library's CPU detection still
         * runs first inside the region). */
        ct = malloc(o->length ? o->length : 1);
        if (!ct) {
            set_failure(r, "error", "out of memory%s%s", NULL, NULL);
            return;
        }
        st = prepare_gcm_ciphertext(o, in, ct, tag);
        if (st != VC_OK) {
            set_lib_failure(r, st, "preparing the ciphertext");
            free(ct);
            return;
        }
        src = ct;
    }

    for (unsigned long rep = 0; rep < o->repeat; rep++) {
        if (o->mode == VC_MODE_GCM) {
            vc_gcm_key *k = NULL;
            ssc_mark_start();
            st = vc_gcm_key_new(&k, in->key, o->key_bits / 8, o->impl);
            if (st == VC_OK) {
                if (o->dir == VC_DIR_ENCRYPT)
                    st = vc_gcm_encrypt(k, in->iv, in->iv_len, in->aad, in->aad_len, src,
                                        r->out, o->length, r->out + o->length, GCM_TAG_BYTES);
                else
                    st = vc_gcm_decrypt(k, in->iv, in->iv_len, in->aad, in->aad_len, src,
                                        r->out, o->length, tag, sizeof tag);
            }
            if (k)
                r->path = vc_gcm_key_path(k, o->dir);
            vc_gcm_key_free(k); /* key free is part of what is measured */
            ssc_mark_stop();
        } else {
            static const int seg_bits[VC_MODE_COUNT] = {0, 128, 8, 1};
            size_t units = o->mode == VC_MODE_CFB1 ? 8 * o->length : o->length;
            vc_cfb_key *k = NULL;
            ssc_mark_start();
            st = vc_cfb_key_new(&k, in->key, o->key_bits / 8, seg_bits[o->mode], o->impl);
            if (st == VC_OK) {
                if (o->dir == VC_DIR_ENCRYPT)
                    st = vc_cfb_encrypt(k, in->iv, src, r->out, units);
                else
                    st = vc_cfb_decrypt(k, in->iv, src, r->out, units);
            }
            if (k)
                r->path = vc_cfb_key_path(k, o->dir);
            vc_cfb_key_free(k);
            ssc_mark_stop();
        }
        if (st != VC_OK) {
            if (r->path < 0 && o->impl != VC_PATH_AUTO)
                r->path = o->impl;
            set_lib_failure(r, st, o->mode == VC_MODE_GCM ? "gcm" : "cfb");
            break;
        }
    }
    free(ct);
}

/* ------------------------------------------------- straight into a tier --
 * A minimal GCM (SP 800-38D, 96-bit IV only) and CFB front-end on top of a
 * vc_tier, used by --force-tier.  Nothing here asks whether the CPU has the
 * tier's instructions: that is the point.
 *
 *   GCM:  H   = E_K(0^128)
 *         J0  = IV || 0^31 || 1
 *         X   = GHASH_H(AAD (whole blocks here: 16 bytes))
 *         C,X = tier.gcm_enc(ctr = inc32(J0), ...)      CTR + GHASH of C
 *         X   = GHASH_H(X, [len(A)]_64 || [len(C)]_64)  lengths in bits
 *         T   = E_K(J0) ^ X
 */

static void put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (56 - 8 * i));
}

static void inc32(uint8_t ctr[16])
{
    /* Only the last 32 bits count, big-endian, wrapping without carry. */
    for (int i = 15; i >= 12; i--)
        if (++ctr[i] != 0)
            break;
}

typedef struct forced_state {
    vc_aes_key aes;   /* 64-byte aligned by its own alignas */
    vc_ghash_key gh;
} forced_state;

static int forced_gcm(const vc_tier *t, const probe_opts *o, const probe_inputs *in,
                      const uint8_t *src, const uint8_t *want_tag, uint8_t *out, uint8_t *tag,
                      forced_state *fs)
{
    static const uint8_t zero[16] = {0};
    uint8_t j0[16], ctr[16], x[16] = {0}, ej0[16], lens[16];

    t->setkey(&fs->aes, in->key, o->key_bits);
    t->encrypt_block(&fs->aes, zero, fs->gh.h);
    t->ghash_init(&fs->gh);

    memcpy(j0, in->iv, GCM_IV_BYTES);
    j0[12] = 0, j0[13] = 0, j0[14] = 0, j0[15] = 1;
    memcpy(ctr, j0, 16);
    inc32(ctr);

    t->ghash(&fs->gh, x, in->aad, in->aad_len);
    if (o->dir == VC_DIR_ENCRYPT)
        t->gcm_enc(&fs->aes, &fs->gh, ctr, x, src, out, o->length);
    else
        t->gcm_dec(&fs->aes, &fs->gh, ctr, x, src, out, o->length);
    put_be64(lens, (uint64_t)in->aad_len * 8u);
    put_be64(lens + 8, (uint64_t)o->length * 8u);
    t->ghash(&fs->gh, x, lens, 16);
    t->encrypt_block(&fs->aes, j0, ej0);
    for (int i = 0; i < 16; i++)
        tag[i] = (uint8_t)(ej0[i] ^ x[i]);
    if (o->dir == VC_DIR_DECRYPT && !vc_ct_memeq(tag, want_tag, GCM_TAG_BYTES)) {
        vc_secure_zero(out, o->length);
        return VC_ERR_AUTH;
    }
    return VC_OK;
}

/* The ciphertext and tag a GCM decrypt cell decrypts, made with the generic
 * tier's functions called directly: vc_tier_get() does not run the
 * dispatcher, so the library's one-time CPU detection (CPUID / XGETBV,
 * vc_cpu_features_get) first runs inside the marked region, as it does in
 * an encrypt cell, and the region covers library init, key set-up, the
 * operation and key free alike for every API cell.  AES-GCM is
 * deterministic: every tier gives these bytes. */
static int prepare_gcm_ciphertext(const probe_opts *o, const probe_inputs *in, uint8_t *ct,
                                  uint8_t tag[GCM_TAG_BYTES])
{
    probe_opts enc = *o;
    enc.dir = VC_DIR_ENCRYPT;
    forced_state *fs = aligned_alloc(VC_ALIGN, sizeof *fs);
    if (!fs)
        return VC_ERR_NOMEM;
    int st = forced_gcm(vc_tier_get(VC_PATH_GENERIC), &enc, in, in->data, NULL, ct, tag, fs);
    vc_secure_zero(fs, sizeof *fs);
    free(fs);
    return st;
}

/* CFB128 on a tier: whole blocks go to the tier; a final partial block is
 * E_K(last ciphertext block) XOR the remaining bytes (same both ways). */
static void forced_cfb128(const vc_tier *t, const probe_opts *o, const uint8_t *src,
                          uint8_t *out, uint8_t iv[16], forced_state *fs)
{
    size_t whole = o->length & ~(size_t)15;
    if (whole) {
        if (o->dir == VC_DIR_ENCRYPT)
            t->cfb128_enc(&fs->aes, iv, src, out, whole);
        else
            t->cfb128_dec(&fs->aes, iv, src, out, whole);
    }
    if (whole < o->length) {
        uint8_t ks[16];
        t->encrypt_block(&fs->aes, iv, ks);
        for (size_t i = whole; i < o->length; i++)
            out[i] = (uint8_t)(src[i] ^ ks[i - whole]);
    }
}

static void run_forced(const probe_opts *o, const probe_inputs *in, probe_result *r)
{
    const char *pname = vc_path_name((vc_path)o->force_tier);
    const vc_tier *t = vc_tier_get((vc_path)o->force_tier);
    r->path = o->force_tier;

    /* The members this operation needs. */
    int have = t && t->setkey && t->encrypt_block;
    if (have && o->mode == VC_MODE_GCM)
        have = t->ghash_init && t->ghash && (o->dir == VC_DIR_ENCRYPT ? t->gcm_enc != NULL
                                                                       : t->gcm_dec != NULL);
    else if (have && o->mode == VC_MODE_CFB128)
        have = o->dir == VC_DIR_ENCRYPT ? t->cfb128_enc != NULL : t->cfb128_dec != NULL;
    else if (have && o->mode == VC_MODE_CFB8)
        have = o->dir == VC_DIR_ENCRYPT ? t->cfb8_enc != NULL : t->cfb8_dec != NULL;
    else if (have && o->mode == VC_MODE_CFB1)
        have = o->dir == VC_DIR_ENCRYPT ? t->cfb1_enc != NULL : t->cfb1_dec != NULL;
    if (!have) {
        set_failure(r, "unsupported", "tier %s does not implement %s", pname,
                    vc_mode_name((vc_mode)o->mode));
        return;
    }

    forced_state *fs = aligned_alloc(VC_ALIGN, sizeof *fs);
    uint8_t *ct = malloc(o->length ? o->length : 1);
    if (!fs || !ct) {
        free(fs);
        free(ct);
        set_failure(r, "error", "out of memory%s%s", NULL, NULL);
        return;
    }
    const uint8_t *src = in->data;
    uint8_t want_tag[GCM_TAG_BYTES] = {0};
    if (o->mode == VC_MODE_GCM && o->dir == VC_DIR_DECRYPT) {
        /* As in run_api: the ciphertext is made outside the region. */
        int st = prepare_gcm_ciphertext(o, in, ct, want_tag);
        if (st != VC_OK) {
            set_lib_failure(r, st, "preparing the ciphertext");
            goto done;
        }
        src = ct;
    }

    for (unsigned long rep = 0; rep < o->repeat; rep++) {
        uint8_t iv[16];
        int st = VC_OK;
        memcpy(iv, in->iv, sizeof iv);
        ssc_mark_start();
        if (o->mode == VC_MODE_GCM) {
            /* Encrypt appends the tag to the output; decrypt computes it
             * aside and compares with want_tag. */
            uint8_t tag[GCM_TAG_BYTES];
            st = forced_gcm(t, o, in, src, want_tag, r->out,
                            o->dir == VC_DIR_ENCRYPT ? r->out + o->length : tag, fs);
        } else {
            t->setkey(&fs->aes, in->key, o->key_bits);
            if (o->mode == VC_MODE_CFB128)
                forced_cfb128(t, o, src, r->out, iv, fs);
            else if (o->mode == VC_MODE_CFB8)
                (o->dir == VC_DIR_ENCRYPT ? t->cfb8_enc : t->cfb8_dec)(&fs->aes, iv, src, r->out,
                                                                       o->length);
            else
                (o->dir == VC_DIR_ENCRYPT ? t->cfb1_enc : t->cfb1_dec)(&fs->aes, iv, src, r->out,
                                                                       8 * o->length);
        }
        ssc_mark_stop();
        if (st != VC_OK) {
            set_lib_failure(r, st, "gcm");
            break;
        }
    }
done:
    vc_secure_zero(fs, sizeof *fs);
    free(fs);
    free(ct);
}

/* -------------------------------------------------------------- JSON -- */

static void json_str(const char *s)
{
    if (!s) {
        fputs("null", stdout);
        return;
    }
    putchar('"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            printf("\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f)
            printf("\\u%04x", *p);
        else
            putchar(*p);
    }
    putchar('"');
}

static void json_path(int p)
{
    json_str(p >= 0 && p < VC_PATH_COUNT ? vc_path_name((vc_path)p) : NULL);
}

static void print_report(const probe_opts *o, const probe_result *r)
{
    const vc_cpu_features *f = vc_cpu_features_get();
    int ok = !strcmp(r->status, "ok");

    printf("{\"probe\": 1, \"status\": ");
    json_str(r->status);
    printf(", \"mode\": ");
    json_str(vc_mode_name((vc_mode)o->mode));
    printf(", \"dir\": ");
    json_str(vc_dir_name((vc_dir)o->dir));
    printf(", \"key_bits\": %u, \"length\": %zu, \"seed\": %" PRIu64, o->key_bits, o->length,
           o->seed);
    printf(", \"path\": ");
    json_path(r->path);
    printf(", \"forced\": %s",
           (o->force_tier >= 0 || o->impl != VC_PATH_AUTO) ? "true" : "false");
    printf(", \"force_tier\": %s", o->force_tier >= 0 ? "true" : "false");
    printf(", \"repeat\": %lu", o->repeat);

    /* What the dispatcher picks, and what it could run, per (mode, dir). */
    printf(", \"selected\": {");
    for (int m = 0; m < VC_MODE_COUNT; m++) {
        printf("%s", m ? ", " : "");
        json_str(vc_mode_name((vc_mode)m));
        printf(": {");
        for (int d = 0; d < VC_DIR_COUNT; d++) {
            printf("%s", d ? ", " : "");
            json_str(vc_dir_name((vc_dir)d));
            printf(": ");
            json_path(vc_select((vc_mode)m, (vc_dir)d));
        }
        printf("}");
    }
    printf("}, \"available\": {");
    for (int m = 0; m < VC_MODE_COUNT; m++) {
        printf("%s", m ? ", " : "");
        json_str(vc_mode_name((vc_mode)m));
        printf(": {");
        for (int d = 0; d < VC_DIR_COUNT; d++) {
            int paths[VC_PATH_COUNT];
            int n = vc_available((vc_mode)m, (vc_dir)d, paths);
            printf("%s", d ? ", " : "");
            json_str(vc_dir_name((vc_dir)d));
            printf(": [");
            for (int i = 0; i < n; i++) {
                printf("%s", i ? ", " : "");
                json_path(paths[i]);
            }
            printf("]");
        }
        printf("}");
    }
    printf("}, \"features\": [");
    int first = 1;
    for (int i = 0; f && i < VC_F_COUNT; i++) {
        if (VC_HAS(f, i)) {
            printf("%s", first ? "" : ", ");
            json_str(vc_feature_name((vc_feature)i));
            first = 0;
        }
    }
    printf("], \"vendor\": ");
    json_str(f ? f->vendor : NULL);
    printf(", \"family\": %u, \"model\": %u, \"xcr0\": \"0x%" PRIx64 "\"", f ? f->family : 0u,
           f ? f->model : 0u, f ? f->xcr0 : (uint64_t)0);
    printf(", \"mask_error\": ");
    json_str(vc_dispatch_error());
    if (ok) {
        char hex[65];
        sha256_hex(r->out, r->out_len, hex);
        printf(", \"digest\": \"%s\", \"out_len\": %zu", hex, r->out_len);
    } else {
        printf(", \"digest\": null, \"out_len\": null, \"message\": ");
        json_str(r->message);
    }
    printf("}\n");
    fflush(stdout);
}

int main(int argc, char **argv)
{
    probe_opts o;
    memset(&o, 0, sizeof o);
    int rc = parse_args(argc, argv, &o);
    if (rc >= 0)
        return rc;

    probe_inputs in;
    memset(&in, 0, sizeof in);
    probe_result r;
    memset(&r, 0, sizeof r);
    r.status = "ok";
    r.path = -1;
    r.out_len = o.length + (o.mode == VC_MODE_GCM && o.dir == VC_DIR_ENCRYPT ? GCM_TAG_BYTES : 0);
    r.out = calloc(r.out_len ? r.out_len : 1, 1);

    if (!r.out || !derive_inputs(&o, &in))
        set_failure(&r, "error", "out of memory%s%s", NULL, NULL);
    else if (o.force_tier >= 0)
        run_forced(&o, &in, &r);
    else
        run_api(&o, &in, &r);

    print_report(&o, &r);
    vc_secure_zero(in.key, sizeof in.key);
    free(in.data);
    free(r.out);
    return strcmp(r.status, "ok") ? EXIT_PROBE_FAILED : EXIT_PROBE_OK;
}
