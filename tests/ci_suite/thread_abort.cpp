// A test that aborts in a worker thread (a failed invariant).
#include <cstdlib>
#include <thread>

__attribute__((noinline)) void check_invariant(int n) {
    if (n != 7) std::abort(); // CRASH-LINE
}

__attribute__((noinline)) void worker_loop() {
    check_invariant(3); // CALLER-LINE
}

int main() {
    std::thread t(worker_loop);
    t.join();
    return 0;
}
