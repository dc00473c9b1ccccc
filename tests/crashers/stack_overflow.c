/* stack_overflow: unbounded recursion with a 256-byte frame on the main
 * thread. Run with a small RLIMIT_STACK (1 MiB, set by the test in the child
 * only) so the core stays small: SIGSEGV / SEGV_MAPERR just below the stack.
 * Which instruction of recurse() faults (the call, the push or a store)
 * depends on where the stack starts, so no line is marked for frame 0. */
volatile int stop_depth = -1; /* never reached: the recursion is unbounded */

__attribute__((noinline)) int recurse(int depth)
{
    volatile char buf[256];
    buf[0] = (char)depth;
    if (depth == stop_depth)
        return 0;
    return recurse(depth + 1) + buf[0]; /* CALLER-LINE */
}

int main(void)
{
    return recurse(0); /* MAIN-LINE */
}
