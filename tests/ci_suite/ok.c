/* A passing test: prints and exits 0. */
#include <stdio.h>
int main(void) { puts("ok: 2 + 2 == 4"); return 0; }
