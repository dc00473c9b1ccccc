// indexer: the fleet's C++ service, a document indexer that reports parse
// errors with exceptions, sampled by a profiler's SIGUSR2 timer.
//
//   indexer BUG PROFILE [SECONDS] [SPIN]
//
// PROFILE is the deployment's exception profile:
//   normal                   one document in 4096 is malformed (an exception),
//                            no profiler
//   high-exceptions+sigusr2  one document in 3 is malformed, and a POSIX timer
//                            sends SIGUSR2 every 50 us to a sampling handler
//
// The race (reference disease (b) of DESIGN.md, the mechanism of
// tests/crashers_reference/unwind_race.cpp): while an exception unwinds,
// SlotGuard's destructor calls uw_restore_return(), which parks its own
// return address 8 KiB below the stack pointer, clears the slot and reads the
// copy back before `ret`. A SIGUSR2 landing in that window runs the handler on
// the same stack, the handler's zeroed sample buffer overwrites the copy, and
// `ret` jumps to address 0. The race is in every run; only the high profile
// (many exceptions, frequent signals) makes it likely. SPIN (default 64)
// widens the window so a crash comes within about a second.
//
// BUG: none (the race aside, a healthy run that exits 0 after SECONDS,
// default 2), or uncaught-exception (a schema error nobody catches:
// std::terminate, SIGABRT).
//
// x86-64 only (inline asm). Built -O1 -g by the simulator.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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
    "    mov %rax, -8192(%rsp)\n"
    "    movq $0, (%rsp)\n"
    "1:  dec %rdi\n"
    "    jg 1b\n"
    "    mov -8192(%rsp), %rax\n"
    "    mov %rax, (%rsp)\n"
    "    ret\n"
    "    .cfi_endproc\n"
    ".size uw_restore_return, .-uw_restore_return\n"
    ".popsection\n");

static long spin = 64;
static volatile sig_atomic_t samples;
static volatile long sink;

extern "C" void on_sigusr2(int)
{
    // A profiler's sample buffer, zeroed on the stack of whatever it interrupted.
    volatile char scratch[32768];
    for (unsigned i = 0; i < sizeof scratch; i += 8)
        *(volatile long *)&scratch[i] = 0;
    samples = samples + 1;
}

struct ParseError : std::runtime_error {
    explicit ParseError(long at) : std::runtime_error("bad token"), offset(at) {}
    long offset;
};

struct SchemaError : std::logic_error {
    SchemaError() : std::logic_error("field type changed under the index") {}
};

struct SlotGuard {
    long *slot;
    __attribute__((noinline)) ~SlotGuard()
    {
        if (std::uncaught_exceptions() > 0)
            uw_restore_return(spin);  // only on the exception path
        *slot = 0;
    }
};

struct Tokenizer {
    long slot = 1;
    long malformed_every = 4096;
    __attribute__((noinline)) long tokenize(long doc)
    {
        SlotGuard guard{&slot};
        long h = doc;
        for (int i = 0; i < 16; i++)
            h = h * 6364136223846793005L + 1442695040888963407L;
        if (doc % malformed_every == 0)
            throw ParseError(doc);
        return h & 0xff;
    }
};

struct Index {
    long errors = 0, terms = 0;
    bool schema_bug = false;
    __attribute__((noinline)) void update(long doc, Tokenizer &tok)
    {
        try {
            terms += tok.tokenize(doc);
        } catch (const ParseError &e) {
            errors += 1;
        }
        if (schema_bug && doc > 5000)
            check_schema(doc);
    }
    __attribute__((noinline)) void check_schema(long doc)
    {
        if (doc % 7 == 0)
            throw SchemaError();
    }
};

static double now()
{
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *bug = argc > 1 ? argv[1] : "none";
    const char *profile = argc > 2 ? argv[2] : "normal";
    double seconds = argc > 3 ? std::atof(argv[3]) : 2.0;
    if (argc > 4)
        spin = std::atol(argv[4]);
    Index index;
    Tokenizer tok;
    if (!std::strcmp(bug, "uncaught-exception"))
        index.schema_bug = true;
    else if (std::strcmp(bug, "none")) {
        std::fprintf(stderr, "indexer: unknown bug %s\n", bug);
        return 2;
    }
    if (!std::strcmp(profile, "high-exceptions+sigusr2")) {
        tok.malformed_every = 3;
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
    } else if (std::strcmp(profile, "normal")) {
        std::fprintf(stderr, "indexer: unknown profile %s\n", profile);
        return 2;
    }
    double deadline = now() + seconds;
    for (long doc = 1;; doc++) {
        index.update(doc, tok);
        if ((doc & 1023) == 0 && now() > deadline)
            break;
    }
    std::printf("indexer: %ld errors, %d samples, no crash\n", index.errors, (int)samples);
    sink = index.terms;
    return 0;
}
