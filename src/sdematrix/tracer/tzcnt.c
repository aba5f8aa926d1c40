/*
 * vc-tracer: TZCNT of zero.
 *
 * F3 0F BC /r is TZCNT on a CPU with BMI1 and BSF on one without (Intel SDM
 * TZCNT: "On processors that do not support TZCNT, the instruction byte
 * encoding is executed as BSF").  The two agree for a non-zero source (the
 * index of the lowest set bit) and differ for zero: TZCNT returns the operand
 * size, BSF leaves the destination undefined.  So before such an instruction
 * runs where the tracer stops at it (a stepped region's single step, a
 * block's last instruction -- blocks end at every F3-prefixed instruction --,
 * a JIT step, a first-visit trap) on a model that lacks BMI1 (only there
 * is a zero source special) its source operand is read, and the executions
 * with a zero source are counted per address.
 *
 * Whether the model lacks BMI1 (CPUID.(EAX=7,ECX=0):EBX bit 3 of the
 * profile) tracer.c tells (tzcnt_model).  Such an execution is run as the model runs
 * it: as BSF with a zero source, which sets ZF and leaves the destination as
 * it was (AMD APM, BSF: "does not change the contents of the destination
 * register"; the Intel SDM calls it undefined, and Intel parts leave it too,
 * as the Linux kernel's ffs() relies on).  tzcnt_note runs it so (RIP past
 * it, ZF set) and tells the caller, so the program takes the path it takes
 * on that part: glibc's printf("%f", 0.5) computes count_trailing_zeros of a
 * zero limb, and its output is the same either way.  Executions the tracer
 * does not stop at (whole mode: every one after the first visit) run as
 * TZCNT. */
#include "tzcnt.h"

#include <inttypes.h>
#include <stdbool.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>

#include "fatal.h"
#include "tracee_mem.h"

struct tzz {
    int space;
    uint64_t addr;
    uint64_t count;
};
static struct tzz *tzz;
static size_t ntzz, captzz;

/* user_regs_struct field of general register n (ModRM/SIB numbering + REX) */
static uint64_t gpr(const struct user_regs_struct *r, unsigned n)
{
    switch (n & 15) {
    case 0: return r->rax;
    case 1: return r->rcx;
    case 2: return r->rdx;
    case 3: return r->rbx;
    case 4: return r->rsp;
    case 5: return r->rbp;
    case 6: return r->rsi;
    case 7: return r->rdi;
    case 8: return r->r8;
    case 9: return r->r9;
    case 10: return r->r10;
    case 11: return r->r11;
    case 12: return r->r12;
    case 13: return r->r13;
    case 14: return r->r14;
    default: return r->r15;
    }
}

static int64_t disp_at(const uint8_t *b, size_t i, size_t width)
{
    if (width == 1)
        return (int8_t)b[i];
    int32_t d;
    memcpy(&d, b + i, 4);
    return d;
}

/* The instruction at `rip` (bytes b[0..n)) when it is TZCNT: true and its
 * source operand in *val; false for anything else or an unreadable source.
 * Decodes legacy prefixes (the last of F2/F3 is the refining one), REX,
 * 0F BC, ModRM, SIB and displacement; the source is a register or memory
 * (RIP-relative, FS/GS-based, 32-bit addressing) of 16, 32 or 64 bits. */
static bool tzcnt_source(pid_t tid, uint64_t rip, const uint8_t *b, size_t n,
                         const struct user_regs_struct *r, uint64_t *val, size_t *len)
{
    size_t i = 0;
    uint8_t rep = 0, rex = 0;
    bool opsize = false, addr32 = false;
    int seg = 0; /* 0 none (flat), 4 FS, 5 GS */
    for (; i < n && i < 14; i++) {
        uint8_t c = b[i];
        if (c == 0xf2 || c == 0xf3)
            rep = c;
        else if (c == 0x66)
            opsize = true;
        else if (c == 0x67)
            addr32 = true;
        else if (c == 0x64)
            seg = 4;
        else if (c == 0x65)
            seg = 5;
        else if (c == 0x2e || c == 0x36 || c == 0x3e || c == 0x26 || c == 0xf0)
            continue; /* CS/SS/DS/ES: no segment base in 64-bit mode */
        else
            break;
    }
    if (rep != 0xf3)
        return false;
    if (i < n && (b[i] & 0xf0) == 0x40)
        rex = b[i++];
    if (i + 3 > n || b[i] != 0x0f || b[i + 1] != 0xbc)
        return false;
    i += 2;
    uint8_t modrm = b[i++];
    unsigned mod = modrm >> 6, rm = modrm & 7;
    size_t size = (rex & 8) ? 8 : opsize ? 2 : 4;
    uint64_t mask = size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
    if (mod == 3) {
        *val = gpr(r, rm | ((rex & 1u) << 3)) & mask;
        *len = i;
        return true;
    }
    uint64_t ea = 0;
    bool riprel = false;
    size_t dw = mod == 1 ? 1 : mod == 2 ? 4 : 0;
    if (rm == 4) {
        if (i >= n)
            return false;
        uint8_t sib = b[i++];
        unsigned idx = ((sib >> 3) & 7) | ((rex & 2u) << 2), base = sib & 7;
        if (idx != 4)
            ea += gpr(r, idx) << (sib >> 6);
        if (base == 5 && mod == 0)
            dw = 4;
        else
            ea += gpr(r, base | ((rex & 1u) << 3));
    } else if (rm == 5 && mod == 0) {
        riprel = true;
        dw = 4;
    } else {
        ea = gpr(r, rm | ((rex & 1u) << 3));
    }
    if (i + dw > n)
        return false;
    if (dw)
        ea += (uint64_t)disp_at(b, i, dw);
    i += dw;
    if (riprel)
        ea += rip + i;
    if (addr32)
        ea &= 0xffffffffu;
    if (seg == 4)
        ea += r->fs_base;
    else if (seg == 5)
        ea += r->gs_base;
    uint8_t buf[8] = {0};
    if (read_mem(tid, ea, buf, size) != size)
        return false;
    uint64_t v = 0;
    memcpy(&v, buf, size);
    *val = v & mask;
    *len = i;
    return true;
}

static bool model_bsf; /* the model runs TZCNT as BSF (no BMI1): tzcnt_model */

void tzcnt_model(bool has_bmi1)
{
    model_bsf = !has_bmi1;
}

bool tzcnt_note(pid_t tid, int space, uint64_t rip, const uint8_t *b, size_t n)
{
    /* a model with BMI1 runs TZCNT as TZCNT, zero included: nothing to
     * count or run (no register read on that hot path of stepped regions).
     * Then a cheap filter before any syscall: F3 first (compilers put it
     * there), or among the prefixes, and 0F BC within the first 8 bytes */
    if (!model_bsf || n < 4 || !memchr(b, 0xf3, n < 5 ? n : 5))
        return false;
    bool op = false;
    for (size_t k = 0; k + 1 < n && k < 7 && !op; k++)
        op = b[k] == 0x0f && b[k + 1] == 0xbc;
    if (!op)
        return false;
    struct user_regs_struct r;
    if (ptrace(PTRACE_GETREGS, tid, NULL, &r))
        return false;
    uint64_t v;
    size_t len = 0;
    if (!tzcnt_source(tid, rip, b, n, &r, &v, &len) || v != 0)
        return false;
    size_t k = 0;
    while (k < ntzz && !(tzz[k].addr == rip && tzz[k].space == space))
        k++;
    if (k == ntzz) {
        if (ntzz == captzz) {
            captzz = captzz ? 2 * captzz : 16;
            tzz = xrealloc(tzz, captzz * sizeof *tzz);
        }
        tzz[ntzz++] = (struct tzz){space, rip, 0};
    }
    tzz[k].count++;
    r.rip = rip + len; /* run as BSF of zero: destination kept, ZF set */
    r.eflags |= 0x40;
    return ptrace(PTRACE_SETREGS, tid, NULL, &r) == 0;
}

void tzcnt_write(FILE *f)
{
    for (size_t k = 0; k < ntzz; k++)
        fprintf(f, "tzcnt_zero %d %" PRIx64 " %" PRIu64 "\n", tzz[k].space, tzz[k].addr,
                tzz[k].count);
}
