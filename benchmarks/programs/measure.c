/* measure: run a command, then write its wall time and resource use.
 *
 *   measure RESULT_FILE COMMAND [ARG...]
 *
 * Forks (not vforks) and execs COMMAND, waits for it with wait4(2) and writes
 * one line to RESULT_FILE:
 *
 *   wall_ns=N user_us=N sys_us=N maxrss_kib=N status=N
 *
 * status is the exit status, or 128 + the signal number. Why not time it from
 * Python: a child started with vfork/posix_spawn inherits its parent's peak
 * RSS into ru_maxrss at exec (the kernel records the old mm's high-water
 * mark), so the benchmark's own memory would leak into the numbers. Forked
 * from this small program, the child's ru_maxrss is its own. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s RESULT_FILE COMMAND [ARG...]\n", argv[0]);
        return 2;
    }
    FILE *out = fopen(argv[1], "w");
    if (out == NULL) {
        perror(argv[1]);
        return 2;
    }
    long long start = now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        return 2;
    }
    if (pid == 0) {
        fclose(out);
        execvp(argv[2], argv + 2);
        perror(argv[2]);
        _exit(127);
    }
    int wstatus;
    struct rusage ru;
    if (wait4(pid, &wstatus, 0, &ru) < 0) {
        perror("wait4");
        return 2;
    }
    long long wall = now_ns() - start;
    int status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    fprintf(out, "wall_ns=%lld user_us=%lld sys_us=%lld maxrss_kib=%ld status=%d\n", wall,
            (long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
            (long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec, ru.ru_maxrss, status);
    return fclose(out) == 0 ? 0 : 2;
}
