/* The C library's number code, as ordinary programs use it: strtod parses
 * decimal, hex-float and special spellings, qsort orders them, printf and
 * snprintf print them (%g / %e / %a of doubles: glibc's __printf_fp, which
 * counts trailing zeros with TZCNT's encoding, F3 0F BC, at -march=x86-64).
 * Built with the distribution's default flags (no -march). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(void)
{
    static const char *in[] = {"3.25",   "-1e10", "2.718281828", "1e-300",
                               "42",     "0x1.8p3", "inf",       "6.02214076e23"};
    enum { n = sizeof in / sizeof in[0] };
    double v[n];
    char buf[64];
    for (int i = 0; i < n; i++)
        v[i] = strtod(in[i], NULL);
    qsort(v, n, sizeof v[0], cmp);
    for (int i = 0; i < n; i++) {
        snprintf(buf, sizeof buf, "%.17g", v[i]);
        printf("%s %e %a %zu\n", buf, v[i], v[i], strlen(buf));
    }
    return 0;
}
