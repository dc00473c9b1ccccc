// cxx_exception: an uncaught C++ exception. __cxa_throw finds no handler and
// calls std::terminate -> abort -> SIGABRT (SI_TKILL).
#include <stdexcept>

__attribute__((noinline)) void load_config(int version)
{
    if (version != 3)
        throw std::runtime_error("unsupported config version"); // CRASH-LINE
}

int main()
{
    volatile int version = 2;
    load_config(version); // CALLER-LINE
    return 0;
}
