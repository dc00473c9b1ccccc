"""parse.elf: ELF core dumps -> CrashReport (notes, memory, drgn unwinding)."""
