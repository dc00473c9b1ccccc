"""The ``cpu-variant`` signature rule: glibc's CPU-specific implementations of
string and memory functions sign as the function, so one bug crashes into one
bucket on hosts with different CPUs. Names are glibc's own (ifunc-impl-list.c
of x86_64, aarch64, powerpc64 and s390x multiarch)."""

from __future__ import annotations

import pytest
from test_signature import LIB, make_report, sig

from coreepi.analyze.signature import generate_signature
from coreepi.analyze.signature.cpu_variant import base_function


@pytest.mark.parametrize(
    "variant, base",
    [
        ("__memset_avx512_unaligned_erms", "memset"),
        ("__memset_avx2_unaligned_erms", "memset"),
        ("__memset_evex_unaligned_erms", "memset"),
        ("__memset_avx2_unaligned_erms_rtm", "memset"),
        ("__memcpy_evex_unaligned", "memcpy"),
        ("__memmove_avx512_no_vzeroupper", "memmove"),
        ("__memcpy_ssse3_back", "memcpy"),
        ("__strlen_sse2", "strlen"),
        ("__strlen_avx2_rtm", "strlen"),
        ("__strchr_sse2_no_bsf", "strchr"),
        ("__memcmp_sse4_1", "memcmp"),
        ("__memcmp_evex_movbe", "memcmp"),
        ("__strcmp_sse42", "strcmp"),
        ("__rawmemchr_evex", "rawmemchr"),
        ("__wmemset_avx2_unaligned", "wmemset"),
        ("__stpcpy_avx2", "stpcpy"),
        ("__strncasecmp_l_avx2", "strncasecmp_l"),
        ("__memcpy_chk_avx512_unaligned_erms", "__memcpy_chk"),
        ("__memcpy_simd", "memcpy"),  # aarch64
        ("__memcpy_thunderx2", "memcpy"),
        ("__memset_zva64", "memset"),
        ("__memcpy_power8", "memcpy"),  # ppc64
        ("__strlen_vx", "strlen"),  # s390x
        ("__memset_z196", "memset"),
    ],
)
def test_variants_collapse_to_the_function(variant: str, base: str) -> None:
    assert base_function(variant) == base


@pytest.mark.parametrize(
    "name",
    ["memset", "__memset_helper", "__strlen_fast", "__libc_start_main", "__memcpy_chk",
     "strlen_sse2", "__pthread_kill_implementation", "Parser::memset_avx2"],
)
def test_other_names_are_left_alone(name: str) -> None:
    assert base_function(name) is None


def _crash_in(variant: str) -> str:
    report = make_report([(variant, "context", LIB + 0x100), ("fill_buffer", "cfi"),
                          ("handle_request", "cfi"), ("main", "cfi")])  # fmt: skip
    return sig(report)


def test_hosts_with_different_cpus_group_together() -> None:
    signatures = {_crash_in(v) for v in ("__memset_avx512_unaligned_erms",
                                         "__memset_avx2_unaligned_erms",
                                         "__memset_evex_unaligned_erms",
                                         "__memset_sse2_unaligned")}  # fmt: skip
    assert signatures == {"memset | fill_buffer | handle_request | main"}


def test_the_trail_says_which_variant() -> None:
    report = make_report([("__memset_avx2_unaligned_erms", "context", LIB + 0x100),
                          ("main", "cfi")])  # fmt: skip
    result = generate_signature(report)
    assert result is not None
    steps = [(s.before, s.after) for s in result.trail if s.rule == "cpu-variant"]
    assert steps == [("#0 __memset_avx2_unaligned_erms", "memset")]
