/* vc-tracer: the profile (see profile.c). */
#ifndef VC_TRACER_PROFILE_H
#define VC_TRACER_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum site_kind { SITE_CPUID, SITE_XGETBV, SITE_MARK, SITE_FUNC };
/* each kind's name in profile `site` records and output `site_probed` lines */
extern const char *const site_kind_names[4];

struct leaf {
    uint32_t leaf, sub, a, b, c, d;
};

struct site {          /* from the profile: a file offset in an image */
    enum site_kind kind;
    uint64_t off;
    char *path;
};

/* read the profile file; dies on a bad record or without an xcr0 record */
void profile_load(const char *path);
/* one profile record; `where` names its source in the error message */
void profile_record(const char *line, const char *where);
/* an executable image the profile does not know: ask the image server
 * (profile record `ask REQFD RESPFD`, whole mode only) for its records
 * (image, sites, bounds); 1 when it answered */
int profile_ask(const char *path);
/* how many images the server answered for */
uint64_t profile_asked(void);
/* the model's CPUID answer for (leaf, subleaf), hardware rules included */
void profile_answer_cpuid(uint32_t leaf, uint32_t sub, uint32_t out[4]);
/* leaves whose output depends on ECX (the subleaf) */
bool profile_subleaf_indexed(uint32_t leaf);
uint64_t profile_xcr0(void);
const struct site *profile_sites(size_t *n);
/* a listed image, or one with sites */
bool profile_knows_image(const char *path);

#endif
