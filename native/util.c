/*
 * util.c - the two constant-time helpers every front-end uses.
 */
#include <string.h>

#include "internal.h"

/* 1 if a[0..n) == b[0..n), else 0.  Reads every byte whatever the data and
 * never branches on it: the running OR of the XORs is folded to one bit by
 * arithmetic (d - 1 borrows into bit 8 exactly when d == 0). */
int vc_ct_memeq(const uint8_t *a, const uint8_t *b, size_t n)
{
    uint32_t d = 0;
    for (size_t i = 0; i < n; i++)
        d |= (uint32_t)(a[i] ^ b[i]);
    return (int)(((d - 1u) >> 8) & 1u);
}
