"""The ``cpu-variant`` signature rule: a C library's CPU-specific variant of a
string or memory function is signed as the function itself.

glibc picks one of several implementations of ``memset``, ``memcpy``,
``strlen`` … when a process starts (GNU IFUNC), by what the CPU can do:
``__memset_avx512_unaligned_erms`` on one host, ``__memset_avx2_unaligned_erms``
on the next, ``__memset_evex_unaligned_erms`` on a third (x86-64,
``sysdeps/x86_64/multiarch/ifunc-impl-list.c``); ``__memcpy_simd`` or
``__memcpy_thunderx2`` on arm64, ``__memcpy_power8`` on ppc64,
``__memset_z196`` on s390x. The bug is the same wherever it runs: one NULL
write through ``memset`` must be one bucket on a fleet of mixed CPUs, so
the frame becomes ``memset`` (``__memcpy_chk_avx_unaligned`` becomes
``__memcpy_chk``, the fortified entry point's own name). Socorro's siggen
folds such implementation names the same way with its irrelevant/prefix
lists and its ``(anonymous namespace)``/clone normalization: names that
change with the build or the host, not with the code, must not split a
signature.

The name must be a known family (``mem*``, ``str*``, ``stp*``, ``wcs*``,
``wmem*``, ``wcp*``, ``rawmemchr``, ``bzero``, ``bcopy``) followed only by
variant words of glibc's multiarch directories, so a program's own
``__memset_helper`` is left alone. The module is not checked: a static
binary carries the same IFUNC variants in its own executable.
"""

from __future__ import annotations

import re

from coreepi.analyze.signature.rules import SignatureRule, SignatureState

__all__ = ["CpuVariants", "base_function"]

# The words glibc's multiarch implementations add to a function's name
# (glibc 2.17-2.41: sysdeps/x86_64/multiarch, sysdeps/i386/i686/multiarch,
# sysdeps/aarch64/multiarch, sysdeps/powerpc/powerpc64/multiarch,
# sysdeps/s390/multiarch).
_VARIANT_WORD = (
    r"(?:sse2|sse3|ssse3|sse4_1|sse4_2|sse42|avx|avx2|avx512|avx512f|avx512bw|evex|evex512"
    r"|erms|unaligned|aligned|rtm|movbe|back|no_vzeroupper|no_bsf|bsf|ia32|i386|i586|i686"
    r"|generic|simd|nosimd|asimd|sve|mops|a64fx|thunderx|thunderx2|kunpeng|falkor|emag|zva64"
    r"|oryon1|ppc|power[4-9]x?|power10|cell|z900|z10|z196|z13|vx|arch13)"
)
_VARIANT = re.compile(
    r"__(?P<base>(?:mem|str|stp|wcs|wmem|wcp|rawmem|bzero|bcopy)[a-z0-9]*?)"
    r"(?P<suffix>_chk|_l)?"
    rf"_{_VARIANT_WORD}(?:_{_VARIANT_WORD})*"
)


def base_function(name: str) -> str | None:
    """The function a CPU-specific variant implements, or None when ``name``
    is not one: ``__memset_avx2_unaligned_erms`` -> ``memset``,
    ``__strncasecmp_l_avx2`` -> ``strncasecmp_l``, ``__memcpy_chk_avx_unaligned``
    -> ``__memcpy_chk``."""
    match = _VARIANT.fullmatch(name)
    if match is None:
        return None
    suffix = match["suffix"] or ""
    if suffix == "_chk":  # the fortified entry point is public as __NAME_chk
        return f"__{match['base']}_chk"
    return match["base"] + suffix


class CpuVariants(SignatureRule):
    """Each frame named by a CPU-specific variant gets the function's own name."""

    name = "cpu-variant"

    def action(self, state: SignatureState) -> None:
        for f in state.frames:
            base = base_function(f.text)
            if base is not None:
                state.record(self.name, f"#{f.index} {f.text}", base)
                f.text = base
