/*
 * A program for the ptrace tracer's tests of what happens *inside* a marked
 * region besides straight-line code: signals, threads and child processes
 * created while the tracer single-steps.
 *
 *   traced_events --alarm N [US] a profiling interval timer (ITIMER_PROF:
 *                                SIGPROF every US microseconds, default 1000,
 *                                of the process's own CPU time) runs while
 *                                the region executes a counted loop of N turns:
 *                                    mov ecx, N          1
 *                                 1: dec ecx             N
 *                                    jnz 1b              N
 *                                the handler (on_alarm) counts its calls.
 *                                CPU time, not wall time: a traced process
 *                                spends most of its wall time stopped while
 *                                the tracer works, so a wall-clock timer
 *                                (ITIMER_REAL) on a slow host (TCG, a loaded
 *                                machine) fires before the single-stepped
 *                                handler returns, a signal is pending at
 *                                every sigreturn, and the loop never
 *                                advances (a livelock, not slowness).  The
 *                                process's CPU time grows only with the
 *                                steps it really runs; a host that is slower
 *                                per step still passes a longer US.
 *   traced_events --spawn-zmm    the region creates a thread that executes
 *                                `vpxorq zmm3, zmm3, zmm3` (no marks of its
 *                                own) and joins it.
 *   traced_events --fork-zmm     the same in a forked child process.
 *   traced_events --spawn-ymm    --spawn-zmm with `vpxor ymm3, ymm3, ymm3`
 *   traced_events --fork-ymm     (VEX.256, AVX2) instead: runs on any AVX2 CPU.
 *   traced_events --memcpy       the region copies 256 bytes with libc's
 *                                memcpy (the variant ld.so's ifunc chose).
 *   traced_events --dlopen LIB   dlopen(LIB) (outside any region).
 *   traced_events --jit-cpuid    the region calls code written at run time
 *                                into an anonymous mapping (no image, so no
 *                                breakpoint site) that runs CPUID leaf 0 and
 *                                XGETBV(0); reports what they returned.
 *
 * Prints one JSON line: the probe report fields the backend needs plus what
 * happened (`alarms` = handler calls).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
    (void)sig;
    alarms = alarms + 1;
}

static void mark_start(void)
{
    __asm__ volatile("mov $0x111, %%ebx\n\t.byte 0x64, 0x67, 0x90" ::: "rbx", "memory");
}

static void mark_stop(void)
{
    __asm__ volatile("mov $0x222, %%ebx\n\t.byte 0x64, 0x67, 0x90" ::: "rbx", "memory");
}

__attribute__((noinline)) static void counted_loop(unsigned n)
{
    __asm__ volatile("mov %[n], %%ecx\n"
                     "1:\n\t"
                     "dec %%ecx\n\t"
                     "jnz 1b\n\t"
                     :
                     : [n] "r"(n)
                     : "rcx", "cc");
}

__attribute__((noinline)) static void zmm_work(void)
{
    /* vpxorq zmm3, zmm3, zmm3 (EVEX.512): AVX-512F, needs 512-bit vectors */
    __asm__ volatile(".byte 0x62, 0xf1, 0xe5, 0x48, 0xef, 0xdb" ::: "xmm3");
}

__attribute__((noinline)) static void ymm_work(void)
{
    /* vpxor ymm3, ymm3, ymm3 (VEX.256.66.0F EF): AVX2 */
    __asm__ volatile(".byte 0xc5, 0xe5, 0xef, 0xdb" ::: "xmm3");
}

/* what the thread / the child of --spawn-* / --fork-* executes */
static void (*vector_work)(void) = zmm_work;

/* ARG is VERB-zmm or VERB-ymm (e.g. "--spawn-ymm"): pick the work, say yes */
static int vector_option(const char *arg, const char *verb)
{
    size_t n = strlen(verb);
    if (strncmp(arg, verb, n) || (strcmp(arg + n, "-zmm") && strcmp(arg + n, "-ymm")))
        return 0;
    vector_work = arg[n + 1] == 'y' ? ymm_work : zmm_work;
    return 1;
}

static void *thread_main(void *arg)
{
    (void)arg;
    vector_work();
    return NULL;
}

static char jit_vendor[13];
static uint64_t jit_xcr0;

/* void f(uint32_t out[5]): out = CPUID(0).{eax,ebx,ecx,edx}, XGETBV(0).eax */
static const unsigned char jit_code[] = {
    0x53,                   /* push rbx            */
    0x31, 0xc0,             /* xor eax, eax        */
    0x31, 0xc9,             /* xor ecx, ecx        */
    0x0f, 0xa2,             /* cpuid               */
    0x89, 0x07,             /* mov [rdi], eax      */
    0x89, 0x5f, 0x04,       /* mov [rdi+4], ebx    */
    0x89, 0x4f, 0x08,       /* mov [rdi+8], ecx    */
    0x89, 0x57, 0x0c,       /* mov [rdi+12], edx   */
    0x31, 0xc9,             /* xor ecx, ecx        */
    0x0f, 0x01, 0xd0,       /* xgetbv              */
    0x89, 0x47, 0x10,       /* mov [rdi+16], eax   */
    0x5b,                   /* pop rbx             */
    0xc3,                   /* ret                 */
};

static int run_jit(void)
{
    void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 1;
    memcpy(page, jit_code, sizeof jit_code);
    if (mprotect(page, 4096, PROT_READ | PROT_EXEC))
        return 1;
    void (*fn)(uint32_t *);
    memcpy(&fn, &page, sizeof fn);
    uint32_t out[5] = {0};
    mark_start();
    fn(out);
    mark_stop();
    memcpy(jit_vendor, &out[1], 4);
    memcpy(jit_vendor + 4, &out[3], 4);
    memcpy(jit_vendor + 8, &out[2], 4);
    jit_xcr0 = out[4];
    return 0;
}

static void report(const char *what)
{
    printf("{\"probe\": 1, \"status\": \"ok\", \"mode\": \"gcm\", \"dir\": \"encrypt\", "
           "\"key_bits\": 128, \"length\": 16, \"seed\": 1, \"forced\": false, "
           "\"path\": \"generic\", \"selected\": {}, \"features\": [], \"family\": 6, "
           "\"model\": 60, \"vendor\": \"GenuineIntel\", \"xcr0\": \"0x7\", "
           "\"digest\": \"%064d\", \"out_len\": 32, \"what\": \"%s\", "
           "\"alarms\": %d, \"jit_vendor\": \"%s\", \"jit_xcr0\": \"0x%llx\"}\n",
           0, what, (int)alarms, jit_vendor, (unsigned long long)jit_xcr0);
}

int main(int argc, char **argv)
{
    if ((argc == 3 || argc == 4) && !strcmp(argv[1], "--alarm")) {
        unsigned n = (unsigned)strtoul(argv[2], NULL, 0);
        unsigned long us = argc == 4 ? strtoul(argv[3], NULL, 0) : 1000;
        if (n == 0 || us == 0 || us >= 1000000)
            return 2;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGPROF, &sa, NULL);
        struct itimerval it = {{0, (suseconds_t)us}, {0, (suseconds_t)us}};
        if (setitimer(ITIMER_PROF, &it, NULL))
            return 1;
        mark_start();
        counted_loop(n);
        mark_stop();
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_PROF, &off, NULL);
        report("alarm");
        return 0;
    }
    if (argc == 2 && vector_option(argv[1], "--spawn")) {
        pthread_t tid;
        mark_start();
        int rc = pthread_create(&tid, NULL, thread_main, NULL);
        if (rc == 0)
            pthread_join(tid, NULL);
        mark_stop();
        if (rc)
            return 1;
        report(argv[1] + 2);
        return 0;
    }
    if (argc == 2 && vector_option(argv[1], "--fork")) {
        int status = 0;
        mark_start();
        pid_t p = fork();
        if (p == 0) {
            vector_work();
            _exit(0);
        }
        if (p > 0)
            waitpid(p, &status, 0);
        mark_stop();
        if (p < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
            return 1;
        report(argv[1] + 2);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--memcpy")) {
        static char src[256] = "traced", dst[256];
        /* through a volatile pointer: the call is libc's, never inlined */
        void *(*volatile copy)(void *, const void *, size_t) = memcpy;
        mark_start();
        copy(dst, src, sizeof dst);
        mark_stop();
        report(dst);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "--dlopen")) {
        if (!dlopen(argv[2], RTLD_NOW)) {
            fprintf(stderr, "traced_events: %s\n", dlerror());
            return 1;
        }
        report("dlopen");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--jit-cpuid")) {
        if (run_jit())
            return 1;
        report("jit-cpuid");
        return 0;
    }
    fprintf(stderr, "traced_events: bad arguments\n");
    return 2;
}
