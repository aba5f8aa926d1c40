/* cffi declarations of vaescrypt._bench, the benchmark-only extension that
 * `python -m vaescrypt.bench` loads (never `import vaescrypt`).  Mirrors
 * native/bench/vc_bench.h (API mode: the compiler checks them against it).
 * mode/dir/path are the vc_mode / vc_dir / vc_path numbers of
 * vaescrypt._native (vaescrypt._names converts names to them). */

double vc_bench_lib(int mode, int dir, int path, unsigned key_bits, size_t size, double seconds);
double vc_bench_keysetup(int mode, int path, unsigned key_bits, double seconds);
double vc_bench_openssl(int mode, int dir, unsigned key_bits, size_t size, double seconds);
const char *vc_bench_openssl_version(void);
double vc_bench_aes_issue(unsigned width_bits, double seconds);
double vc_bench_ctr_loop(unsigned key_bits, size_t size, double seconds);
double vc_bench_clmul_issue(unsigned width_bits, double seconds);
double vc_bench_mix_passes(unsigned width_bits, double seconds);
double vc_bench_chain_ns(double seconds);
double vc_bench_mem_ns(double seconds);
