/*
 * A small program for the ptrace tracer's tests: it reports what CPUID and
 * XGETBV tell it, and runs SSC-marked regions whose exact instruction counts
 * the tests know.
 *
 *   traced_sample [--iters N] [--rep K] [--zmm] [--threads T] [--fork]
 *
 * Marked region (per call of marked_region()):
 *     mov ebx, 0x111 ; 64 67 90          start mark (not counted)
 *     mov ecx, N                         1
 *   1: aesenc xmm0, xmm1                 N
 *     dec ecx                            N
 *     jnz 1b                             N
 *     mov rcx, K ; rep movsb             1 + 1 (rep counted once per visit)
 *     [--zmm: vpxorq zmm2, zmm2, zmm2]   1
 *     mov ebx, 0x222 ; 64 67 90          1 (the mov) + stop mark (not counted)
 * Prints one JSON line with what the main thread (and threads / fork child) saw.
 */
#include <cpuid.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct seen {
    int avx2, aes, avx512f, osxsave;
    uint32_t max_leaf;
    char vendor[13];
    uint64_t xcr0;
};

static void observe(struct seen *s)
{
    unsigned a, b, c, d;
    __cpuid(0, a, b, c, d);
    s->max_leaf = a;
    memcpy(s->vendor, &b, 4);
    memcpy(s->vendor + 4, &d, 4);
    memcpy(s->vendor + 8, &c, 4);
    s->vendor[12] = 0;
    __cpuid(1, a, b, c, d);
    s->aes = (c >> 25) & 1;
    s->osxsave = (c >> 27) & 1;
    __cpuid_count(7, 0, a, b, c, d);
    s->avx2 = (b >> 5) & 1;
    s->avx512f = (b >> 16) & 1;
    /* XGETBV(0) executed whatever CPUID says, so the test sees the answer. */
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    s->xcr0 = ((uint64_t)hi << 32) | lo;
}

static unsigned iters = 100, rep = 7;
static int use_zmm;

__attribute__((noinline)) static void marked_region(void)
{
    static char src[64], dst[64];
    void *s = src, *d = dst;
    __asm__ volatile("mov $0x111, %%ebx\n\t.byte 0x64, 0x67, 0x90\n\t"
                     "mov %[n], %%ecx\n"
                     "1:\n\t"
                     "aesenc %%xmm1, %%xmm0\n\t"
                     "dec %%ecx\n\t"
                     "jnz 1b\n\t"
                     "mov %[k], %%rcx\n\t"
                     "rep movsb\n\t"
                     : "+S"(s), "+D"(d)
                     : [n] "r"(iters), [k] "r"((unsigned long)rep)
                     : "rbx", "rcx", "xmm0", "memory", "cc");
    if (use_zmm)
        __asm__ volatile(".byte 0x62, 0xf1, 0xed, 0x48, 0xef, 0xd2" /* vpxorq zmm2,zmm2,zmm2 */
                         ::: "xmm2");
    __asm__ volatile("mov $0x222, %%ebx\n\t.byte 0x64, 0x67, 0x90" ::: "rbx");
}

static void *thread_main(void *arg)
{
    observe((struct seen *)arg);
    marked_region();
    return NULL;
}

int main(int argc, char **argv)
{
    int nthreads = 0, do_fork = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = (unsigned)strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--rep") && i + 1 < argc)
            rep = (unsigned)strtoul(argv[++i], NULL, 0);
        else if (!strcmp(argv[i], "--zmm"))
            use_zmm = 1;
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            nthreads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--fork"))
            do_fork = 1;
        else {
            fprintf(stderr, "traced_sample: bad argument %s\n", argv[i]);
            return 2;
        }
    }
    if (iters == 0 || nthreads < 0 || nthreads > 8) {
        fprintf(stderr, "traced_sample: bad numbers\n");
        return 2;
    }
    struct seen me, th[8];
    observe(&me);
    marked_region();
    pthread_t tid[8];
    for (int i = 0; i < nthreads; i++)
        if (pthread_create(&tid[i], NULL, thread_main, &th[i]))
            return 1;
    for (int i = 0; i < nthreads; i++)
        pthread_join(tid[i], NULL);
    int child_avx2 = -1;
    if (do_fork) {
        int fds[2];
        if (pipe(fds))
            return 1;
        pid_t p = fork();
        if (p == 0) {
            struct seen cs;
            observe(&cs);
            char c = (char)('0' + cs.avx2);
            if (write(fds[1], &c, 1) != 1)
                _exit(1);
            _exit(0);
        }
        char c = '?';
        if (read(fds[0], &c, 1) == 1)
            child_avx2 = c - '0';
        waitpid(p, NULL, 0);
    }
    /* The probe report's fields (docs/PROBE.md) so the backend accepts it;
     * the digest is a dummy: this program plays the probe, it encrypts nothing. */
    printf("{\"probe\": 1, \"status\": \"ok\", \"mode\": \"gcm\", \"dir\": \"encrypt\", "
           "\"key_bits\": 128, \"length\": 16, \"seed\": 1, \"forced\": false, "
           "\"path\": \"aesni\", \"selected\": {}, \"features\": [], \"family\": 6, \"model\": 60, "
           "\"digest\": \"%064d\", \"out_len\": 32, ", 0);
    printf("\"vendor\": \"%s\", \"max_leaf\": %u, "
           "\"avx2\": %d, \"aes\": %d, \"avx512f\": %d, \"osxsave\": %d, "
           "\"xcr0\": \"0x%llx\", \"threads_avx2\": [",
           me.vendor, me.max_leaf, me.avx2, me.aes, me.avx512f, me.osxsave,
           (unsigned long long)me.xcr0);
    for (int i = 0; i < nthreads; i++)
        printf("%s%d", i ? ", " : "", th[i].avx2);
    printf("], \"threads_xcr0\": [");
    for (int i = 0; i < nthreads; i++)
        printf("%s\"0x%llx\"", i ? ", " : "", (unsigned long long)th[i].xcr0);
    printf("], \"fork_avx2\": %d}\n", child_avx2);
    return 0;
}
