/* heap_threads: the core-making program of the inspect benchmark.
 *
 *   heap_threads HEAP_MIB NTHREADS
 *
 * Touches HEAP_MIB MiB of heap (malloc + memset, so every page is resident
 * and lands in the core), starts NTHREADS worker threads (256 KiB stacks,
 * each a few frames deep and blocked in read(2) on a pipe nobody writes),
 * then crashes with SIGSEGV: in the last worker when there are workers, in
 * main otherwise. The fault address is 0x10 (a store through a NULL struct
 * pointer), so every core of the benchmark has the same crash. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STACK_BYTES (256 * 1024)

struct record {
    long id;     /* 0x00 */
    long flags;  /* 0x08 */
    int status;  /* 0x10 */
};

static struct record *volatile null_record = NULL;
static pthread_barrier_t barrier;
static int blocker[2];
static long nthreads;
volatile long sink;

__attribute__((noinline)) static void crash(int status)
{
    null_record->status = status; /* CRASH-LINE */
}

__attribute__((noinline)) static void block_forever(void)
{
    char byte;
    (void)!read(blocker[0], &byte, 1); /* nobody ever writes */
}

__attribute__((noinline)) static void level3(uintptr_t index)
{
    if (index + 1 == (uintptr_t)nthreads)
        crash((int)index);
    block_forever();
    sink += (long)index;
}

__attribute__((noinline)) static void level2(uintptr_t index)
{
    level3(index);
    sink += 2;
}

__attribute__((noinline)) static void level1(uintptr_t index)
{
    level2(index);
    sink += 1;
}

static void *worker(void *arg)
{
    pthread_barrier_wait(&barrier);
    level1((uintptr_t)arg);
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s HEAP_MIB NTHREADS\n", argv[0]);
        return 2;
    }
    size_t heap = (size_t)strtoul(argv[1], NULL, 10) << 20;
    nthreads = strtol(argv[2], NULL, 10);
    if (pipe(blocker) != 0)
        return 2;
    if (heap) {
        unsigned char *p = malloc(heap);
        if (p == NULL)
            return 2;
        memset(p, 0x5a, heap); /* touch every page */
        sink = p[heap - 1];
    }
    if (nthreads <= 0) {
        crash(0);
        return 1;
    }
    pthread_t *threads = calloc((size_t)nthreads, sizeof *threads);
    pthread_attr_t attr;
    pthread_barrier_init(&barrier, NULL, (unsigned)nthreads + 1);
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, STACK_BYTES);
    for (long i = 0; i < nthreads; i++)
        if (pthread_create(&threads[i], &attr, worker, (void *)(uintptr_t)i) != 0)
            return 2;
    pthread_barrier_wait(&barrier);
    block_forever();
    return 0;
}
