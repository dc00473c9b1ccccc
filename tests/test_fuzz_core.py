"""Property: ``parse_core`` on a mutated real core either returns a CrashReport
that survives a JSON round trip or raises :class:`coreepi.errors.InputError`
(one line naming the input). Nothing else: no other exception, no hang.

Mutations (hypothesis, derandomized) of real seed cores (:mod:`badcore`): byte
flips in the ELF header, program headers, notes and memory; extreme values in
note sizes and types, program header fields, ELF header fields, note
descriptors (registers, auxv, NT_FILE) and memory words (pointers drgn
follows: link map, ELF images); truncation; splices of one structure over
another. The mutated core is written to a temporary file, as drgn reads files.

``COREEPI_FUZZ_EXAMPLES=N`` scales every seed's example count; ``-m slow``
runs a long campaign.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from badcore import Layout, SeedUnavailable, elfutils_core, gcore_core, layout
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from coreepi.errors import InputError
from coreepi.model.report import CrashReport
from coreepi.parse.elf.core import parse_core

EXTREME32 = (0, 1, 3, 4, 5, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x7FFFFFFF, 0x80000000,
             0xFFFFFFF0, 0xFFFFFFFC, 0xFFFFFFFF)  # fmt: skip
EXTREME64 = EXTREME32 + (1 << 32, 1 << 40, 1 << 47, 1 << 62, 1 << 63, (1 << 64) - 4096,
                         (1 << 64) - 8, (1 << 64) - 1)  # fmt: skip

# (offset, format) of the ELF header fields after e_ident
EHDR_FIELDS = ((16, "<H"), (18, "<H"), (20, "<I"), (32, "<Q"), (40, "<Q"), (52, "<H"),
               (54, "<H"), (56, "<H"), (58, "<H"), (60, "<H"), (62, "<H"))  # fmt: skip
# (offset, format) of Elf64_Phdr fields: type, flags, offset, vaddr, filesz, memsz
PHDR_FIELDS = ((0, "<I"), (4, "<I"), (8, "<Q"), (16, "<Q"), (32, "<Q"), (40, "<Q"))
REGIONS = ("headers", "notes", "memory", "anywhere")


@dataclass(frozen=True)
class Seed:
    name: str
    data: bytes
    layout: Layout
    origin: Path  # the seed core itself
    path: Path  # where mutants are written

    def region(self, name: str) -> tuple[int, int]:
        """(start, length) of a region of the seed."""
        if name == "headers":
            return 0, self.layout.headers_end
        if name == "notes":
            seg = self.layout.note_segment
            return seg.offset, seg.filesz
        if name == "memory":  # the first pages of each segment: ELF images, link map, stack top
            spans = [(p.offset, min(p.filesz, 8192)) for p in self.layout.loads if p.filesz]
            return spans[0][0], spans[-1][0] + spans[-1][1] - spans[0][0]
        return 0, len(self.data)


# -- mutations -----------------------------------------------------------------

u32 = st.one_of(st.sampled_from(EXTREME32), st.integers(0, (1 << 32) - 1))
u64 = st.one_of(st.sampled_from(EXTREME64), st.integers(0, (1 << 64) - 1))
index = st.integers(0, 1 << 16)  # taken modulo the number of things indexed
position = st.integers(0, 1 << 32)  # taken modulo the length of a region

OPS = st.one_of(
    st.tuples(st.just("flip"), st.sampled_from(REGIONS), position, st.integers(1, 255)),
    st.tuples(st.just("note-field"), index, st.sampled_from((0, 4, 8)), u32),
    st.tuples(st.just("phdr-field"), index, st.sampled_from(PHDR_FIELDS), u64),
    st.tuples(st.just("ehdr-field"), st.sampled_from(EHDR_FIELDS), u64),
    st.tuples(st.just("desc-word"), index, position, u64),
    st.tuples(st.just("memory-word"), index, st.integers(0, 1023), u64),
    st.tuples(st.just("truncate"), position),
    st.tuples(
        st.just("splice"),
        st.sampled_from(REGIONS[:2]),
        position,
        st.sampled_from(REGIONS[:2]),
        position,
        st.integers(1, 256),
    ),
)


def mutate(seed: Seed, ops: Sequence[tuple[object, ...]]) -> bytes:
    data = bytearray(seed.data)
    lay = seed.layout

    def put(offset: int, fmt: str, value: int) -> None:
        size = struct.calcsize(fmt)
        if 0 <= offset and offset + size <= len(data):
            struct.pack_into(fmt, data, offset, value & ((1 << (8 * size)) - 1))

    for op in ops:
        kind = op[0]
        if kind == "flip":
            _, region, pos, xor = op
            start, length = seed.region(region)
            at = start + pos % max(1, length)
            if at < len(data):
                data[at] ^= xor
        elif kind == "note-field":
            _, i, field, value = op
            put(lay.notes[i % len(lay.notes)].at + field, "<I", value)
        elif kind == "phdr-field":
            _, i, (field, fmt), value = op
            put(lay.phdrs[i % len(lay.phdrs)].at + field, fmt, value)
        elif kind == "ehdr-field":
            _, (field, fmt), value = op
            put(field, fmt, value)
        elif kind == "desc-word":
            _, i, pos, value = op
            n = lay.notes[i % len(lay.notes)]
            if n.descsz >= 8:
                put(n.desc_at + pos % (n.descsz - 7) // 8 * 8, "<Q", value)
        elif kind == "memory-word":
            _, i, word, value = op
            loads = [p for p in lay.loads if p.filesz]
            p = loads[i % len(loads)]
            put(p.offset + (word * 8) % p.filesz, "<Q", value)
        elif kind == "truncate":
            del data[op[1] % max(1, len(data)) :]
        elif kind == "splice":
            _, src_region, src_pos, dst_region, dst_pos, n = op
            s0, slen = seed.region(src_region)
            d0, dlen = seed.region(dst_region)
            src = s0 + src_pos % max(1, slen)
            dst = d0 + dst_pos % max(1, dlen)
            chunk = seed.data[src : src + n]
            if dst + len(chunk) <= len(data):
                data[dst : dst + len(chunk)] = chunk
    return bytes(data)


def parses_or_fails_cleanly(path: Path) -> str:
    """The property. Returns "report" or "input-error"."""
    try:
        report = parse_core(path)
    except InputError as exc:
        text = str(exc)
        assert text.startswith(f"{path}: "), text
        assert "\n" not in text, text
        return "input-error"
    again = CrashReport.model_validate_json(report.model_dump_json())
    assert again.crash_id == report.crash_id
    return "report"


# -- seeds ------------------------------------------------------------------------


def _seed(name: str, core: Path, workdir: Path) -> Seed:
    data = core.read_bytes()
    return Seed(name, data, layout(data), core, workdir / f"{name}.mutant.core")


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.fixture(scope="module")
def gcore_seed(fuzz_dir: Path) -> Seed:
    try:
        return _seed("gcore", gcore_core(fuzz_dir / "gcore"), fuzz_dir)
    except SeedUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def kernel_seed(fuzz_dir: Path) -> Seed:
    try:
        return _seed("elfutils-x86_64", elfutils_core(fuzz_dir / "elfutils"), fuzz_dir)
    except SeedUnavailable as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def aarch64_seed(fuzz_dir: Path) -> Seed:
    try:
        return _seed("elfutils-aarch64", elfutils_core(fuzz_dir / "elfutils", "aarch64"), fuzz_dir)
    except SeedUnavailable as exc:
        pytest.skip(str(exc))


def _examples(default: int) -> int:
    scale = os.environ.get("COREEPI_FUZZ_EXAMPLES")
    return int(scale) if scale else default


def fuzz_settings(examples: int) -> settings:
    return settings(
        max_examples=examples,
        derandomize=True,  # the same examples on every run
        database=None,  # nothing written into the checkout
        deadline=None,  # one parse may load debug info; time is bounded by max_examples
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        print_blob=True,
    )


def _check(seed: Seed, ops: list[tuple[object, ...]]) -> None:
    note(f"seed {seed.name}, ops {ops}")
    seed.path.write_bytes(mutate(seed, ops))
    event(parses_or_fails_cleanly(seed.path))


MUTATIONS = st.lists(OPS, min_size=1, max_size=4)


@pytest.mark.parametrize("seed_fixture", ["gcore_seed", "kernel_seed", "aarch64_seed"])
def test_seeds_parse(request: pytest.FixtureRequest, seed_fixture: str) -> None:
    """The unmutated seeds give a report (else the property proves little)."""
    seed: Seed = request.getfixturevalue(seed_fixture)
    assert parses_or_fails_cleanly(seed.origin) == "report"


@fuzz_settings(_examples(60))
@given(ops=MUTATIONS)
def test_mutated_gcore_core(gcore_seed: Seed, ops: list[tuple[object, ...]]) -> None:
    _check(gcore_seed, ops)


@fuzz_settings(_examples(110))
@given(ops=MUTATIONS)
def test_mutated_kernel_core(kernel_seed: Seed, ops: list[tuple[object, ...]]) -> None:
    _check(kernel_seed, ops)


@fuzz_settings(_examples(40))
@given(ops=MUTATIONS)
def test_mutated_aarch64_core(aarch64_seed: Seed, ops: list[tuple[object, ...]]) -> None:
    _check(aarch64_seed, ops)


@pytest.mark.slow
@fuzz_settings(_examples(3000))
@given(ops=st.lists(OPS, min_size=1, max_size=8), which=st.sampled_from(("gcore", "kernel")))
def test_mutated_cores_long(
    gcore_seed: Seed, kernel_seed: Seed, ops: list[tuple[object, ...]], which: str
) -> None:
    _check(gcore_seed if which == "gcore" else kernel_seed, ops)
