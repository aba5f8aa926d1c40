/*
 * A program for the ptrace tracer's tests of what happens *inside* a marked
 * region besides straight-line code: signals, threads and child processes
 * created while the tracer single-steps.
 *
 *   traced_events --alarm N      a 1 ms SIGALRM interval timer runs while the
 *                                region executes a counted loop of N turns:
 *                                    mov ecx, N          1
 *                                 1: dec ecx             N
 *                                    jnz 1b              N
 *                                the handler (on_alarm) counts its calls.
 *   traced_events --spawn-zmm    the region creates a thread that executes
 *                                `vpxorq zmm3, zmm3, zmm3` (no marks of its
 *                                own) and joins it.
 *   traced_events --fork-zmm     the same in a forked child process.
 *
 * Prints one JSON line: the probe report fields the backend needs plus what
 * happened (`alarms` = handler calls).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static void *thread_main(void *arg)
{
    (void)arg;
    zmm_work();
    return NULL;
}

static void report(const char *what)
{
    printf("{\"probe\": 1, \"status\": \"ok\", \"mode\": \"gcm\", \"dir\": \"encrypt\", "
           "\"key_bits\": 128, \"length\": 16, \"seed\": 1, \"forced\": false, "
           "\"path\": \"generic\", \"selected\": {}, \"features\": [], \"family\": 6, "
           "\"model\": 60, \"digest\": \"%064d\", \"out_len\": 32, \"what\": \"%s\", "
           "\"alarms\": %d}\n",
           0, what, (int)alarms);
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--alarm")) {
        unsigned n = (unsigned)strtoul(argv[2], NULL, 0);
        if (n == 0)
            return 2;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_alarm;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 1000}, {0, 1000}};
        if (setitimer(ITIMER_REAL, &it, NULL))
            return 1;
        mark_start();
        counted_loop(n);
        mark_stop();
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_REAL, &off, NULL);
        report("alarm");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--spawn-zmm")) {
        pthread_t tid;
        mark_start();
        int rc = pthread_create(&tid, NULL, thread_main, NULL);
        if (rc == 0)
            pthread_join(tid, NULL);
        mark_stop();
        if (rc)
            return 1;
        report("spawn-zmm");
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "--fork-zmm")) {
        int status = 0;
        mark_start();
        pid_t p = fork();
        if (p == 0) {
            zmm_work();
            _exit(0);
        }
        if (p > 0)
            waitpid(p, &status, 0);
        mark_stop();
        if (p < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
            return 1;
        report("fork-zmm");
        return 0;
    }
    fprintf(stderr, "traced_events: bad arguments\n");
    return 2;
}
