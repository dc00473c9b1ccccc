// unwind_race: reference disease (b), return-to-NULL from a race in the
// exception path, made visible by a high exception rate and frequent signals.
//
// A POSIX timer sends SIGUSR2 every 50 us; its handler (a sampling profiler's,
// say) zeroes a 32 KiB scratch buffer on the interrupted stack. The main loop
// parses documents; a parse error throws, and while the exception unwinds,
// SlotGuard's destructor (a cleanup run by the unwinder's landing pad) calls
// uw_restore_return(). That routine models the unwinder's racy step: it
// copies its own return address into a context area *below* the stack
// pointer, clears the slot, and reads the copy back before `ret`. Memory below
// sp belongs to whoever is interrupted next: when SIGUSR2 lands in that window
// the kernel builds the signal frame and runs the handler right there, the
// handler's zeroing overwrites the copy, and `ret` jumps to address 0
// (SIGSEGV, pc 0, the slot just below sp holds 0, rsp correctly aligned).
//
// The race is real (which signal hits the window varies run to run); the
// window is widened with a short spin (argv[1], default 64) so a test core
// takes well under a second. x86-64 only. Built -O0 -fno-omit-frame-pointer.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <stdexcept>

extern "C" void uw_restore_return(long spin);

// The return address travels through -8192(%rsp): beyond the 128-byte red
// zone the kernel leaves alone (x86-64 SysV ABI 3.2.2), so a signal frame and
// the handler's own frame may land on it.
__asm__(
    ".pushsection .text\n"
    ".globl uw_restore_return\n"
    ".type uw_restore_return, @function\n"
    "uw_restore_return:\n"
    "    .cfi_startproc\n"
    "    mov (%rsp), %rax\n"
    "    mov %rax, -8192(%rsp)\n"   // context copy of the return address
    "    movq $0, (%rsp)\n"         // the slot is dead: it is rebuilt from the copy
    "1:  dec %rdi\n"                // the window (one instruction in the original)
    "    jg 1b\n"
    "    mov -8192(%rsp), %rax\n"
    "    mov %rax, (%rsp)\n"
    "    ret\n"
    "    .cfi_endproc\n"
    ".size uw_restore_return, .-uw_restore_return\n"
    ".popsection\n");

static long spin = 64;
static volatile sig_atomic_t samples;

extern "C" void on_sigusr2(int)
{
    // A profiler's sample buffer, zeroed on the stack of whatever it interrupted.
    volatile char scratch[32768];
    for (unsigned i = 0; i < sizeof scratch; i += 8)
        *(volatile long *)&scratch[i] = 0;
    samples = samples + 1;
}

struct ParseError : std::runtime_error {
    explicit ParseError(int at) : std::runtime_error("bad token"), offset(at) {}
    int offset;
};

struct SlotGuard {
    int *slot;
    ~SlotGuard()
    {
        if (std::uncaught_exceptions() > 0)
            uw_restore_return(spin);  // only on the exception path
        *slot = 0;
    }
};

struct Parser {
    int slot = 1;
    __attribute__((noinline)) int parse(int doc)
    {
        SlotGuard guard{&slot};
        if (doc % 3 == 0)
            throw ParseError(doc);
        return doc * 2;
    }
};

struct DocumentTree {
    long errors = 0, nodes = 0;
    __attribute__((noinline)) void update(int doc)
    {
        try {
            Parser p;
            nodes += p.parse(doc);
        } catch (const ParseError &e) {
            errors += 1;
        }
    }
};

int main(int argc, char **argv)
{
    if (argc > 1)
        spin = std::atol(argv[1]);
    struct sigaction sa = {};
    sa.sa_handler = on_sigusr2;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGUSR2, &sa, nullptr);
    sigevent sev = {};
    sev.sigev_notify = SIGEV_SIGNAL;
    sev.sigev_signo = SIGUSR2;
    timer_t timer;
    timer_create(CLOCK_MONOTONIC, &sev, &timer);
    itimerspec its = {{0, 50000}, {0, 50000}};  // every 50 us
    timer_settime(timer, 0, &its, nullptr);
    DocumentTree tree;
    for (int doc = 0; doc < 200000000; doc++)
        tree.update(doc);
    std::printf("no crash: %ld errors, %d samples\n", tree.errors, (int)samples);
    return 0;
}
