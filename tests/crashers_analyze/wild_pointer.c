/* wild_pointer: load through 0x3ead0000beef, a canonical user-space address
 * that nothing maps and that is far from NULL -> SIGSEGV / SEGV_MAPERR with
 * fault address 0x3ead0000beef. */
long *volatile wild = (long *)0x3ead0000beefUL;

__attribute__((noinline)) long load(long *where)
{
    return *where; /* CRASH-LINE */
}

int main(void)
{
    return (int)load(wild);
}
