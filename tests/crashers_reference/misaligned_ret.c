/* misaligned_ret: reference disease (a), "the stack pointer off by 8".
 *
 * A host whose CPU miscomputes rsp by 8 crashes wherever that happens. This
 * program reproduces the mechanics: release_buffer() is ordinary code (with
 * CFI, like any compiled function) except that its epilogue leaves rsp 8
 * bytes off before `ret` -- the miscomputed stack pointer, done with inline
 * asm. The `ret` then pops the wrong stack slot:
 *
 *   argv[2] == "low"  (default): rsp 8 too low; ret pops release_buffer's own
 *       saved rbp (a stack address) and jumps into the stack (SIGSEGV, pc in
 *       an rw- mapping, rsp = the real return slot: 8 mod 16 instead of 0).
 *   argv[2] == "high": rsp 8 too high; ret pops the caller's lowest stack
 *       word, whatever it holds: 0 (parse_header, compact_index: a return to
 *       NULL that is not disease (b)), a non-canonical value (parse_body: the
 *       `ret` itself raises #GP, pc at the ret, rsp 0 mod 16 where a ret in
 *       a normal function expects 8 mod 16), a data address (flush_output).
 *
 * argv[1] picks the caller (parse_header, parse_body, flush_output,
 * compact_index), so the same disease crashes in varied callers.
 * Built -O0 -fno-omit-frame-pointer like the other crashers. x86-64 only.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* long release_buffer(long *buf, long n): sums n words, then returns with rsp
 * off by 8. The mode (0: 8 too low, 1: 8 too high) is a global so the function
 * keeps the ordinary SysV signature. */
volatile long misalign_high = 0;

__asm__(
    ".pushsection .text\n"
    ".globl release_buffer\n"
    ".type release_buffer, @function\n"
    "release_buffer:\n"
    "    .cfi_startproc\n"
    "    push %rbp\n"
    "    .cfi_def_cfa_offset 16\n"
    "    .cfi_offset %rbp, -16\n"
    "    mov %rsp, %rbp\n"
    "    .cfi_def_cfa_register %rbp\n"
    "    xor %eax, %eax\n"
    "1:  test %rsi, %rsi\n"
    "    jz 2f\n"
    "    add (%rdi), %rax\n"
    "    add $8, %rdi\n"
    "    dec %rsi\n"
    "    jmp 1b\n"
    "2:  pop %rbp\n"
    "    .cfi_def_cfa %rsp, 8\n"
    "    cmpq $0, misalign_high(%rip)\n"
    "    jne 3f\n"
    "    lea -8(%rsp), %rsp\n"   /* MISALIGN: the stack pointer 8 too low */
    "    ret\n"
    "3:  lea 8(%rsp), %rsp\n"    /* MISALIGN: the stack pointer 8 too high */
    "    ret\n"
    "    .cfi_endproc\n"
    ".size release_buffer, .-release_buffer\n"
    ".popsection\n");

long release_buffer(long *buf, long n);

long request_arena[64];

/* buf[0] is each caller's lowest stack word (gcc -O0 lays the array out at
 * the bottom of the frame): the slot a `ret` with rsp 8 too high pops. What
 * it holds decides how the disease shows: 0 (a return to NULL, with rsp off
 * by 8), a non-canonical value (#GP on the ret itself), a data address (a
 * jump into rw- data). */
#define CALLER(name, n, first)                                             \
    __attribute__((noinline)) long name(void)                              \
    {                                                                      \
        long buf[n];                                                       \
        for (int i = 0; i < (n); i++)                                      \
            buf[i] = i;                                                    \
        buf[0] = (long)(first);                                            \
        return release_buffer(buf, (n));                                   \
    }

CALLER(parse_header, 4, 0)
CALLER(parse_body, 6, 0xdead00000000beefULL)
CALLER(flush_output, 8, &request_arena[8])
CALLER(compact_index, 10, 0)

__attribute__((noinline)) long handle_request(const char *which)
{
    if (!strcmp(which, "parse_body"))
        return parse_body();
    if (!strcmp(which, "flush_output"))
        return flush_output();
    if (!strcmp(which, "compact_index"))
        return compact_index();
    return parse_header();
}

int main(int argc, char **argv)
{
    const char *which = argc > 1 ? argv[1] : "parse_header";
    misalign_high = argc > 2 && !strcmp(argv[2], "high");
    printf("caller %s, rsp off by %s8\n", which, misalign_high ? "+" : "-");
    fflush(stdout);
    return (int)handle_request(which);
}
