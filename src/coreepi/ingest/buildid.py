"""Find a core's binaries by build-id: a fleet's ``symbols/`` directory and
configured symbol directories in the ``.build-id/xx/rest[.debug]`` layout
(as ``/usr/lib/debug``).

:class:`BuildIdIndex` reads the build-id of every ELF file of ``symbols/``
(whatever its name or place) and lays them out as a ``.build-id`` tree of
symbolic links, which the parser searches like any debug directory (drgn
looks for ``.build-id/xx/rest`` for a loaded file and ``.build-id/xx/rest.debug``
for a debug file). A file is indexed under the build-id it *contains*, so a
file with the right name but another build-id is never used.

:func:`core_main_build_id` reads the build-id of a core's main executable
from the core itself, so that ingest can pass the right ``exe``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile

from coreepi.errors import InputError
from coreepi.parse.elf.corefile import CoreFile
from coreepi.parse.elf.notes import read_notes

__all__ = ["BuildIdIndex", "ElfIdentity", "core_main_build_id", "elf_identity"]

AT_ENTRY = 9


@dataclass(frozen=True, slots=True)
class ElfIdentity:
    """What an ELF file is, for symbol lookup: its build-id, whether it can
    be a module's loaded file (it has code), whether it has DWARF."""

    build_id: str
    loadable: bool
    has_debug_info: bool


def elf_identity(path: str | os.PathLike[str]) -> ElfIdentity | None:
    """The :class:`ElfIdentity` of the file at ``path``; None when it is not
    an ELF executable, shared object or debug file with a GNU build-id
    (nor a regular file: a FIFO in a symbol tree would block ``open``)."""
    if not os.path.isfile(path):
        return None
    try:
        with open(path, "rb") as fh:
            if fh.read(4) != b"\x7fELF":
                return None
            fh.seek(0)
            elf = ELFFile(fh)
            if elf["e_type"] not in ("ET_EXEC", "ET_DYN"):
                return None
            build_id = None
            for section in elf.iter_sections():
                if section["sh_type"] == "SHT_NOTE":
                    for note in section.iter_notes():
                        if note["n_type"] == "NT_GNU_BUILD_ID":
                            build_id = str(note["n_desc"]).lower()
                            break
                if build_id:
                    break
            if not build_id:
                return None
            text = elf.get_section_by_name(".text")
            info = elf.get_section_by_name(".debug_info")
            return ElfIdentity(
                build_id,
                loadable=text is not None and text["sh_type"] != "SHT_NOBITS",
                has_debug_info=info is not None and info["sh_type"] != "SHT_NOBITS",
            )
    except (OSError, ELFError, ValueError, KeyError, IndexError, AssertionError):
        return None


@dataclass
class BuildIdIndex:
    """ELF files by build-id, materialised as a ``.build-id`` tree in ``root``.

    ``debug_dirs`` are the directories to hand to the parser: ``root`` first,
    then the configured symbol directories (already in ``.build-id`` layout;
    the parser checks build-ids of what it finds there).
    """

    root: Path
    loaded: dict[str, Path] = field(default_factory=dict)
    debug: dict[str, Path] = field(default_factory=dict)
    symbol_dirs: list[Path] = field(default_factory=list)

    @classmethod
    def build(
        cls,
        root: str | os.PathLike[str],
        sources: Iterable[str | os.PathLike[str]] = (),
        symbol_dirs: Sequence[str | os.PathLike[str]] = (),
    ) -> BuildIdIndex:
        """Index every ELF file under each directory of ``sources`` into a
        ``.build-id`` tree of symlinks under ``root`` (created if needed).
        When two files claim a build-id, the first in path order wins."""
        index = cls(Path(root), symbol_dirs=[Path(d) for d in symbol_dirs])
        for source in sources:
            for dirpath, dirs, names in os.walk(source):
                dirs.sort()
                for name in sorted(names):
                    index.add(Path(dirpath, name))
        return index

    def add(self, path: Path) -> ElfIdentity | None:
        """Index one file; None (and nothing indexed) when it is not a usable ELF file."""
        ident = elf_identity(path)
        if ident is None:
            return None
        bid = ident.build_id
        if ident.loadable and bid not in self.loaded:
            self.loaded[bid] = path.resolve()
            self._link(path, bid, "")
        if ident.has_debug_info and bid not in self.debug:
            self.debug[bid] = path.resolve()
            self._link(path, bid, ".debug")
        return ident

    def _link(self, target: Path, build_id: str, suffix: str) -> None:
        link = self.root / ".build-id" / build_id[:2] / f"{build_id[2:]}{suffix}"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(target.resolve())

    @property
    def debug_dirs(self) -> list[Path]:
        return [self.root, *self.symbol_dirs]

    def executable_for(self, build_id: str | None) -> Path | None:
        """A loaded file (executable or library) with this build-id, from
        ``symbols/`` or a symbol directory; checked, never merely by name."""
        if not build_id:
            return None
        build_id = build_id.lower()
        if build_id in self.loaded:
            return self.loaded[build_id]
        for d in self.symbol_dirs:
            candidate = d / ".build-id" / build_id[:2] / build_id[2:]
            if candidate.exists():
                ident = elf_identity(candidate)
                if ident is not None and ident.build_id == build_id and ident.loadable:
                    return candidate.resolve()
        return None

    def __len__(self) -> int:
        return len(set(self.loaded) | set(self.debug))


def core_main_build_id(core_path: str | os.PathLike[str]) -> str | None:
    """The build-id of the main executable of the (uncompressed) ELF core at
    ``core_path``, read from the ELF header page the core holds of it; None
    when the core does not hold it or is not a readable core."""
    # parse's reader of a build-id note from a module's first page
    from coreepi.parse.elf.unidentified import build_id_in_core

    try:
        with CoreFile(core_path) as core:
            notes = read_notes(core)
            entry = notes.auxv.get(AT_ENTRY)
            if entry is None:
                return None
            main = next((f for f in notes.files if f.start <= entry < f.end), None)
            if main is None:
                return None
            heads = [f for f in notes.files if f.path == main.path and f.offset == 0]
            return build_id_in_core(core, heads)
    except (InputError, OSError, ValueError):
        return None
