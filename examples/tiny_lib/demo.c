/* tiny_demo: sums a fixed array with tiny_sum and checks the answer against
 * the closed form; prints the path taken.  Exit 0 on a right answer, 1 on a
 * wrong one -- the program sdematrix exec runs per CPU model. */
#include <stdio.h>

#include "tiny.h"

int main(void)
{
    static uint32_t v[1003];
    uint32_t want = 0;
    for (uint32_t i = 0; i < 1003; i++) {
        v[i] = i * 2654435761u; /* spread the bits; any values do */
        want += v[i];
    }
    uint32_t got = tiny_sum(v, 1003);
    printf("tiny_sum: %u (%s path)\n", got, tiny_path());
    return got == want ? 0 : 1;
}
