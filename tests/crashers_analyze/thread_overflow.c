/* thread_overflow: unbounded recursion on a thread with a 64 KiB stack.
 * glibc puts a PROT_NONE guard page below each thread stack, so the fault
 * lands in that guard (SIGSEGV / SEGV_ACCERR) or just below it. */
#include <pthread.h>

volatile int stop_depth = -1;

__attribute__((noinline)) int recurse(int depth)
{
    volatile char buf[512];
    buf[0] = (char)depth;
    if (depth == stop_depth)
        return 0;
    return recurse(depth + 1) + buf[0];
}

static void *run(void *arg)
{
    (void)arg;
    recurse(0);
    return 0;
}

int main(void)
{
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_create(&t, &attr, run, 0);
    pthread_join(t, 0);
    return 0;
}
