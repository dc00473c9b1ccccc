/* abort: call abort(). glibc raises SIGABRT with tgkill, so si_code is
 * SI_TKILL and the sender is the process itself. */
#include <stdlib.h>

__attribute__((noinline)) void give_up(void)
{
    abort(); /* CRASH-LINE */
}

int main(void)
{
    give_up(); /* CALLER-LINE */
    return 0;
}
