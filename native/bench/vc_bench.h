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
/* AES issue rate of the widest unit of one register width: AES round
 * instructions x 128-bit lanes per second ("lane-rounds/s"; a zmm VAESENC
 * is 4), measured on independent accumulators with no memory traffic.
 * width_bits is 128 (AESENC xmm), 256 (VAESENC ymm, VEX) or 512 (VAESENC
 * zmm); VC_ERR_UNSUPPORTED where the CPU (or VAESCRYPT_CPU_MASK) lacks the
 * aesni / vaes_avx2 / avx512 path, VC_ERR_ARGUMENT for another width.
 * An upper bound on any AES path: blocks/s <= rate / Nr (see bench.c). */
double vc_bench_aes_issue(unsigned width_bits, double seconds);
/* VPCLMULQDQ issue rate (lane-multiplies per second) of one width, as
 * vc_bench_aes_issue: 128 (PCLMULQDQ), 256 or 512. */
double vc_bench_clmul_issue(unsigned width_bits, double seconds);
/* Passes per second of a loop of 27 VAESENC + 6 VPCLMULQDQ on independent
 * accumulators (width 256 or 512): how the two share the core's ports. */
double vc_bench_mix_passes(unsigned width_bits, double seconds);
/* Nanoseconds per chain of 64 dependent integer multiplies: the core's
 * state (quiet or slow), timed around each point. */
double vc_bench_chain_ns(double seconds);
/* Nanoseconds per 512-byte load-XOR-store pass over cache-resident buffers:
 * the slow state that only code touching memory sees, timed beside the
 * chain. */
double vc_bench_mem_ns(double seconds);
/* A bare 16-blocks-per-iteration zmm VAES CTR loop (keystream XOR input, no
 * GHASH): a measured reference point, NOT a bound.  VC_ERR_UNSUPPORTED on a
 * CPU without the avx512 path. */
double vc_bench_ctr_loop(unsigned key_bits, size_t size, double seconds);

#ifdef __cplusplus
}
#endif
#endif
