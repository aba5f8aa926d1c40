/*
 * sha256.h - SHA-256 (FIPS 180-4) for the probe's output digest.
 *
 * The probe reports a digest rather than the output itself so that one JSON
 * line stays short whatever the message length; the host recomputes the same
 * digest from its own reference computation.
 */
#ifndef VC_PROBE_SHA256_H
#define VC_PROBE_SHA256_H

#include <stddef.h>
#include <stdint.h>

typedef struct sha256_ctx {
    uint32_t h[8];      /* chaining value H(i)                             */
    uint64_t total;     /* message bytes absorbed so far                   */
    uint8_t buf[64];    /* the pending, not yet compressed, partial block  */
    size_t fill;        /* bytes used in buf                               */
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const uint8_t *data, size_t len);
void sha256_final(sha256_ctx *c, uint8_t out[32]);
/* One shot; hex gets 64 lower-case hex digits and a NUL. */
void sha256_hex(const uint8_t *data, size_t len, char hex[65]);

#endif
