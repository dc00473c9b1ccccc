/* rodata_write: store into a string literal, which lives in the executable's
 * read-only .rodata -> SIGSEGV / SEGV_ACCERR, the fault address inside the
 * executable's r-- mapping. */
#include <stdio.h>

char *volatile greeting = "hello, world";

__attribute__((noinline)) void shout(char *text)
{
    text[0] = 'H'; /* CRASH-LINE */
}

int main(void)
{
    printf("fault-address %p\n", (void *)greeting);
    fflush(stdout);
    shout(greeting);
    return 0;
}
