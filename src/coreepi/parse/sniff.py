"""Content sniffing shared by the log parsers: is this head of a file text?

A log stays a log when a few bytes in it are not text: a crash or a power
loss leaves runs of NUL bytes in syslog files, serial consoles leave control
bytes. So a head is text when, NUL bytes aside, at most
:data:`MAX_CONTROL_FRACTION` of its bytes are control bytes (other than tab,
newline, carriage return, form feed and escape); binaries (ELF files,
compressed data, memory dumps) are far above that. The log recognisers
(:func:`coreepi.parse.kernel.oops.looks_like_kernel_log`,
:func:`coreepi.parse.jvm.hs_err.looks_like_hs_err`) then look at the text
with its NUL bytes removed.
"""

from __future__ import annotations

from coreepi.model.compression import compression_of

__all__ = ["MAX_CONTROL_FRACTION", "text_head"]

MAX_CONTROL_FRACTION = 0.05
_BINARY_MAGIC = (b"\x7fELF", b"MDMP")  # ELF files, minidumps; compressed data: compression_of
# bytes 0x01-0x1f except \t \n \f \r and ESC (ANSI colours in console logs), and DEL
_CONTROL = bytes(b for b in range(1, 32) if b not in (9, 10, 12, 13, 27)) + b"\x7f"
_DROP_CONTROL = bytes.maketrans(b"", b"")


def text_head(head: bytes, window: int = 1 << 16) -> bytes | None:
    """The first ``window`` bytes of ``head`` without their NUL bytes when
    they are text (see the module docstring), else None (binary, or nothing
    but NUL bytes)."""
    data = bytes(head[:window])
    if data.startswith(_BINARY_MAGIC) or compression_of(data) is not None:
        return None
    text = data.replace(b"\x00", b"")
    if not text:
        return None
    controls = len(text) - len(text.translate(_DROP_CONTROL, _CONTROL))
    return text if controls <= MAX_CONTROL_FRACTION * len(text) else None
