/*
 * vaescrypt.h - AES-128/192/256 in GCM and CFB (CFB128, CFB8, CFB1) with
 * run-time CPU dispatch.  The one public C header of the library.
 *
 * Every function returns VC_OK (0) or a negative vc_status.  Objects are
 * opaque and allocated by the library (they need 64-byte alignment).  Each
 * object carries a tag naming its kind, checked by every function before
 * anything else is read: an object of another kind (a CFB key passed as a
 * GCM key, a stream as a key) or a freed one is VC_ERR_OBJECT, and the
 * *_free functions leave such an object alone.
 *
 * fork(): a child's copies of idle streams work as in the parent.  A stream
 * that another thread was inside when the process forked is incomplete in
 * the child (that call stopped halfway): every call on it there returns
 * VC_ERR_FORKED; free it and start a new one.
 */
#ifndef VAESCRYPT_H
#define VAESCRYPT_H

#include <stddef.h>
#include <stdint.h>

#include "vc_dispatch.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vc_status {
    VC_OK = 0,
    VC_ERR_KEY_LENGTH = -1,    /* key is not 16, 24 or 32 bytes               */
    VC_ERR_IV_LENGTH = -2,     /* GCM IV empty or too long; CFB IV != 16      */
    VC_ERR_TAG_LENGTH = -3,    /* GCM tag not 4, 8, 12..16                    */
    VC_ERR_UNSUPPORTED = -4,   /* path not runnable on this CPU               */
    VC_ERR_INELIGIBLE = -5,    /* path not allowed for this mode              */
    VC_ERR_AUTH = -6,          /* GCM tag mismatch; no plaintext released     */
    VC_ERR_DATA_LENGTH = -7,   /* over the SP 800-38D limits                  */
    VC_ERR_STATE = -8,         /* streaming call out of order, or a stream
                                  used by two threads at once (refused)       */
    VC_ERR_NOMEM = -9,
    VC_ERR_ARGUMENT = -10,     /* bad mode/direction/segment size, NULL ptr   */
    VC_ERR_CPU_MASK = -11,     /* VAESCRYPT_CPU_MASK is invalid               */
    VC_ERR_OVERLAP = -12,      /* in and out overlap, but not exactly         */
    VC_ERR_OBJECT = -13,       /* not an object of the kind the call takes
                                  (a CFB key given as a GCM key ...), or freed */
    VC_ERR_FORKED = -14        /* a stream another thread was inside when the
                                  process forked: incomplete in this process  */
} vc_status;

const char *vc_status_message(int status);

/* ---------------------------------------------------------------- GCM -- */

/* SP 800-38D limits: plaintext <= 2^39 - 256 bits, AAD and IV < 2^64 bits. */
#define VC_GCM_MAX_DATA ((((uint64_t)1) << 36) - 32)
#define VC_GCM_MAX_AAD ((((uint64_t)1) << 61) - 1)
#define VC_GCM_MAX_IV ((((uint64_t)1) << 61) - 1)

typedef struct vc_gcm_key vc_gcm_key;
typedef struct vc_gcm_stream vc_gcm_stream;

/* impl: VC_PATH_AUTO (the dispatcher picks per direction) or a vc_path. */
int vc_gcm_key_new(vc_gcm_key **out, const uint8_t *key, size_t key_len, int impl);
void vc_gcm_key_free(vc_gcm_key *k);
/* The path the key uses for a direction. */
int vc_gcm_key_path(const vc_gcm_key *k, int dir);

/* out gets len bytes of ciphertext; tag gets tag_len bytes.  in == out
 * allowed; any other overlap of in and out is VC_ERR_OVERLAP (everywhere in
 * this header, GCM and CFB, one-shot and streaming). */
int vc_gcm_encrypt(const vc_gcm_key *k, const uint8_t *iv, size_t iv_len,
                   const uint8_t *aad, size_t aad_len, const uint8_t *in,
                   uint8_t *out, size_t len, uint8_t *tag, size_t tag_len);
/* On VC_ERR_AUTH, out is zeroed: no plaintext is released. */
int vc_gcm_decrypt(const vc_gcm_key *k, const uint8_t *iv, size_t iv_len,
                   const uint8_t *aad, size_t aad_len, const uint8_t *in,
                   uint8_t *out, size_t len, const uint8_t *tag, size_t tag_len);

/* Streaming: new -> aad* -> update* -> finish.  AAD must come before data.
 * The stream copies what it needs from the key but borrows it: keep the key
 * alive until the stream is freed.  A stream is for one caller at a time:
 * a call made while another call on the same stream is running (another
 * thread) is refused with VC_ERR_STATE and changes nothing.  finish wipes
 * the stream's secret state (E_K(J0), the GHASH accumulator, the counter,
 * the partial block). */
int vc_gcm_stream_new(vc_gcm_stream **out, const vc_gcm_key *k, int dir,
                      const uint8_t *iv, size_t iv_len);
void vc_gcm_stream_free(vc_gcm_stream *s);
int vc_gcm_stream_aad(vc_gcm_stream *s, const uint8_t *aad, size_t len);
int vc_gcm_stream_update(vc_gcm_stream *s, const uint8_t *in, uint8_t *out, size_t len);
/* Encrypt: writes the tag.  Decrypt: checks the tag in constant time. */
int vc_gcm_stream_finish(vc_gcm_stream *s, uint8_t *tag, size_t tag_len);

/* ---------------------------------------------------------------- CFB -- */

typedef struct vc_cfb_key vc_cfb_key;
typedef struct vc_cfb_stream vc_cfb_stream;

/* segment_bits: 128, 8 or 1.  impl as for GCM. */
int vc_cfb_key_new(vc_cfb_key **out, const uint8_t *key, size_t key_len,
                   int segment_bits, int impl);
void vc_cfb_key_free(vc_cfb_key *k);
int vc_cfb_key_path(const vc_cfb_key *k, int dir);

/* CFB128/CFB8: len bytes.  CFB1: len is a count of BITS; bits are taken
 * most-significant first from in[], written the same way to out[]; the unused
 * low bits of a final partial output byte are set to zero. */
int vc_cfb_encrypt(const vc_cfb_key *k, const uint8_t iv[16], const uint8_t *in,
                   uint8_t *out, size_t len);
int vc_cfb_decrypt(const vc_cfb_key *k, const uint8_t iv[16], const uint8_t *in,
                   uint8_t *out, size_t len);

/* Streams: one caller at a time, as for GCM (VC_ERR_STATE otherwise). */
int vc_cfb_stream_new(vc_cfb_stream **out, const vc_cfb_key *k, int dir,
                      const uint8_t iv[16]);
void vc_cfb_stream_free(vc_cfb_stream *s);
/* Same length rule as vc_cfb_encrypt.  CFB1 streams take whole bytes except
 * on the final call (a partial byte ends the stream: VC_ERR_STATE after). */
int vc_cfb_stream_update(vc_cfb_stream *s, const uint8_t *in, uint8_t *out, size_t len);

/* ------------------------------------------------------------ version -- */
const char *vc_version(void);

/* Path selection for this library (native/select.c): the pure policy of
 * vc_dispatch.h given the paths this library has code for. */
/* 1 when the library has every operation (mode, dir) needs on path p. */
int vc_path_implemented(vc_mode m, vc_dir d, vc_path p);
/* The policy for the CPU described by f / for this CPU. */
vc_path vc_select_with(const vc_cpu_features *f, vc_mode m, vc_dir d);
vc_path vc_select(vc_mode m, vc_dir d);
/* Paths usable for the mode on this CPU, best first.  Returns the count
 * written to out[]. */
int vc_available(vc_mode m, vc_dir d, int out[VC_PATH_COUNT]);
/* A one-line explanation of why vc_select_with picks what it picks. */
int vc_explain(const vc_cpu_features *f, vc_mode m, vc_dir d, char *buf, int buflen);

#ifdef __cplusplus
}
#endif
#endif
