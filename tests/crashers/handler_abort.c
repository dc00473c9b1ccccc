/* handler_abort: a SIGSEGV handler that reports and calls abort(), the shape
 * of HotSpot's fatal-signal path (JVM_handle_linux_signal -> VMError ->
 * os::abort). The store faults at 0x10 (SIGSEGV / SEGV_MAPERR); the core is
 * of the SIGABRT raised inside the handler. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

struct request { long id; long flags; int status; };
struct request *volatile current_request = NULL;
volatile int sink;

__attribute__((noinline)) static void report_fatal(int sig, siginfo_t *info, void *uc)
{
    (void)uc;
    sink = sig + (info->si_addr != NULL);
    abort();
}

__attribute__((noinline)) void store_field(struct request *req, int status)
{
    req->status = status; /* CRASH-LINE */
    sink = status;
}

__attribute__((noinline)) int handle_request(int status)
{
    store_field(current_request, status); /* CALLER-LINE */
    return sink + 1;
}

int main(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = report_fatal;
    sa.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &sa, NULL);
    return handle_request(7) == 0; /* MAIN-LINE */
}
