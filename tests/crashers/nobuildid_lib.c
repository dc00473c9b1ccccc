/* nobuildid_lib: a shared library linked with --build-id=none, whose
 * lib_store() stores through NULL (SIGSEGV / SEGV_MAPERR at 0x0). Built a
 * second time with -DOTHER as a different library of the same page layout
 * (other names, other code), the wrong file a sysroot may hold. */
volatile int *volatile lib_target = 0;

#ifndef OTHER
__attribute__((noinline)) int lib_store(int v)
{
    *lib_target = v; /* CRASH-LINE */
    return v + 1;
}

__attribute__((noinline)) int lib_entry(int v)
{
    return lib_store(v * 2) + 1; /* CALLER-LINE */
}
#else
__attribute__((noinline)) int other_store(int v)
{
    *lib_target = v - 3;
    return v - 1;
}

__attribute__((noinline)) int lib_entry(int v)
{
    return other_store(v * 3) - 1;
}
#endif
