/* null_fnptr: call through a NULL function pointer. The call pushes its
 * return address and jumps to 0 -> SIGSEGV / SEGV_MAPERR at 0 with pc 0; the
 * word at sp is the return address, just after the indirect call. */
typedef int (*handler_fn)(int);

handler_fn volatile on_event = 0;

__attribute__((noinline)) int dispatch(int event)
{
    return on_event(event) + 1; /* CRASH-LINE */
}

int main(void)
{
    return dispatch(3);
}
