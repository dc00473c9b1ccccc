/* overwrite_ret: a function writes 0 over its own saved return address and
 * returns: `ret` jumps to address 0 (SIGSEGV, pc 0). CFI unwinding has nothing
 * to start from at pc 0; the callers (store_record <- commit_batch <- main)
 * are still on the stack, and stack scanning must recover them.
 * Built -O0 with frame pointers and -O2 without. */
#include <stdio.h>

volatile long sink;

__attribute__((noinline)) void store_record(long value)
{
    /* __builtin_frame_address(0) is this frame's CFA minus 16 with a frame
     * pointer; without one the return address is found from the CFA itself. */
    void **slot = (void **)__builtin_frame_address(0) + 1;
#if !defined(__OPTIMIZE__)
    *slot = 0; /* CRASH-LINE */
#else
    slot = (void **)((char *)__builtin_dwarf_cfa() - 8);
    *(void *volatile *)slot = 0; /* CRASH-LINE */
#endif
    sink = value;
}

__attribute__((noinline)) long commit_batch(long n)
{
    long total = 0;
    for (long i = 0; i < n; i++)
        total += i;
    store_record(total); /* CALLER-LINE */
    sink += total;
    return total;
}

int main(void)
{
    printf("committing\n");
    fflush(stdout);
    return (int)commit_batch(5); /* MAIN-LINE */
}
