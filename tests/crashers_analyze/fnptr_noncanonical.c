/* fnptr_noncanonical: call through a function pointer overwritten with
 * 0x4141414141414141 (a classic overflow pattern), which is not canonical on
 * x86-64. The call faults on itself (#GP, Intel SDM vol. 2 CALL: "#GP(0) if
 * the target offset is non-canonical"): SIGSEGV/SI_KERNEL, si_addr 0, pc at
 * the call, nothing pushed. "register" calls through a register (gcc -O0
 * loads the pointer first), "memory" through a table slot in memory. */
#include <string.h>

typedef int (*handler_fn)(int);

struct ops {
    handler_fn open;
    handler_fn close;
};

static int nop(int x) { return x; }

handler_fn volatile on_event = nop;
struct ops table = {nop, nop};

__attribute__((noinline)) int dispatch(int event)
{
    return on_event(event) + 1; /* CALL-REGISTER */
}

__attribute__((noinline)) int close_via(struct ops *ops, int event)
{
    int r;
    /* call *8(ops): the target is read from the table slot by the call itself */
    __asm__ volatile("mov %2, %%edi\n\tcall *8(%1)" /* CALL-MEMORY */
                     : "=a"(r)
                     : "r"(ops), "r"(event)
                     : "rdi", "rsi", "rdx", "rcx", "r8", "r9", "r10", "r11", "memory");
    return r;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "memory") == 0) {
        table.close = (handler_fn)0x4141414141414141UL;
        return close_via(&table, 3);
    }
    on_event = (handler_fn)0x4141414141414141UL;
    return dispatch(3);
}
