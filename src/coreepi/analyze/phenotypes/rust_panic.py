"""rust-panic: a Rust program panicked and the panic ended the process
(``panic = "abort"``, a panic while panicking, or an unwind that reached
an ``extern "C"`` boundary): std's panic machinery is on the crashing stack.

The message (``index out of bounds: the len is 3 but the index is 8``) is
the panic payload's ``String``, which std formats on the heap while its
panic handler runs (library/std/src/panicking.rs, ``FormatStringPayload``);
the ``String`` itself (capacity, pointer, length: rustc's field order of
``Vec<u8>`` since 1.7x; the pointer-first order is accepted too) is a local
of the ``std::panicking::*`` frames, so only their stack slots are read. A
triple counts only when its bytes are UTF-8 text without NULs of exactly
that length; otherwise the phenotype fires without ``message``.
"""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.phenotypes.base import PhenotypeRule, register
from coreepi.model.report import Frame, Phenotype

MACHINERY = ("std::panicking::", "core::panicking::")
# the functions a panic starts in: the panic site's callee in the user's code
ENTRY = ("core::panicking::", "core::option::", "core::result::", "core::slice::index::")
MAX_MESSAGE_BYTES = 4096
MAX_FRAME_BYTES = 4096


@register
class RustPanic(PhenotypeRule):
    name = "rust-panic"
    description = (
        "SIGABRT with std's panic machinery (std::panicking::*) on the crashing stack; the "
        "panic message is read from the payload String when its stack slots hold one."
    )

    def evaluate(self, ctx: AnalysisContext) -> Phenotype | None:
        sig = ctx.report.signal
        if sig is None or sig.name != "SIGABRT" or ctx.thread is None:
            return None
        frames = ctx.thread.frames
        names = [f.function or "" for f in frames]
        if not any(n.startswith("std::panicking::") for n in names):
            return None
        evidence: dict[str, object] = {}
        # the outermost panic entry point: the function the user's code called
        entry = [i for i, n in enumerate(names) if n.startswith(ENTRY)]
        if entry:
            evidence["panic_function"] = names[entry[-1]]
            after = entry[-1] + 1
            evidence["panicking_frame"] = names[after] if after < len(names) else None
        message = _payload_message(ctx, frames)
        if message is not None:
            evidence["message"] = message
        return self.fire(**evidence)


def _payload_message(ctx: AnalysisContext, frames: list[Frame]) -> str | None:
    """The first payload-shaped String in the stack slots of the
    ``std::panicking::*`` frames, decoded, or None."""
    mem = ctx.memory
    if mem is None:
        return None
    for i, frame in enumerate(frames[:-1]):
        if not (frame.function or "").startswith(MACHINERY[0]) or frame.sp is None:
            continue
        top = frames[i + 1].sp
        if top is None or not frame.sp < top <= frame.sp + MAX_FRAME_BYTES:
            continue
        data = mem.read(frame.sp, top - frame.sp + 16)
        if data is None:
            continue
        words = [int.from_bytes(data[k : k + 8], "little") for k in range(0, len(data) - 7, 8)]
        for a, b, length in zip(words, words[1:], words[2:], strict=False):
            for cap, ptr in ((a, b), (b, a)):
                text = _string_at(ctx, ptr, cap, length)
                if text is not None:
                    return text
    return None


def _string_at(ctx: AnalysisContext, ptr: int, cap: int, length: int) -> str | None:
    """The text of a ``String`` (ptr, cap, len) when it looks like one."""
    if not 0 < length <= cap <= MAX_MESSAGE_BYTES or ptr < 0x10000:
        return None
    assert ctx.memory is not None
    raw = ctx.memory.read(ptr, length)
    if raw is None or b"\0" in raw:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return text if text.isprintable() else None
