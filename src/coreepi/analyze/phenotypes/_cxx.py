"""The C++ exception in flight, read from memory (GCC's libstdc++ and the
Itanium C++ ABI, https://itanium-cxx-abi.github.io/cxx-abi/abi-eh.html).

``__cxa_throw`` hands the unwinder a pointer to the ``_Unwind_Exception``
that ends the exception's ``__cxa_exception`` header; that pointer (or one
derived from it) sits in the stack frames of the throw, the unwinder and
``std::terminate``. The header is recognised by its 8-byte exception class,
"GNUCC++\\0" (a primary exception) or "GNUCC++\\x01" (a dependent one,
``std::rethrow_exception``).

Layout on x86-64 / aarch64 (libstdc++ ``unwind-cxx.h``): ``exceptionType``
(``std::type_info *``) is 80 bytes before the ``_Unwind_Exception``, which is
32 bytes long and followed by the thrown object; a ``type_info`` holds its
mangled name pointer at offset 8.
"""

from __future__ import annotations

from dataclasses import dataclass

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes._stack import stack_words
from coreepi.parse.demangle import demangle

__all__ = ["InFlightException", "find_exception"]

PRIMARY_CLASS = int.from_bytes(b"GNUCC++\x00", "big")
DEPENDENT_CLASS = int.from_bytes(b"GNUCC++\x01", "big")
TYPE_OFFSET = 80  # exceptionType, before the _Unwind_Exception
UNWIND_HEADER_SIZE = 32
SCAN_BYTES = 64 * 1024  # terminate runs a few frames above the throw

#: libstdc++ exception classes whose what() text is a __cow_string right
#: after the vtable pointer (src/c++11/cow-stdexcept.cc).
STRING_EXCEPTIONS = {
    "std::logic_error", "std::domain_error", "std::invalid_argument", "std::length_error",
    "std::out_of_range", "std::runtime_error", "std::range_error", "std::overflow_error",
    "std::underflow_error",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class InFlightException:
    unwind_header: int  # address of the _Unwind_Exception
    type_name: str | None  # demangled, e.g. "std::runtime_error"
    mangled_type: str | None  # e.g. "St13runtime_error"
    what: str | None  # for libstdc++'s string-carrying exceptions
    dependent: bool
    found_at: int  # the stack slot that pointed to it

    def evidence(self) -> dict[str, object]:
        """These facts as phenotype evidence (addresses as ``0x…`` strings)."""
        return {
            "exception_type": self.type_name,
            "mangled_type": self.mangled_type,
            "what": self.what,
            "unwind_header": f"0x{self.unwind_header:x}",
            "dependent_exception": self.dependent,
            "found_at_stack_slot": f"0x{self.found_at:x}",
        }


def find_exception(ctx: AnalysisContext) -> InFlightException | None:
    """The innermost C++ exception header a stack word points to, if any."""
    mem = ctx.memory
    if mem is None or ctx.arch not in ("x86_64", "aarch64"):
        return None
    seen: set[int] = set()
    for slot, value in stack_words(ctx, SCAN_BYTES):
        if value in seen or value & 7 or value < 0x10000:
            continue
        seen.add(value)
        head = mem.read(value, 8)
        if head is None:
            continue
        cls = int.from_bytes(head, "little")
        if cls not in (PRIMARY_CLASS, DEPENDENT_CLASS):
            continue
        header = value
        dependent = cls == DEPENDENT_CLASS
        if dependent:
            # __cxa_dependent_exception.primaryException (same offset as
            # exceptionType) points at the primary's thrown object.
            primary = mem.read_word(value - TYPE_OFFSET)
            if primary is None:
                continue
            header = primary - UNWIND_HEADER_SIZE
        type_name, mangled = _type_name(ctx, header)
        what = _what(ctx, header, type_name)
        return InFlightException(value, type_name, mangled, what, dependent, slot)
    return None


def _type_name(ctx: AnalysisContext, header: int) -> tuple[str | None, str | None]:
    assert ctx.memory is not None
    tinfo = ctx.memory.read_word(header - TYPE_OFFSET)
    name_ptr = ctx.memory.read_word(tinfo + 8) if tinfo else None
    raw = ctx.read_c_string(name_ptr, 1024) if name_ptr else None
    if not raw:
        return None, None
    mangled = raw.decode("ascii", "replace").lstrip("*")  # '*': type local to one object
    text = demangle("_ZTS" + mangled)
    prefix = "typeinfo name for "
    return (text[len(prefix) :] if text.startswith(prefix) else None), mangled


def _what(ctx: AnalysisContext, header: int, type_name: str | None) -> str | None:
    if type_name not in STRING_EXCEPTIONS or ctx.memory is None:
        return None
    obj = header + UNWIND_HEADER_SIZE
    text_ptr = ctx.memory.read_word(obj + 8)
    raw = ctx.read_c_string(text_ptr, 4096) if text_ptr else None
    return raw.decode("utf-8", "replace") if raw else None
