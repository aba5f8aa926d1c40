/* The tests' JIT page (tests/sdematrix/pipeline/test_exec.py,
 * tests/sdematrix/evidence/test_legacy_forms.py): `code` copied into a
 * fresh anonymous page that is then made read + execute, W^X as V8 does;
 * NULL when a step fails (the program then exits 3). */
#ifndef TESTS_JIT_PAGE_H
#define TESTS_JIT_PAGE_H

#include <string.h>
#include <sys/mman.h>

static unsigned char *jit_page(const void *code, size_t n)
{
    unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    memcpy(p, code, n);
    if (mprotect(p, 4096, PROT_READ | PROT_EXEC)) {
        munmap(p, 4096);
        return NULL;
    }
    return p;
}

#endif
