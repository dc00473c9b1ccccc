#!/bin/sh
# A small test suite: each crasher runs in its own directory (a kernel
# core_pattern without %p keeps one core per directory).
cd "$(dirname "$0")"
fail=0
./ok || fail=1
mkdir -p run-segv run-abort
(cd run-segv && ../segv_child) || fail=1
(cd run-abort && ../thread_abort) || fail=1
echo "suite: fail=$fail"
exit $fail
