/* divzero: integer division by zero -> SIGFPE / FPE_INTDIV; the fault
 * address is the address of the idiv instruction. */
volatile int zero = 0;

__attribute__((noinline)) int divide(int a, int b)
{
    return a / b; /* CRASH-LINE */
}

int main(void)
{
    return divide(1, zero); /* CALLER-LINE */
}
