/* threads50: 50 worker threads and main meet at a barrier; then worker 37
 * (and only it) stores through the address 37 * 8 = 0x128 -> SIGSEGV /
 * SEGV_MAPERR at 0x128 in a non-main thread. Everyone else blocks. Workers
 * have 64 KiB stacks so the core stays small. The process has 51 threads. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#define NWORKERS 50
#define CRASHER 37

static pthread_barrier_t barrier;
static int blocker[2];

__attribute__((noinline)) void crash_in_worker(uintptr_t index)
{
    *(volatile long *)(index * 8) = (long)index; /* CRASH-LINE */
}

static void *worker(void *arg)
{
    uintptr_t index = (uintptr_t)arg;
    char byte;
    pthread_barrier_wait(&barrier);
    if (index == CRASHER)
        crash_in_worker(index); /* CALLER-LINE */
    (void)!read(blocker[0], &byte, 1); /* nobody ever writes */
    return NULL;
}

int main(void)
{
    pthread_t threads[NWORKERS];
    pthread_attr_t attr;
    char byte;

    if (pipe(blocker) != 0)
        return 2;
    pthread_barrier_init(&barrier, NULL, NWORKERS + 1);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    for (uintptr_t i = 0; i < NWORKERS; i++)
        if (pthread_create(&threads[i], &attr, worker, (void *)i) != 0)
            return 2;
    pthread_barrier_wait(&barrier);
    (void)!read(blocker[0], &byte, 1);
    return 0;
}
