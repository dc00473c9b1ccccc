/* readonly_write: write into a read-only anonymous page mapped at a fixed
 * address (0x5a5a0000), 0x18 bytes in: SIGSEGV / SEGV_ACCERR with fault
 * address 0x5a5a0018. Prints the address it will fault at. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>

#define RO_PAGE ((void *)0x5a5a0000UL)

__attribute__((noinline)) void poke(volatile long *where)
{
    *where = 42; /* CRASH-LINE */
}

int main(void)
{
    char *page = mmap(RO_PAGE, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
    if (page != RO_PAGE) {
        perror("mmap");
        return 2;
    }
    printf("fault-address %p\n", (void *)(page + 0x18));
    fflush(stdout);
    poke((volatile long *)(page + 0x18)); /* CALLER-LINE */
    return 0;
}
