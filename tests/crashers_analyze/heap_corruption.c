/* heap_corruption MODE: glibc malloc detects a broken heap and aborts with a
 * message (malloc_printerr -> __libc_message -> abort; the text is kept in
 * __abort_msg).
 *
 *   double-free    free() twice: "free(): double free detected in tcache 2"
 *   corrupted-top  overwrite the top chunk's size field, then allocate more
 *                  than is left: "malloc(): corrupted top size"
 */
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    if (strcmp(argv[1], "double-free") == 0) {
        char *p = malloc(32);
        free(p);
        free(p); /* CRASH-LINE */
    } else if (strcmp(argv[1], "corrupted-top") == 0) {
        size_t *p = malloc(24);
        p[3] = ~(size_t)0xe; /* the top chunk's size field, just past this block: now far larger than the heap */
        (void)!malloc(0x2000);
    }
    return 3;
}
