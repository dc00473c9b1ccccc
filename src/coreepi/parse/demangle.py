"""C++ symbol demangling (Itanium C++ ABI), through libstdc++'s
``__cxa_demangle`` via the cxxfilt package."""

from __future__ import annotations

from functools import lru_cache

import cxxfilt

__all__ = ["demangle"]


@lru_cache(maxsize=65_536)
def demangle(name: str) -> str:
    """``_ZN3Foo3barEi`` -> ``Foo::bar(int)``; the input unchanged when it is
    not a mangled name or libstdc++ is not available."""
    if not name.startswith("_Z"):
        return name
    try:
        return str(cxxfilt.demangle(name))
    except (cxxfilt.Error, OSError):
        return name
