/* ret_corrupt MODE: make a `ret` (or an aligned store) go wrong on purpose.
 * Built with -O0 -fno-omit-frame-pointer, so each function's frame is
 * [rbp] = saved rbp, [rbp+8] = return address.
 *
 *   null        overwrite the saved return address with 0, return: pc 0,
 *               reached by ret (the word just below sp is 0)
 *   bogus       overwrite it with 0x100000001000 (canonical, unmapped):
 *               pc 0x100000001000 reached by ret
 *   noncanonical-ret  overwrite it with 0x8000000000001000: the ret itself
 *               faults (#GP -> SIGSEGV SI_KERNEL) with pc still on the ret
 *   misaligned  `leave; sub $8,%rsp; ret`: rsp is off by 8 at the ret, which
 *               pops the saved rbp (a stack address) as the return address:
 *               pc in the non-executable stack, sp = 8 mod 16 after the ret
 *   movaps      `sub $8,%rsp; movaps %xmm0,(%rsp)` in a function body: the
 *               16-byte aligned store faults (#GP -> SIGSEGV SI_KERNEL)
 *               because rsp is off by 8
 */
#include <string.h>

#define BOGUS_RETURN 0x100000001000UL
#define NONCANONICAL_RETURN 0x8000000000001000UL

__attribute__((noinline)) void return_to(unsigned long where)
{
    unsigned long *frame = __builtin_frame_address(0);
    frame[1] = where; /* the saved return address */
}

__attribute__((noinline)) void misaligned_return(void)
{
    __asm__ volatile("leave\n\tsub $8, %%rsp\n\tret" ::: "memory");
}

__attribute__((noinline)) void misaligned_spill(void)
{
    __asm__ volatile("sub $8, %%rsp\n\tmovaps %%xmm0, (%%rsp)\n\tadd $8, %%rsp" ::: "memory");
}

__attribute__((noinline)) void worker(const char *mode)
{
    if (strcmp(mode, "null") == 0)
        return_to(0);
    else if (strcmp(mode, "bogus") == 0)
        return_to(BOGUS_RETURN);
    else if (strcmp(mode, "noncanonical-ret") == 0)
        return_to(NONCANONICAL_RETURN);
    else if (strcmp(mode, "misaligned") == 0)
        misaligned_return();
    else if (strcmp(mode, "movaps") == 0)
        misaligned_spill();
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    worker(argv[1]);
    return 3;
}
