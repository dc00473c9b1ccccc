// noexcept_throw: a throw escaping a noexcept function. The personality
// routine finds the noexcept boundary during phase 2 of unwinding and calls
// std::terminate from inside the unwinder, so the abort's stack holds
// __gxx_personality_v0, _Unwind_RaiseException and __cxa_throw.
#include <stdexcept>

volatile int limit = 3;

__attribute__((noinline)) void parse_header(int n)
{
    if (n > limit)
        throw std::out_of_range("header too long"); // CRASH-LINE
}

__attribute__((noinline)) void handle(int n) noexcept
{
    parse_header(n);
}

int main()
{
    handle(7);
    return 0;
}
