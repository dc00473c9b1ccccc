"""parse.jvm: JVM fatal error logs (hs_err_pid) -> CrashReport."""
