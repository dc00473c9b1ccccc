/* noncanonical: load through 0x8000000000000000, which is not canonical on
 * x86-64 (bits 63..47 differ). The CPU raises #GP, not #PF, so the kernel
 * sends SIGSEGV with si_code SI_KERNEL and si_addr 0: only decoding the
 * faulting instruction recovers the address. */
long *volatile bad = (long *)0x8000000000000000UL;

__attribute__((noinline)) long load(long *where)
{
    return where[2]; /* CRASH-LINE: operand address 0x8000000000000010 */
}

int main(void)
{
    return (int)load(bad);
}
