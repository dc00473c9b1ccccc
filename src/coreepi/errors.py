"""coreepi's error tree. Every error a user can cause derives from one base::

    CoreepiError
     ├── InputError            the input cannot be used (names the input)
     │    ├── NotACoreError        not an ELF core (empty, not ELF, ELF of another type)
     │    ├── CorruptCoreError     an ELF core whose structure is broken or absurd
     │    ├── UnsupportedArchError a core for an architecture coreepi cannot read
     │    └── ResourceLimitError   the input could not be read within this process's
     │                             limits (ENOMEM mapping a core under RLIMIT_AS):
     │                             not a property of the input; retry with more
     └── StoreError            the store cannot be opened or used (names the data dir)

The CLI turns an InputError or a StoreError into one line on stderr and exit
status 2.
"""

from __future__ import annotations

__all__ = [
    "CoreepiError",
    "CorruptCoreError",
    "InputError",
    "NotACoreError",
    "ResourceLimitError",
    "StoreError",
    "UnsupportedArchError",
]


class CoreepiError(Exception):
    """Base of every error coreepi raises on purpose."""


class InputError(CoreepiError):
    """An input cannot be used. ``str()`` is one line that names the input."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class NotACoreError(InputError):
    """The file is not an ELF core dump."""


class CorruptCoreError(InputError):
    """The file is an ELF core whose structure is truncated, inconsistent or absurd."""


class UnsupportedArchError(InputError):
    """The core is for an architecture coreepi cannot read."""


class ResourceLimitError(InputError):
    """The input could not be read within a resource limit of this process
    (its address space, RLIMIT_AS: ``mmap`` of a core failed with ENOMEM).
    Says nothing about the input: the same core may read fine with a larger
    limit, so a sandbox files it as ``memory-limit`` (retryable), never as an
    unreadable core."""


class StoreError(CoreepiError):
    """The store cannot be opened or used: data dir locked by another process,
    a schema newer than this coreepi knows, a damaged database file."""
