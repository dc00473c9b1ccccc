"""parse.kernel: kernel logs (oops, BUG, WARNING, KASAN, lockdep, hung task ...) -> CrashReport."""
