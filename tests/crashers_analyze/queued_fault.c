/* queued_fault SIGNAL CODE: a kernel-written core whose NT_SIGINFO carries a
 * fault si_code (e.g. SIGILL/ILL_ILLOPC, SIGBUS/BUS_MCEERR_AR) while pc sits on
 * an ordinary instruction -- the state a faulty CPU or DIMM leaves, which
 * working hardware will not produce on demand.
 *
 * How: a SIGUSR2 handler (with SIGNAL blocked while it runs) points the
 * interrupted pc at `ordinary_insn` (add %rsi,%rdi) and queues SIGNAL to this
 * process with rt_sigqueueinfo(2) -- allowed for a process's own pid even
 * with si_code > 0 -- and si_addr = ordinary_insn (SIGILL) or a mapped heap
 * page (SIGBUS). sigreturn unblocks SIGNAL, which the kernel then delivers
 * with pc = ordinary_insn; its default action dumps the core. The siginfo is
 * self-sent, not raised by the CPU: tests label it so. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

extern char ordinary_insn[];
__asm__(".text\n.globl ordinary_insn\nordinary_insn:\n\tadd %rsi, %rdi\n\tud2\n");

static int signo, code;
static void *fault_address;

static void on_usr2(int sig, siginfo_t *info, void *uctx)
{
    (void)sig, (void)info;
    ucontext_t *uc = uctx;
    uc->uc_mcontext.gregs[REG_RIP] = (greg_t)ordinary_insn;
    siginfo_t si;
    memset(&si, 0, sizeof si);
    si.si_signo = signo;
    si.si_code = code;
    si.si_addr = fault_address;
    syscall(SYS_rt_sigqueueinfo, getpid(), signo, &si);
}

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    signo = atoi(argv[1]);
    code = atoi(argv[2]);
    fault_address = signo == SIGILL ? (void *)ordinary_insn : malloc(4096);
    printf("fault-address %p\npc %p\n", fault_address, (void *)ordinary_insn);
    fflush(stdout);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_usr2;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, signo);
    sigaction(SIGUSR2, &sa, 0);
    raise(SIGUSR2);
    return 3;
}
