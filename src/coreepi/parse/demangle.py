"""Symbol demangling: C++ (Itanium C++ ABI) through libstdc++'s
``__cxa_demangle`` (the cxxfilt package), Rust (v0 and legacy) through the
rust-demangler package."""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["demangle", "demangle_function"]

# A legacy Rust symbol is an Itanium nested name whose last component is the
# crate hash ``17h`` + 16 hex digits (rustc_symbol_mangling/src/legacy.rs);
# only rust-demangler decodes its ``$u7b$``-style escapes and ``..`` paths.
_RUST_LEGACY = re.compile(r"_ZN.*17h[0-9a-f]{16}E")


@lru_cache(maxsize=65_536)
def demangle(name: str) -> str:
    """``_ZN3Foo3barEi`` -> ``Foo::bar(int)``, ``_RNv…`` -> ``crate::path``;
    the input unchanged when it is not a mangled name or cannot be demangled."""
    # Both demanglers are imported on the first mangled name: C programs
    # never need them, and cxxfilt's import (it loads libstdc++) costs ~0.04 s.
    if name.startswith("_R") or _RUST_LEGACY.fullmatch(name):
        text = _demangle_rust(name)
    elif name.startswith("_Z"):
        text = _demangle_cxx(name)
    else:
        return name
    # The legacy hash changes with every build of the crate: never part of a name.
    if "::h" in text and _is_rust_legacy_hash(text):
        return text.rsplit("::h", 1)[0]
    return text


def _demangle_rust(name: str) -> str:
    """A v0 (``_R…``) or legacy (``_ZN…17h…E``) Rust symbol, without v0's
    crate disambiguators (``Cs…_``, which change with the toolchain: the
    package leaves them out); ``name`` when it cannot be decoded."""
    import rust_demangler

    try:
        return str(rust_demangler.demangle(name))
    except Exception:  # the package raises bare exceptions on bad input
        return name


def _demangle_cxx(name: str) -> str:
    """An Itanium C++ symbol; ``name`` when it cannot be decoded."""
    import cxxfilt

    try:
        return str(cxxfilt.demangle(name))
    except (cxxfilt.Error, OSError):
        return name


def _is_rust_legacy_hash(text: str) -> bool:
    """Legacy Rust names end in ``::h`` + 16 hex digits (a hash, not a name)."""
    tail = text.rsplit("::h", 1)[-1]
    return len(tail) == 16 and all(c in "0123456789abcdef" for c in tail)


def demangle_function(name: str) -> str:
    """The demangled function name without its parameter list (how syzbot's
    titles and signatures name functions): ``_Z8fakeNameiii`` -> ``fakeName``."""
    text = demangle(name)
    if text == name or not text.endswith(")"):
        return text
    depth = 0
    for i in range(len(text) - 1, -1, -1):
        if text[i] == ")":
            depth += 1
        elif text[i] == "(":
            depth -= 1
            if depth == 0:
                return text[:i]
    return text
