/*
 * sdematrix_mix.c - a QEMU TCG plugin (qemu-user, x86-64 guests) that counts
 * the guest instructions executed between the probe's SSC marks and records
 * where the program was when it died.
 *
 * Usage:  qemu-x86_64 -plugin ./sdematrix_mix.so,out=/dir/prefix  prog ...
 * Output, one set per process (a forked child writes its own):
 *
 * /dir/prefix.<pid>       written at a normal exit, line-oriented text:
 *
 *   sdematrix-qemu-mix 1
 *   pid <pid>
 *   code <start_code> <end_code> <entry>        main image, hex guest addrs
 *   regions <starts> <stops>                    marks executed
 *   i <vaddr> <bytes-hex> <count> <symbol|->    one per executed instruction
 *   map <lo> <hi> <perms> <offset> <path>       guest view of file mappings
 *   end
 *
 * /dir/prefix.<pid>.last  a small shared (mmap'ed) file kept current while
 *                         the guest runs, so that it survives a death by
 *                         signal, when QEMU 7.2 runs no at-exit callback:
 *
 *   header  64 bytes: "SDMLAST1", start_code, end_code, entry (u64 LE)
 *   slot[v] 64 bytes per vCPU: u64 vaddr, u8 len, u8 valid, u8 symlen,
 *           5 pad, 16 bytes of instruction, 32 bytes of symbol name:
 *           the last instruction of the last TB vCPU v entered.
 *
 * The host decodes the bytes itself (QEMU 7.2's disassembler prints VEX VAES
 * as .byte) and symbolises the addresses.
 *
 * How counting works.  QEMU hands us each translation block (TB) once, when
 * it is translated; we attach callbacks that run every time it executes:
 *
 *   TB without a mark:   one TB-entry callback; if this vCPU is inside a
 *                        region, tb->count++.  At exit every instruction of
 *                        the TB is charged tb->count.  (Cheap: one call per
 *                        block, not per instruction.)
 *   TB with a mark:      a callback before every instruction, because the
 *                        region begins or ends in the middle of the block:
 *
 *        mov ebx,0x111 ; 64 67 90 ; insn ; insn ... ; mov ebx,0x222 ; 64 67 90
 *        (not counted)   start      counted ...       counted         stop
 *
 * The "last" slot explains a SIGILL: QEMU ends a TB at an instruction it
 * cannot translate (it raises #UD there), so when the guest dies of SIGILL
 * the faulting instruction is the final instruction of the last TB entered.
 * Each TB carries that 64-byte slot image, built once at translation; entering
 * the TB copies it into the shared file (one cache line per block executed).
 */
#define _POSIX_C_SOURCE 200809L

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "qemu_plugin_api.h"

SDM_PLUGIN_EXPORT int qemu_plugin_version = SDM_QEMU_PLUGIN_API_VERSION;

#define MAX_VCPU_SLOTS 256 /* qemu-user: one vCPU per guest thread */
#define MAX_INSN_BYTES 15  /* architectural limit of an x86 instruction */

enum mark_kind { MARK_NONE = 0, MARK_START = 1, MARK_STOP = 2 };

typedef struct insn_rec {
    uint64_t vaddr;
    const char *sym; /* owned by QEMU's symbol table, or NULL */
    uint8_t len;
    uint8_t mark; /* enum mark_kind */
    uint8_t bytes[MAX_INSN_BYTES];
} insn_rec;

/* One slot of the shared .last file (see the top of the file). */
typedef struct last_slot {
    uint64_t vaddr;
    uint8_t len;
    uint8_t valid;
    uint8_t symlen;
    uint8_t pad[5];
    uint8_t bytes[16];
    char sym[32];
} last_slot;
_Static_assert(sizeof(last_slot) == 64, "the host reads 64-byte slots");

typedef struct last_file {
    char magic[8];
    uint64_t start_code, end_code, entry;
    uint8_t pad[32];
    last_slot slot[];
} last_file;
_Static_assert(sizeof(last_file) == 64, "the host reads a 64-byte header");

typedef struct tb_rec tb_rec;

/* Per-instruction callback argument for TBs that contain a mark. */
typedef struct insn_ctx {
    tb_rec *tb;
    size_t idx;
} insn_ctx;

struct tb_rec {
    tb_rec *next;
    uint64_t count;   /* whole-TB executions inside a region (unsplit TBs) */
    int split;        /* 1: per-instruction accounting (the TB has a mark) */
    size_t n;
    uint64_t *icount; /* per instruction, split TBs only */
    insn_ctx *ctx;    /* per instruction, split TBs only */
    last_slot last;   /* what entering this TB writes to the .last file */
    insn_rec insns[];
};

static char out_prefix[4096];
static pthread_mutex_t tb_lock = PTHREAD_MUTEX_INITIALIZER;
static tb_rec *tb_list;
static uint8_t in_region[MAX_VCPU_SLOTS];
static uint64_t n_starts, n_stops;
static int alloc_failed;
static last_file *last_map; /* shared mapping of prefix.<pid>.last, or NULL */
static int code_range_known;
/* Host address minus guest address (qemu-user's guest_base): turns the host's
 * /proc/self/maps into the guest's view. */
static intptr_t guest_delta;
static int guest_delta_known;

/* --------------------------------------------------------- execution -- */

static void on_tb_exec(unsigned int vcpu, void *udata)
{
    tb_rec *tb = udata;
    unsigned slot = vcpu % MAX_VCPU_SLOTS;
    if (last_map)
        memcpy(&last_map->slot[slot], &tb->last, sizeof tb->last);
    if (!tb->split && __atomic_load_n(&in_region[slot], __ATOMIC_RELAXED))
        __atomic_fetch_add(&tb->count, 1, __ATOMIC_RELAXED);
}

static void on_insn_exec(unsigned int vcpu, void *udata)
{
    const insn_ctx *c = udata;
    unsigned slot = vcpu % MAX_VCPU_SLOTS;
    switch (c->tb->insns[c->idx].mark) {
    case MARK_START:
        __atomic_store_n(&in_region[slot], 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&n_starts, 1, __ATOMIC_RELAXED);
        break;
    case MARK_STOP:
        __atomic_store_n(&in_region[slot], 0, __ATOMIC_RELAXED);
        __atomic_fetch_add(&n_stops, 1, __ATOMIC_RELAXED);
        break;
    default:
        if (__atomic_load_n(&in_region[slot], __ATOMIC_RELAXED))
            __atomic_fetch_add(&c->tb->icount[c->idx], 1, __ATOMIC_RELAXED);
    }
}

/* ------------------------------------------------------- translation -- */

/* Is this instruction an SSC mark, and which?  A mark is `64 67 90`
 * directly preceded by `mov ebx, imm32` (BB imm32) with imm32 = 0x111 or
 * 0x222.  The mov is normally the previous instruction of the same TB; if the
 * TB starts at the nop, look at the 5 bytes before it in guest memory (under
 * qemu-user that is host memory at haddr - 5), unless that would cross into
 * the previous page, which might not be mapped. */
static uint8_t mark_of(const insn_rec *prev, const insn_rec *cur,
                       const struct qemu_plugin_insn *insn)
{
    static const uint8_t ssc_nop[3] = {0x64, 0x67, 0x90};
    const uint8_t *mov = NULL;
    if (cur->len != 3 || memcmp(cur->bytes, ssc_nop, 3) != 0)
        return MARK_NONE;
    if (prev && prev->len == 5 && prev->vaddr + 5 == cur->vaddr) {
        mov = prev->bytes;
    } else if (!prev && (cur->vaddr & 0xfff) >= 5) {
        const uint8_t *h = qemu_plugin_insn_haddr(insn);
        if (h)
            mov = h - 5;
    }
    if (!mov || mov[0] != 0xBB || mov[3] != 0 || mov[4] != 0)
        return MARK_NONE;
    if (mov[1] == 0x11 && mov[2] == 0x01)
        return MARK_START;
    if (mov[1] == 0x22 && mov[2] == 0x02)
        return MARK_STOP;
    return MARK_NONE;
}

static void on_tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    tb_rec *r = calloc(1, sizeof *r + n * sizeof r->insns[0]);
    if (!r) {
        __atomic_store_n(&alloc_failed, 1, __ATOMIC_RELAXED);
        return;
    }
    r->n = n;
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        insn_rec *ir = &r->insns[i];
        size_t len = qemu_plugin_insn_size(insn);
        if (len > MAX_INSN_BYTES)
            len = MAX_INSN_BYTES;
        ir->vaddr = qemu_plugin_insn_vaddr(insn);
        ir->len = (uint8_t)len;
        memcpy(ir->bytes, qemu_plugin_insn_data(insn), len);
        ir->sym = qemu_plugin_insn_symbol(insn);
        ir->mark = mark_of(i ? &r->insns[i - 1] : NULL, ir, insn);
        if (ir->mark)
            r->split = 1;
    }
    /* The .last slot image: the TB's final instruction. */
    if (n) {
        const insn_rec *ir = &r->insns[n - 1];
        r->last.vaddr = ir->vaddr;
        r->last.len = ir->len;
        r->last.valid = 1;
        memcpy(r->last.bytes, ir->bytes, ir->len);
        if (ir->sym) {
            size_t sl = strlen(ir->sym);
            r->last.symlen = (uint8_t)(sl < sizeof r->last.sym ? sl : sizeof r->last.sym);
            memcpy(r->last.sym, ir->sym, r->last.symlen);
        }
        if (!guest_delta_known) {
            const uint8_t *h = qemu_plugin_insn_haddr(qemu_plugin_tb_get_insn(tb, 0));
            if (h) {
                guest_delta = (intptr_t)h - (intptr_t)r->insns[0].vaddr;
                guest_delta_known = 1;
            }
        }
    }
    /* The main image is loaded by the time anything is translated. */
    if (last_map && !code_range_known) {
        last_map->start_code = qemu_plugin_start_code();
        last_map->end_code = qemu_plugin_end_code();
        last_map->entry = qemu_plugin_entry_code();
        code_range_known = 1;
    }
    if (r->split) {
        r->icount = calloc(n, sizeof *r->icount);
        r->ctx = calloc(n, sizeof *r->ctx);
        if (!r->icount || !r->ctx) {
            free(r->icount);
            free(r->ctx);
            free(r);
            __atomic_store_n(&alloc_failed, 1, __ATOMIC_RELAXED);
            return;
        }
        for (size_t i = 0; i < n; i++) {
            r->ctx[i].tb = r;
            r->ctx[i].idx = i;
            qemu_plugin_register_vcpu_insn_exec_cb(qemu_plugin_tb_get_insn(tb, i), on_insn_exec,
                                                   QEMU_PLUGIN_CB_NO_REGS, &r->ctx[i]);
        }
    }
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_tb_exec, QEMU_PLUGIN_CB_NO_REGS, r);

    pthread_mutex_lock(&tb_lock);
    r->next = tb_list;
    tb_list = r;
    pthread_mutex_unlock(&tb_lock);
}

/* ------------------------------------------------------------ output -- */

/* The guest's file mappings: qemu-user maps guest memory 1:1 into its own
 * address space at guest_delta, so the host's /proc/self/maps shifted by
 * -guest_delta shows where the guest's images are (QEMU's own libraries lie
 * outside the guest range and are skipped). */
static void write_guest_maps(FILE *f)
{
    FILE *m = fopen("/proc/self/maps", "r");
    if (!m || !guest_delta_known) {
        if (m)
            fclose(m);
        return;
    }
    char line[4608];
    while (fgets(line, sizeof line, m)) {
        unsigned long long lo, hi, off;
        char perms[8];
        int path_at = 0;
        if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %n", &lo, &hi, perms, &off, &path_at) < 4 ||
            !path_at || line[path_at] != '/')
            continue;
        if ((intptr_t)lo < guest_delta)
            continue;
        line[strcspn(line, "\n")] = '\0';
        fprintf(f, "map %llx %llx %s %llx %s\n", (unsigned long long)((intptr_t)lo - guest_delta),
                (unsigned long long)((intptr_t)hi - guest_delta), perms, off, line + path_at);
    }
    fclose(m);
}

static void on_exit_write(qemu_plugin_id_t id, void *udata)
{
    (void)id;
    (void)udata;
    char path[4200];
    snprintf(path, sizeof path, "%s.%ld", out_prefix, (long)getpid());
    FILE *f = fopen(path, "w");
    if (!f) {
        qemu_plugin_outs("sdematrix_mix: cannot write the output file\n");
        return;
    }
    fprintf(f, "sdematrix-qemu-mix 1\npid %ld\n", (long)getpid());
    fprintf(f, "code %" PRIx64 " %" PRIx64 " %" PRIx64 "\n", qemu_plugin_start_code(),
            qemu_plugin_end_code(), qemu_plugin_entry_code());
    fprintf(f, "regions %" PRIu64 " %" PRIu64 "\n", __atomic_load_n(&n_starts, __ATOMIC_RELAXED),
            __atomic_load_n(&n_stops, __ATOMIC_RELAXED));
    if (__atomic_load_n(&alloc_failed, __ATOMIC_RELAXED))
        fprintf(f, "warning out-of-memory: some blocks were not counted\n");

    pthread_mutex_lock(&tb_lock);
    for (const tb_rec *r = tb_list; r; r = r->next) {
        for (size_t i = 0; i < r->n; i++) {
            uint64_t c = r->split ? __atomic_load_n(&r->icount[i], __ATOMIC_RELAXED)
                                  : __atomic_load_n(&r->count, __ATOMIC_RELAXED);
            if (!c || r->insns[i].mark)
                continue;
            fputs("i ", f);
            /* Same layout as put_insn but with the count before the symbol. */
            const insn_rec *ir = &r->insns[i];
            fprintf(f, "%" PRIx64 " ", ir->vaddr);
            for (unsigned b = 0; b < ir->len; b++)
                fprintf(f, "%02x", ir->bytes[b]);
            const char *s =
                ir->sym && *ir->sym && !strpbrk(ir->sym, " \t\n") ? ir->sym : "-";
            fprintf(f, " %" PRIu64 " %s\n", c, s);
        }
    }
    pthread_mutex_unlock(&tb_lock);
    write_guest_maps(f);
    fputs("end\n", f);
    fclose(f);
}

/* ----------------------------------------------------------- install -- */

SDM_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                          char **argv)
{
    if (info->system_emulation) {
        qemu_plugin_outs("sdematrix_mix: only qemu-user is supported\n");
        return -1;
    }
    if (info->version.min > SDM_QEMU_PLUGIN_API_VERSION) {
        qemu_plugin_outs("sdematrix_mix: this QEMU no longer offers plugin API version 1\n");
        return -1;
    }
    for (int i = 0; i < argc; i++) {
        if (!strncmp(argv[i], "out=", 4) && argv[i][4]) {
            snprintf(out_prefix, sizeof out_prefix, "%s", argv[i] + 4);
        } else {
            qemu_plugin_outs("sdematrix_mix: unknown argument (expected out=PREFIX)\n");
            return -1;
        }
    }
    if (!out_prefix[0]) {
        qemu_plugin_outs("sdematrix_mix: missing out=PREFIX\n");
        return -1;
    }
    /* The .last file: created now, kept mapped (shared) for the whole run. */
    char path[4200];
    snprintf(path, sizeof path, "%s.%ld.last", out_prefix, (long)getpid());
    size_t size = sizeof(last_file) + MAX_VCPU_SLOTS * sizeof(last_slot);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd >= 0 && ftruncate(fd, (off_t)size) == 0) {
        void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p != MAP_FAILED) {
            last_map = p;
            memcpy(last_map->magic, "SDMLAST1", 8);
        }
    }
    if (fd >= 0)
        close(fd);
    if (!last_map)
        qemu_plugin_outs("sdematrix_mix: cannot create the .last file; no fault location\n");

    qemu_plugin_register_vcpu_tb_trans_cb(id, on_tb_trans);
    qemu_plugin_register_atexit_cb(id, on_exit_write, NULL);
    return 0;
}
