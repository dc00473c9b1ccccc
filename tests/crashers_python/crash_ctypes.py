"""A CPython process that dies in native code: a NULL write through ctypes.

``ctypes.memset(0, 0, 1)`` calls libc's memset on address 0 through libffi:
SIGSEGV (SEGV_MAPERR at 0) with libc, libffi, _ctypes and the interpreter on
the native stack, and write_record <- handle_request <- main <- <module> on
the Python stack. A second thread waits in idle_worker, so the core holds
two Python stacks. Lines are found by their marker comments.
"""

import ctypes
import threading

started = threading.Event()
never = threading.Event()


def idle_worker():
    started.set()
    never.wait()  # WORKER-LINE


def write_record(size):
    ctypes.memset(0, 0, size)  # CRASH-LINE


def handle_request(size):
    return write_record(size)  # CALLER-LINE


def main():
    threading.Thread(target=idle_worker, name="idle", daemon=True).start()
    started.wait()
    handle_request(1)  # MAIN-LINE


if __name__ == "__main__":
    main()  # MODULE-LINE
