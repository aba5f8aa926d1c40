/*
 * vc_bench.h - C-loop throughput measurements for `python -m vaescrypt.bench`.
 *
 * Not part of the library: native/bench/ is compiled only into the separate
 * extension vaescrypt._bench (its own copy of the library objects plus
 * bench.c), which nothing but vaescrypt.bench imports.  The production
 * extension vaescrypt._native carries no benchmark code and no dlopen.
 *
 * Every function runs one operation repeatedly in C for about `seconds` and
 * returns MB/s (10^6 bytes of message per second), or a negative number when
 * the point cannot be measured (a vc_status for the library, -1 when
 * OpenSSL's libcrypto or the cipher is unavailable).
 *
 * mode/dir/path are vc_mode / vc_dir / vc_path values (path may be
 * VC_PATH_AUTO).  For CFB1 `size` is still in bytes (8*size bits are
 * processed).  GCM points use a 12-byte IV, 16 bytes of AAD and a 16-byte
 * tag; decryption verifies a valid tag each time.
 */
#ifndef VC_BENCH_H
#define VC_BENCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One-shot through the public API (vc_gcm_encrypt, vc_cfb_decrypt ...). */
double vc_bench_lib(int mode, int dir, int path, unsigned key_bits, size_t size, double seconds);
/* Nanoseconds per key set-up (vc_gcm_key_new / vc_cfb_key_new + free). */
double vc_bench_keysetup(int mode, int path, unsigned key_bits, double seconds);
/* The same operation through OpenSSL EVP (libcrypto.so.3 loaded at run time). */
double vc_bench_openssl(int mode, int dir, unsigned key_bits, size_t size, double seconds);
/* "OpenSSL x.y.z ..." or NULL when libcrypto.so.3 cannot be loaded. */
const char *vc_bench_openssl_version(void);
/* The roof: a bare 16-blocks-per-iteration zmm VAES CTR loop (keystream XOR
 * input, no GHASH); VC_ERR_UNSUPPORTED on a CPU without the avx512 path. */
double vc_bench_roof(unsigned key_bits, size_t size, double seconds);
/* The floor: the roof plus the 13 zmm VPCLMULQDQ per 16 blocks a Karatsuba
 * GHASH with one reduction per 16 blocks needs (no shuffles, no front-end).
 * Where VAES and VPCLMULQDQ share execution ports it bounds any GCM. */
double vc_bench_floor(unsigned key_bits, size_t size, double seconds);

#ifdef __cplusplus
}
#endif
#endif
