/* null_deref: store through a NULL struct pointer.
 * The field sits at offset 0x10, so the fault address is exactly 0x10
 * (SIGSEGV / SEGV_MAPERR). Built three ways: -O0, -O0 then stripped, and
 * -O2 -fomit-frame-pointer; the pointer comes from a volatile global and the
 * calls are not tail calls, so every variant keeps main -> handle_request ->
 * store_field on the stack. */
#include <stddef.h>

struct request {
    long id;        /* 0x00 */
    long flags;     /* 0x08 */
    int status;     /* 0x10 */
};

struct request *volatile current_request = NULL;
volatile int sink;

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
    return handle_request(7) == 0; /* MAIN-LINE */
}
