/* assert: a failed assert() -> __assert_fail -> abort -> SIGABRT (SI_TKILL). */
#include <assert.h>

volatile int answer = 41;

__attribute__((noinline)) void check_invariant(int value)
{
    assert(value == 42); /* CRASH-LINE */
}

int main(void)
{
    check_invariant(answer); /* CALLER-LINE */
    return 0;
}
