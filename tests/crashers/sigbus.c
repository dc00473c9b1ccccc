/* sigbus: map two pages of a 16-byte file (argv[1]) at 0x5b5b0000 and read
 * the second page, which lies wholly beyond end of file -> SIGBUS /
 * BUS_ADRERR at 0x5b5b1020. Prints the address it will fault at. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#define MAP_AT ((void *)0x5b5b0000UL)

__attribute__((noinline)) int read_beyond_eof(volatile char *where)
{
    return *where; /* CRASH-LINE */
}

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, "sixteen bytes!!\n", 16) != 16) {
        perror(argv[1]);
        return 2;
    }
    char *map = mmap(MAP_AT, 8192, PROT_READ, MAP_SHARED | MAP_FIXED_NOREPLACE, fd, 0);
    if (map != MAP_AT) {
        perror("mmap");
        return 2;
    }
    printf("fault-address %p\n", (void *)(map + 4096 + 0x20));
    fflush(stdout);
    return read_beyond_eof(map + 4096 + 0x20); /* CALLER-LINE */
}
