"""CFI indexes of ELF files kept across cores, by build-id (a bounded LRU).

Every core of a fleet maps the same few files (libc, ld.so, the service's
executable), and each analysis used to rebuild their :class:`CfiIndex`
(read ``.eh_frame_hdr`` and ``.eh_frame``, decode and sort the search
table: libc's ~4,000 entries) from scratch. A file's CFI is fixed by its
build-id, so one index per (build-id, role) serves every core that maps it.

Two ways the cache is filled:

- in one process (``coreepi inspect`` of several cores, a test): each miss
  is built and kept;
- across the forked children of a warm zygote
  (:mod:`coreepi.reanalysis.warm`), where what a child builds dies with it:
  the child hands the zygote the *names* of what it built
  (:meth:`CfiCache.take_built`: build-id, role, path, never the index
  itself), and the zygote builds those indexes itself (:meth:`CfiCache.fill`)
  from the file, after checking that the file is a regular file of bounded
  size whose build-id is the one claimed. A child subverted by a hostile
  core can therefore make the zygote read a file, not trust its data; the
  next children inherit the indexes by fork.

Entries without a build-id (and the vDSO, read from a core's memory) are
never cached: nothing identifies them across cores.
"""

from __future__ import annotations

import logging
import os
import stat
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable

from coreepi.parse.elf.cfi_index import CfiIndex
from coreepi.parse.elf.elfimage import build_id as file_build_id

__all__ = ["CACHE", "DEFAULT_SIZE", "SIZE_ENV", "CfiCache", "MAX_FILE_BYTES"]

MAX_FILE_BYTES = 2 << 30
"""Largest file the zygote indexes on a child's word, bytes (2 GiB: far above
any shared library; a bound on what a subverted child can make it read)."""

Key = tuple[str, str]
"""(build-id as lowercase hex, role: ``loaded`` or ``debug``)."""


class CfiCache:
    """A least-recently-used map (build-id, role) → :class:`CfiIndex`,
    holding at most ``maxsize`` indexes (each one file's search table and
    ``.eh_frame`` bytes: ~0.5 MB for libc). Thread-safe."""

    def __init__(self, maxsize: int = 128) -> None:
        self.maxsize = maxsize
        self._entries: OrderedDict[Key, CfiIndex] = OrderedDict()
        self._built: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, build_id: str | None, role: str, path: str,
            build: Callable[[str], CfiIndex] = CfiIndex.from_elf) -> CfiIndex:
        """The index of the file at ``path`` (the module's file of ``role``,
        whose build-id drgn checked is ``build_id``): from the cache, else
        ``build(path)``, kept when ``build_id`` is known."""
        if not build_id:
            return build(path)
        key = (build_id.lower(), role)
        with self._lock:
            index = self._entries.get(key)
            if index is not None:
                self._entries.move_to_end(key)
                self.hits += 1
                return index
            self.misses += 1
        index = build(path)
        self._put(key, index)
        with self._lock:
            self._built.append((key[0], role, path))
        return index

    def _put(self, key: Key, index: CfiIndex) -> None:
        with self._lock:
            self._entries[key] = index
            self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def take_built(self) -> list[tuple[str, str, str]]:
        """(build-id, role, path) of every index built by this process since
        the last call (a zygote's child reports them, see the module doc)."""
        with self._lock:
            built, self._built = self._built, []
        return built

    def fill(self, build_id: str, role: str, path: str) -> bool:
        """Build and keep the index of ``path`` if it is a regular file of
        at most :data:`MAX_FILE_BYTES` whose GNU build-id is ``build_id``
        and no index is cached for it yet. True when one was added."""
        key = (build_id.lower(), role)
        with self._lock:
            if key in self._entries:
                return False
        try:
            # O_NONBLOCK: a FIFO named by a subverted child must not hang us
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return False
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
                return False
            try:
                if file_build_id(fh) != key[0]:
                    return False
            except (OSError, ValueError, struct.error):
                return False
        self._put(key, CfiIndex.from_elf(path))
        return True

    def clear(self) -> None:
        """Forget every index and the list of built ones."""
        with self._lock:
            self._entries.clear()
            self._built = []


SIZE_ENV = "COREEPI_CFI_CACHE_FILES"
"""Environment variable: how many files' indexes the process's cache holds
(an integer >= 0; 0: none kept, every core builds its own, as before the
cache; default :data:`DEFAULT_SIZE`)."""

DEFAULT_SIZE = 128


def _size_from_env() -> int:
    text = os.environ.get(SIZE_ENV, "")
    if text.strip().isdigit():
        return int(text)
    if text:  # read at import, where raising would stop every analysis: said, not fatal
        logging.getLogger("coreepi.parse").warning(
            "%s=%r: not an integer >= 0; using %d", SIZE_ENV, text, DEFAULT_SIZE)
    return DEFAULT_SIZE


CACHE = CfiCache(_size_from_env())
"""The process's cache (inherited by a zygote's forked children)."""
