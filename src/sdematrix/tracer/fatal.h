/* vc-tracer: the fatal error exit (125) and allocation that cannot fail. */
#ifndef VC_TRACER_FATAL_H
#define VC_TRACER_FATAL_H

#include <stddef.h>

/* "vc-tracer: MESSAGE" on stderr, exit status 125 */
__attribute__((noreturn)) void die(const char *fmt, ...);
/* realloc, or die("out of memory") */
void *xrealloc(void *p, size_t n);

#endif
