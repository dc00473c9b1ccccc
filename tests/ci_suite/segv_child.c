/* A test whose forked child segfaults (store through NULL + 0x10); the parent
   reports the child's death and exits 1, as a test harness would. */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

struct record { long id; long pad; int value; };

__attribute__((noinline)) void poke_record(struct record *r) {
    r->value = 42; /* CRASH-LINE */
}

__attribute__((noinline)) void child_work(void) {
    poke_record(NULL); /* CALLER-LINE */
}

int main(void) {
    pid_t pid = fork();
    if (pid == 0) {
        child_work();
        return 0;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    printf("child %d: %s\n", (int)pid, WIFSIGNALED(status) ? "killed by a signal" : "exited");
    return WIFSIGNALED(status) ? 1 : 0;
}
