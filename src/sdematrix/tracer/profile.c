/*
 * vc-tracer: the profile -- the CPU model (CPUID leaves, XCR0), the sites to
 * break at and the images searched for them, read from the profile file and,
 * in whole mode, from the image server (profile_ask).  tracer.c builds on
 * it; it calls whole.c only to load `bounds` records (and to ask whether
 * whole mode is on) and blocks.c for the block-stepping records, and
 * nothing here calls tracer.c.
 */
#include "profile.h"

#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "blocks.h"
#include "fatal.h"
#include "whole.h"

static struct leaf *leaves;
static size_t nleaves, capleaves;
static uint64_t xcr0_model = 0x7;
static bool have_xcr0;
static struct site *sites;
static size_t nsites, capsites;
static char **images; /* profile `image` records */
static size_t nimages;
/* the image server (`ask REQFD RESPFD`) and how often it answered */
static FILE *ask_req, *ask_resp;
static uint64_t n_asked;
/* the profile's names of the site kinds, in enum site_kind's order */
const char *const site_kind_names[4] = {"cpuid", "xgetbv", "mark", "func"};

static int set_server(const char *rest)
{
    int w, r;
    if (sscanf(rest, "%d %d", &w, &r) != 2 || w < 0 || r < 0)
        return -1;
    /* the traced program must not inherit the pipe */
    if (fcntl(w, F_SETFD, FD_CLOEXEC) || fcntl(r, F_SETFD, FD_CLOEXEC))
        return -1;
    ask_req = fdopen(w, "w");
    ask_resp = fdopen(r, "r");
    return ask_req && ask_resp ? 0 : -1;
}

int profile_ask(const char *path)
{
    if (!whole_enabled || !ask_req || strchr(path, '\n'))
        return 0;
    if (fprintf(ask_req, "%s\n", path) < 0 || fflush(ask_req))
        goto gone;
    char line[4608];
    while (fgets(line, sizeof line, ask_resp)) {
        size_t n = strlen(line);
        while (n && line[n - 1] == '\n')
            line[--n] = 0;
        if (!strcmp(line, "end")) {
            n_asked++;
            return 1;
        }
        if (n)
            profile_record(line, "image server");
    }
gone: /* the server is gone: no more asking (the images stay unscanned) */
    fprintf(stderr, "vc-tracer: image server closed while asking for %s\n", path);
    fclose(ask_req);
    fclose(ask_resp);
    ask_req = ask_resp = NULL;
    return 0;
}


/* One profile record (also the image server's answers, see profile_ask);
 * `where` names the source for the error message. */
void profile_record(const char *line, const char *where)
{
    if (!strncmp(line, "cpuid ", 6)) {
        struct leaf l;
        if (sscanf(line + 6, "%" SCNx32 " %" SCNx32 " %" SCNx32 " %" SCNx32 " %" SCNx32
                   " %" SCNx32, &l.leaf, &l.sub, &l.a, &l.b, &l.c, &l.d) != 6)
            die("%s: bad cpuid line", where);
        if (nleaves == capleaves)
            leaves = xrealloc(leaves, (capleaves = capleaves * 2 + 16) * sizeof *leaves);
        leaves[nleaves++] = l;
    } else if (!strncmp(line, "xcr0 ", 5)) {
        if (sscanf(line + 5, "%" SCNx64, &xcr0_model) != 1)
            die("%s: bad xcr0 line", where);
        have_xcr0 = true;
    } else if (!strncmp(line, "bounds ", 7)) {
        if (whole_load_bounds(line + 7))
            die("%s: bad bounds line (file unreadable?)", where);
    } else if (!strncmp(line, "ask ", 4)) {
        if (set_server(line + 4))
            die("%s: bad ask line", where);
    } else if (!strncmp(line, "image ", 6)) {
        images = xrealloc(images, (nimages + 1) * sizeof *images);
        images[nimages++] = strdup(line + 6);
    } else if (!strncmp(line, "site ", 5)) {
        char kind[16];
        uint64_t off;
        int pos = 0;
        if (sscanf(line + 5, "%15s %" SCNx64 " %n", kind, &off, &pos) != 2 || !pos)
            die("%s: bad site line", where);
        struct site s = {.off = off, .path = strdup(line + 5 + pos)};
        size_t k = 0;
        while (k < sizeof site_kind_names / sizeof *site_kind_names &&
               strcmp(kind, site_kind_names[k]))
            k++;
        if (k == sizeof site_kind_names / sizeof *site_kind_names)
            die("%s: unknown site kind %s", where, kind);
        s.kind = (enum site_kind)k;
        if (nsites == capsites)
            sites = xrealloc(sites, (capsites = capsites * 2 + 64) * sizeof *sites);
        sites[nsites++] = s;
    } else {
        /* block-stepping records (blocks.c): `blocks PATH` then `b ...` lines */
        int b = blocks_profile_line(line);
        if (b < 0)
            die("%s: bad block record", where);
        if (b == 0)
            die("%s: unknown record", where);
    }
}

void profile_load(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("cannot open profile %s: %s", path, strerror(errno));
    /* getline, not a fixed buffer: a record longer than a buffer (a long
     * path, a block of thousands of instructions) must not be cut, because
     * its tail would then be read as a record of its own.  A NUL inside a
     * line would hide the rest of it from the string functions: refused. */
    char *line = NULL, where[4200];
    size_t cap = 0;
    ssize_t got;
    int lineno = 0;
    while ((got = getline(&line, &cap, f)) >= 0) {
        lineno++;
        size_t n = (size_t)got;
        snprintf(where, sizeof where, "%.4096s:%d", path, lineno);
        if (strlen(line) != n)
            die("%s: NUL byte in a profile record", where);
        while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (!n || line[0] == '#')
            continue;
        profile_record(line, where);
    }
    free(line);
    fclose(f);
    if (!have_xcr0)
        die("%s: no xcr0 record", path);
}

static const struct leaf *find_leaf(uint32_t leaf, uint32_t sub)
{
    for (size_t i = 0; i < nleaves; i++)
        if (leaves[i].leaf == leaf && leaves[i].sub == sub)
            return &leaves[i];
    return NULL;
}

/* Leaves whose output depends on ECX (the subleaf); others ignore it. */
bool profile_subleaf_indexed(uint32_t leaf)
{
    static const uint32_t idx[] = {4,    7,    0xb,  0xd,  0xf,  0x10, 0x12, 0x14,
                                   0x17, 0x18, 0x1a, 0x1b, 0x1d, 0x1e, 0x1f, 0x20,
                                   0x23, 0x24, 0x8000001d, 0x80000020, 0x80000026};
    for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++)
        if (idx[i] == leaf)
            return true;
    return false;
}

/* The model's answer, following hardware rules for leaves it does not list:
 * above the max basic / extended leaf an Intel CPU returns the highest basic
 * leaf's data, an AMD CPU zeros; an unlisted leaf or subleaf below the max is
 * zeros.  XSAVE area sizes (leaf 0xD EBX/ECX, subleaf 1 EBX) are raised to at
 * least the host's: the real XCR0 stays the host's, so XSAVE writes the host's
 * state size and a smaller buffer would be overrun. */
void profile_answer_cpuid(uint32_t leaf, uint32_t sub, uint32_t out[4])
{
    out[0] = out[1] = out[2] = out[3] = 0;
    const struct leaf *l0 = find_leaf(0, 0);
    const struct leaf *e0 = find_leaf(0x80000000u, 0);
    uint32_t max_basic = l0 ? l0->a : 0;
    uint32_t max_ext = e0 ? e0->a : 0;
    bool intel = l0 && l0->b == 0x756e6547u; /* "Genu" */
    uint32_t q = leaf;
    if (leaf < 0x40000000u) {
        if (leaf > max_basic) {
            if (!intel)
                return;
            q = max_basic;
        }
    } else if (leaf >= 0x80000000u && leaf < 0x90000000u) {
        if (leaf > max_ext) {
            if (!intel)
                return;
            q = max_basic;
        }
    }
    uint32_t s = profile_subleaf_indexed(q) ? sub : 0;
    const struct leaf *l = find_leaf(q, s);
    if (l) {
        out[0] = l->a;
        out[1] = l->b;
        out[2] = l->c;
        out[3] = l->d;
    }
    if (q == 0xd && (s == 0 || s == 1)) {
        unsigned a, b, c, d;
        __cpuid_count(0xd, s, a, b, c, d);
        (void)a;
        (void)d;
        if (out[1] < b)
            out[1] = b;
        if (s == 0 && out[2] < c)
            out[2] = c;
    }
}

uint64_t profile_xcr0(void)
{
    return xcr0_model;
}

const struct site *profile_sites(size_t *n)
{
    *n = nsites;
    return sites;
}

bool profile_knows_image(const char *path)
{
    for (size_t i = 0; i < nimages; i++)
        if (!strcmp(images[i], path))
            return true;
    for (size_t i = 0; i < nsites; i++)
        if (!strcmp(sites[i].path, path))
            return true;
    return false;
}

uint64_t profile_asked(void)
{
    return n_asked;
}
