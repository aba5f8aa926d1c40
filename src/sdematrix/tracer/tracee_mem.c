/* vc-tracer: reading and writing a stopped tracee's memory. */
#include "tracee_mem.h"

#include <errno.h>
#include <sys/ptrace.h>
#include <sys/uio.h>

int peek_byte(pid_t pid, uint64_t addr, uint8_t *out)
{
    errno = 0;
    long w = ptrace(PTRACE_PEEKDATA, pid, (void *)addr, NULL);
    if (errno)
        return -1;
    *out = (uint8_t)(w & 0xff);
    return 0;
}

int poke_byte(pid_t pid, uint64_t addr, uint8_t v)
{
    errno = 0;
    long w = ptrace(PTRACE_PEEKDATA, pid, (void *)addr, NULL);
    if (errno)
        return -1;
    w = (long)(((unsigned long)w & ~0xfful) | v);
    return ptrace(PTRACE_POKEDATA, pid, (void *)addr, (void *)w) == 0 ? 0 : -1;
}

/* Read up to n bytes; a read crossing into an unmapped page is cut short. */
size_t read_mem(pid_t pid, uint64_t addr, uint8_t *buf, size_t n)
{
    struct iovec local = {buf, n}, remote = {(void *)addr, n};
    ssize_t r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (r > 0)
        return (size_t)r;
    size_t to_page = 4096 - (addr & 4095);
    if (to_page < n) {
        local.iov_len = remote.iov_len = to_page;
        r = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (r > 0)
            return (size_t)r;
    }
    /* Fall back to PEEKDATA (works where process_vm_readv is refused). */
    size_t got = 0;
    while (got < n) {
        errno = 0;
        long w = ptrace(PTRACE_PEEKDATA, pid, (void *)(addr + got), NULL);
        if (errno)
            break;
        for (int i = 0; i < 8 && got < n; i++)
            buf[got++] = (uint8_t)((unsigned long)w >> (8 * i));
    }
    return got;
}
