"""The message glibc leaves in memory before it aborts.

``__assert_fail`` (assert/assert.c), ``__libc_message`` (used by malloc's
``malloc_printerr``, fortify and the stack protector) and ``__libc_fatal``
format their text into a fresh mapping and store its address in the
GLIBC_PRIVATE variable ``__abort_msg`` (a ``struct abort_msg_s *``:
``unsigned int size; char msg[];``, include/stdlib.h), so that it survives
in core dumps. That holds from glibc 2.13 through current releases.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._dynsym import find_module, lookup_symbol

__all__ = ["AbortMessage", "abort_message", "malloc_error"]

MAX_MESSAGE = 4096
ASSERT_RE = re.compile(r"Assertion [`'](?P<expr>.*)' failed\.", re.DOTALL)

#: Prefixes of the texts glibc's malloc passes to malloc_printerr
#: (malloc/malloc.c, 2.26 .. 2.41), e.g. "free(): double free detected in
#: tcache 2", "malloc(): corrupted top size", "double free or corruption
#: (fasttop)", "corrupted size vs. prev_size", "munmap_chunk(): invalid
#: pointer"; and malloc's own assert ("malloc.c:…: sysmalloc: Assertion"
#: before 2.36, "Fatal glibc error: malloc assertion failure in sysmalloc: …"
#: since).
MALLOC_PREFIXES = (
    "free():", "malloc():", "realloc():", "calloc():", "double free or corruption",
    "corrupted ", "munmap_chunk():", "mremap_chunk():", "malloc_consolidate():",
    "_int_malloc():", "_int_free():", "tcache_thread_shutdown():", "malloc_check_get_size:",
    "break adjusted to free malloc space", "free(): invalid pointer", "memalign():",
    "posix_memalign():", "aligned_alloc():", "pvalloc():", "valloc():",
    "malloc assertion failure in ",
)  # fmt: skip
MALLOC_ASSERT_RE = re.compile(r"^malloc\.c:\d+: \w+: Assertion")


@dataclass(frozen=True, slots=True)
class AbortMessage:
    text: str
    kind: str  # assert | malloc | fortify | stack-protector | other
    symbol_address: int  # &__abort_msg
    buffer_address: int  # the struct abort_msg_s it points to

    def evidence(self) -> dict[str, object]:
        """These facts as phenotype evidence (addresses as ``0x…`` strings)."""
        return {
            "message": self.text,
            "message_kind": self.kind,
            "abort_msg_symbol": f"0x{self.symbol_address:x}",
            "abort_msg_buffer": f"0x{self.buffer_address:x}",
        }


def _kind(text: str) -> str:
    body = text.split(": ", 1)[-1] if text.startswith("Fatal glibc error") else text
    if malloc_error(body):
        return "malloc"
    if ASSERT_RE.search(text):
        return "assert"
    if "buffer overflow detected" in text:
        return "fortify"
    if "stack smashing detected" in text:
        return "stack-protector"
    return "other"


def malloc_error(text: str) -> bool:
    """True when ``text`` is one of glibc malloc's corruption messages."""
    return text.startswith(MALLOC_PREFIXES) or bool(MALLOC_ASSERT_RE.match(text))


def abort_message(ctx: AnalysisContext) -> AbortMessage | None:
    """glibc's ``__abort_msg`` text, or None when unset or unreadable. Read
    once per crash (two rules use it) and kept on the context."""
    store = ctx.__dict__
    if _CACHE_KEY not in store:
        store[_CACHE_KEY] = _read(ctx)
    return store[_CACHE_KEY]  # type: ignore[no-any-return]


_CACHE_KEY = "_abort_message"


def _read(ctx: AnalysisContext) -> AbortMessage | None:
    if ctx.memory is None:
        return None
    libc = find_module(ctx, "libc.so", "libc-")
    if libc is None:
        return None
    symbol = lookup_symbol(ctx, libc, "__abort_msg")
    if symbol is None:
        return None
    buffer = ctx.memory.read_word(symbol)
    if not buffer:
        return None
    raw = ctx.read_c_string(buffer + 4, MAX_MESSAGE)
    if not raw:
        return None
    text = raw.decode("utf-8", "replace").rstrip("\n")
    return AbortMessage(text, _kind(text), symbol, buffer)
