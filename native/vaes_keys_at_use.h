/*
 * The round-key names of VC_KEYS_LOAD (k0, e0..e3, m0..m8, kl) as loads at
 * each use, for a tier with VC_KEYS_AT_USE (see vaes_common.h).  Included
 * twice inside a function: the first time defines the names (the function
 * holds k, its vc_aes_key, and km_ = k->rk[nr - 9]), the second removes
 * them, so that no other code of the tier sees them (ghash_init, for one,
 * has a variable named kl).  No include guard: the toggle is the point.
 */
#ifndef VC_KEYS_AT_USE_ON
#define VC_KEYS_AT_USE_ON
#define k0 VC_NAME(key_at)(k->rk[0])
#define e0 VC_NAME(key_at)(k->rk[1])
#define e1 VC_NAME(key_at)(k->rk[2])
#define e2 VC_NAME(key_at)(k->rk[3])
#define e3 VC_NAME(key_at)(k->rk[4])
#define m0 VC_NAME(key_at)(km_)
#define m1 VC_NAME(key_at)(km_ + 16)
#define m2 VC_NAME(key_at)(km_ + 32)
#define m3 VC_NAME(key_at)(km_ + 48)
#define m4 VC_NAME(key_at)(km_ + 64)
#define m5 VC_NAME(key_at)(km_ + 80)
#define m6 VC_NAME(key_at)(km_ + 96)
#define m7 VC_NAME(key_at)(km_ + 112)
#define m8 VC_NAME(key_at)(km_ + 128)
#define kl VC_NAME(key_at)(km_ + 144)
#else
#undef VC_KEYS_AT_USE_ON
#undef k0
#undef e0
#undef e1
#undef e2
#undef e3
#undef m0
#undef m1
#undef m2
#undef m3
#undef m4
#undef m5
#undef m6
#undef m7
#undef m8
#undef kl
#endif
