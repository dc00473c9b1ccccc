/* handler_crash: a NULL store inside a SIGUSR1 handler. The kernel pushed an
 * rt_sigframe on the stack whose return address is glibc's __restore_rt, so
 * the crashing stack reads: on_usr1 <- __restore_rt <- raise ... <- main. */
#include <signal.h>

int *volatile target = 0;

static void on_usr1(int sig)
{
    *target = sig; /* CRASH-LINE */
}

int main(void)
{
    struct sigaction sa = {0};
    sa.sa_handler = on_usr1;
    sigaction(SIGUSR1, &sa, 0);
    raise(SIGUSR1);
    return 0;
}
