/* bitflip: a valid heap pointer with bit 40 flipped, dereferenced ->
 * SIGSEGV / SEGV_MAPERR at an unmapped address one bit away from a live heap
 * block. Prints both addresses. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FLIPPED_BIT 40

__attribute__((noinline)) long load(long *where)
{
    return *where; /* CRASH-LINE */
}

int main(void)
{
    long *block = malloc(64);
    long *flipped = (long *)((uintptr_t)block ^ (1UL << FLIPPED_BIT));
    printf("original %p\nfault-address %p\n", (void *)block, (void *)flipped);
    fflush(stdout);
    return (int)load(flipped);
}
