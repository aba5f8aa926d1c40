/*
 * sse41_aesni_tier.c - TEST ONLY: an aesni tier that is known to execute an
 * SSE4.1 instruction, linked into a test probe with -Wl,--wrap=vc_tier_get.
 *
 * tests/test_trap_models.py pins that the chip check catches an aesni tier
 * running outside a CPU model's ISA (AES-NI without SSE4.1, the kvm64 +aes
 * trap).  Today's real aesni tier happens to use PEXTRD/PSHUFB; once the
 * library is fixed it may not, and a test built on it would then pass for
 * the wrong reason.  This file keeps the bad instruction deterministic: the
 * key set-up of the wrapped tier runs the real AES-NI key expansion and then
 * one PEXTRD (66 0F 3A 16 /r ib, SSE4.1) on the first round-key word, written
 * as inline asm so no compiler can fold it into a plain load.  The result is
 * discarded (stored to a volatile sink): the cipher output is unchanged, only
 * the instruction mix differs.
 */
#include <stdint.h>
#include <string.h>

#include "internal.h"

const vc_tier *__real_vc_tier_get(vc_path p);
const vc_tier *__wrap_vc_tier_get(vc_path p);

static volatile uint32_t trap_sink;

__attribute__((target("sse4.1"), noinline))
void vc_trap_sse41_setkey(vc_aes_key *k, const uint8_t *key, unsigned key_bits)
{
    const vc_tier *real = __real_vc_tier_get(VC_PATH_AESNI);
    uint32_t lane;
    real->setkey(k, key, key_bits);
    __asm__ volatile("movdqu (%1), %%xmm0\n\tpextrd $1, %%xmm0, %0"
                     : "=r"(lane) : "r"(key) : "xmm0", "memory");
    trap_sink = lane;
}

const vc_tier *__wrap_vc_tier_get(vc_path p)
{
    static vc_tier trap;
    const vc_tier *real = __real_vc_tier_get(p);
    if (p != VC_PATH_AESNI || real == NULL || real->setkey == NULL)
        return real;
    memcpy(&trap, real, sizeof trap);
    trap.setkey = vc_trap_sse41_setkey;
    return &trap;
}
