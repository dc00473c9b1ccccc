/* ud2: execute the ud2 instruction -> SIGILL / ILL_ILLOPN; the fault address
 * is the address of the ud2 instruction. */
__attribute__((noinline)) void illegal(void)
{
    __asm__ volatile("ud2"); /* CRASH-LINE */
}

int main(void)
{
    illegal(); /* CALLER-LINE */
    return 0;
}
