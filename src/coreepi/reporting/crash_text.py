"""Human-readable rendering of one CrashReport for the terminal (Rich):
``coreepi inspect`` and ``coreepi info``.

Every value from the crash (names, paths, evidence) goes in as
:class:`rich.text.Text`, never parsed as markup; evidence is written as
``key: value`` lines in words and hex, never as Python reprs. Warnings are
not drawn here: the caller sends them to stderr
(:func:`coreepi.reporting.crash_warnings.warning_lines`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from coreepi.analyze.signature.rules import MarkTruncatedStack
from coreepi.model.report import CrashReport, Frame, FrameTrust, RuntimeFrame, Thread
from coreepi.reporting.artifact_kind import (
    LOG_TRUST,
    LOG_TRUST_NOTE,
    artifact_kind,
    frame_trust_text,
)
from coreepi.reporting.fast_text import print_line, print_table

__all__ = ["evidence_items", "evidence_text", "frame_label", "render_identity", "render_report"]

_TRUST_STYLE = {
    FrameTrust.CONTEXT: "bold green",
    FrameTrust.CFI: "green",
    FrameTrust.FRAME_POINTER: "yellow",
    FrameTrust.SCAN: "red",
    FrameTrust.LOG: "cyan",  # the kernel's unwinder vouched for it, not ours
}
MAX_SHOWN_FRAMES = 40
MAX_SHOWN_MODULES = 15
MAX_EVIDENCE_CHARS = 160
MAX_EVIDENCE_ITEMS = 4
_FRAME_COLUMNS = ("#", "pc", "frame", "source", "trust")
_MODULE_COLUMNS = ("base", "end", "build-id", "path")


def frame_label(frame: Frame) -> str:
    """``function+0xoff`` when symbolized, else ``module+0xoffset``, else the pc."""
    if frame.function:
        off = f"+0x{frame.function_offset:x}" if frame.function_offset else ""
        return f"{frame.function}{off}"
    if frame.module and frame.module_offset is not None:
        return f"{frame.module.rsplit('/', 1)[-1]}+0x{frame.module_offset:x}"
    return "?" if frame.pc is None else f"0x{frame.pc:x}"


def evidence_text(value: object) -> str:
    """A phenotype's evidence value in words: scalars as they read, lists
    comma-separated, mappings as ``key value`` pairs, lists of mappings
    separated by ``;`` (at most :data:`MAX_EVIDENCE_ITEMS` items, then
    ``(+N more)``), cut at :data:`MAX_EVIDENCE_CHARS` with ``…``."""
    return _cut(_words(value), MAX_EVIDENCE_CHARS)


def _cut(text: str, max_chars: int | None) -> str:
    return text if max_chars is None or len(text) <= max_chars else text[: max_chars - 1] + "…"


def evidence_items(evidence: Mapping[str, object], *, max_chars: int | None = MAX_EVIDENCE_CHARS
                   ) -> list[tuple[str, str]]:
    """A phenotype's evidence as ``[(key, words), ...]`` in its order: values
    in words (:func:`evidence_text`; booleans ``yes``/``no``), keys without
    a value (None, empty text, list or mapping) left out. ``max_chars``: cut
    each value there with ``…`` (None: whole, for a page)."""
    return [(key, _cut(_words(value), max_chars)) for key, value in evidence.items()
            if _shown(value)]


def _words(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_words(v)}" for k, v in value.items() if _shown(v))
    if isinstance(value, (list, tuple, set)):
        items = list(value)
        sep = "; " if any(isinstance(i, Mapping) for i in items) else ", "
        shown = sep.join(_words(i) for i in items[:MAX_EVIDENCE_ITEMS])
        more = len(items) - MAX_EVIDENCE_ITEMS
        return shown + (f" (+{more} more)" if more > 0 else "")
    return str(value)


def _shown(value: object) -> bool:
    """Whether an evidence value says anything: False and 0 are answers
    ("corrupted: no", "pid: 0"); None and empty text or collections are not."""
    if isinstance(value, (str, Mapping, list, tuple, set)):
        return len(value) > 0
    return value is not None


def render_identity(report: CrashReport, console: Console) -> None:
    """What the store knows of a crash besides its analysis: id, time, host,
    source, and what became of its core (``coreepi info``)."""
    core = report.core
    kind = artifact_kind(report.source)
    size = f", {core.size_bytes:,} bytes" if core.size_bytes is not None else ""
    # a kernel or hs_err log is named as what it is: "core: stored" sent users to gdb
    heading, what = ("core", "") if kind.debuggable else ("artifact", f"{kind.name} ")
    opens = "coreepi dump / coreepi debug" if kind.debuggable else "coreepi dump"
    if core.stored and core.dropped_reason:  # kept as received, not analysable (list: unreadable)
        fate = f"{what}unreadable, kept as received{size} ({core.dropped_reason}; coreepi dump)"
    elif core.stored:
        fate = f"{what}stored{size} ({opens})"
    else:
        fate = f"{what}not stored" + (f" ({core.dropped_reason})" if core.dropped_reason else "")
    when = report.captured_at.isoformat(sep=" ") if report.captured_at else "unknown"
    for label, value in (("crash", report.crash_id), ("captured", when),
                         ("host", report.host_id or "unknown"), ("source", str(report.source)),
                         (heading, fate)):
        console.print(Text.assemble((f"{label}: ", "bold"), value))
    facts = [f"{k}={v}" for k, v in (("kernel", report.host.kernel),
                                     ("cpu", report.host.cpu_model),
                                     ("microcode", report.host.microcode)) if v]
    facts += [f"{k}={v}" for k, v in sorted(report.attributes.items())]
    if facts:
        console.print(Text.assemble(("attributes: ", "bold"), "  ".join(facts)))


def render_report(report: CrashReport, console: Console, *, all_threads: bool = False,
                  registers: bool = False) -> None:
    """Print the signal, the phenotypes and signature, the crashing thread's
    backtrace (with frame trust) and, for a CPython process, its Python
    stack — every thread's with ``all_threads`` — their registers with
    ``registers``, and the top modules."""
    _render_head(report, console)
    crashed = report.crashed_thread
    threads = report.threads if all_threads else [t for t in (crashed,) if t is not None]
    stacks = _python_stacks(report)
    for thread in threads:
        _render_thread(thread, console, registers=registers, source=report.source)
        frames = stacks.get(thread.tid) or (stacks.get(None, []) if thread.crashed else [])
        if frames:
            _render_python_stack(thread.tid, frames, console)
    hidden = len(report.threads) - len(threads)
    if hidden > 0:
        console.print(Text(f"{hidden} more thread{'s' if hidden > 1 else ''} "
                           "(--all-threads to show them)", style="dim"))
    if report.modules:
        rows = tuple((f"0x{m.base:x}", f"0x{m.end:x}", m.build_id or "-", m.path)
                     for m in report.modules[:MAX_SHOWN_MODULES])
        if _fits(_MODULE_COLUMNS, rows, console.width):
            print_table(console, ("modules", rows), lambda: _modules_table(rows))
        else:
            print_line(console, Text("modules", style="bold"))
            for base, end, build_id, path in rows:
                _print_entry(console, Text(f"  {base}-{end}  {build_id}"), Text(path))
        if len(report.modules) > MAX_SHOWN_MODULES:
            print_line(console, f"… {len(report.modules) - MAX_SHOWN_MODULES} more modules (--json)")


def _fits(columns: tuple[str, ...], rows: Iterable[tuple[str, ...]], width: int) -> bool:
    """Whether a Rich table (default box, one column of padding each side)
    of ``columns`` and ``rows`` shows every cell whole on one line within
    ``width`` columns. If not, the caller prints a list: Rich would fold
    identifiers, build-ids and paths mid-word (gdb and eu-stack never do)."""
    widths = [cell_len(c) for c in columns]
    for row in rows:
        widths = [max(w, cell_len(cell)) for w, cell in zip(widths, row, strict=True)]
    return sum(widths) + 3 * len(widths) + 1 <= width


def _modules_table(rows: tuple[tuple[str, str, str, str], ...]) -> Table:
    mods = Table(title="modules", title_justify="left")
    for col in _MODULE_COLUMNS:
        mods.add_column(col, no_wrap=True)
    for base, end, build_id, path in rows:
        mods.add_row(base, end, Text(build_id), Text(path))
    return mods


def _render_head(report: CrashReport, console: Console) -> None:
    proc = report.process
    sig = report.signal
    head = Text()
    if report.source != "elf-core":
        head.append(f"[{report.source}] ", style="cyan")
    if proc.comm or proc.pid is not None:
        head.append(f"{proc.comm or '?'} ", style="bold")
        head.append(f"pid {proc.pid} " if proc.pid is not None else "")
    if report.host.kernel:
        head.append(f"kernel {report.host.kernel} ")
    if sig is not None:
        head.append(f"killed by {sig.name or sig.number}", style="bold red")
        if sig.si_code_name or sig.si_code is not None:
            head.append(f" ({sig.si_code_name or sig.si_code})")
        if sig.fault_address is not None:
            head.append(f" at fault address 0x{sig.fault_address:x}")
    print_line(console, head)
    if proc.exe:
        print_line(console, Text(f"exe: {proc.exe}"))
    print_line(console, Text(f"arch: {report.arch or '?'}   threads: {len(report.threads)}"))
    if proc.cmdline:
        print_line(console, Text(f"cmdline: {' '.join(proc.cmdline)}"))
    if report.signature is not None:
        print_line(console, Text(f"signature: {report.signature.signature}", style="bold"))
        if note := _stack_cut_note(report):
            print_line(console, Text(note, style="bold"))
    for p in report.phenotypes:
        tag = " (hardware-indicative)" if p.hardware_indicative else ""
        print_line(console, Text.assemble(("phenotype ", ""), (p.name, "bold"), tag))
        for key, text in evidence_items(p.evidence):
            print_line(console, Text(f"  {key}: {text}"))


def _stack_cut_note(report: CrashReport) -> str | None:
    """"core truncated: the stack beyond frame N is missing" when the
    signature was marked by :class:`MarkTruncatedStack` (its stack pages are
    past the end of a truncated core), else None."""
    assert report.signature is not None
    if not any(s.rule == MarkTruncatedStack.name for s in report.signature.trail):
        return None
    thread = report.crashed_thread
    last = thread.frames[-1].index if thread is not None and thread.frames else 0
    return f"core truncated: the stack beyond frame {last} is missing"


def _render_thread(thread: Thread, console: Console, *, registers: bool, source: str) -> None:
    name = f" ({thread.name})" if thread.name else ""
    title = f"{'crashing thread' if thread.crashed else 'thread'} {thread.tid}{name}"
    if thread.frames:
        rows = tuple(
            (str(f.index), "" if f.pc is None else f"0x{f.pc:x}",
             frame_label(f) + (" [inlined]" if f.inlined else ""),
             f"{f.file.rsplit('/', 1)[-1]}:{f.line}" if f.file and f.line else "",
             frame_trust_text(source, f.trust))
            for f in thread.frames[:MAX_SHOWN_FRAMES])
        if _fits(_FRAME_COLUMNS, rows, console.width):
            # laid out once per distinct stack: a big log repeats the same one
            print_table(console, ("frames", title, rows), lambda: _frames_table(title, rows))
        else:
            _frames_list(title, rows, console)
        if len(thread.frames) > MAX_SHOWN_FRAMES:
            print_line(console, f"… {len(thread.frames) - MAX_SHOWN_FRAMES} more frames (--json)")
        if rows[0][-1] == LOG_TRUST:
            print_line(console, Text(f"trust {LOG_TRUST}: {LOG_TRUST_NOTE}", style="dim"))
    else:
        print_line(console, Text(f"{title}: no frames", style="bold"))
    if thread.unwind_error and thread.unwind_error != "not unwound":
        print_line(console, Text(f"unwinding: {thread.unwind_error}", style="dim"))
    if registers:
        _render_registers(thread.registers.items(), console)


def _python_stacks(report: CrashReport) -> dict[int | None, list[RuntimeFrame]]:
    """The Python frames of a CPython core by thread id (None: frames that
    name no thread, the crashing thread's), innermost first; {} for any
    other runtime."""
    stacks: dict[int | None, list[RuntimeFrame]] = {}
    if report.runtime.kind == "python":
        for frame in report.runtime.frames:
            stacks.setdefault(frame.thread_id, []).append(frame)
    return stacks


def _render_python_stack(tid: int, frames: list[RuntimeFrame], console: Console) -> None:
    """One thread's Python stack as py-spy's ``dump`` prints it: one
    ``function (file:line)`` line per frame, most recent call first."""
    print_line(console, Text(f"Python stack of thread {tid} (most recent call first):",
                             style="bold"))
    for f in frames[:MAX_SHOWN_FRAMES]:
        where = f"{f.file or '?'}:{f.line}" if f.line is not None else (f.file or "?")
        print_line(console, Text(f"    {f.function} ({where})"))
    if len(frames) > MAX_SHOWN_FRAMES:
        print_line(console, f"    … {len(frames) - MAX_SHOWN_FRAMES} more frames (--json)")


def _frames_table(title: str, rows: tuple[tuple[str, str, str, str, str], ...]) -> Table:
    """The frames as a table; only called when every cell fits (:func:`_fits`)."""
    table = Table(title=title, title_justify="left")
    for col in _FRAME_COLUMNS:
        table.add_column(col, no_wrap=True)
    for index, pc, label, source, trust in rows:
        table.add_row(index, pc, Text(label), Text(source),
                      Text(trust, style=_TRUST_STYLE[trust]))
    return table


def _frames_list(title: str, rows: tuple[tuple[str, str, str, str, str], ...],
                 console: Console) -> None:
    """The frames one per line, ``#N pc frame source [trust]``, for a console
    too narrow for the table: the line wraps at spaces, so a frame's
    ``symbol+0xoffset`` stays whole (unless longer than the console)."""
    print_line(console, Text(title, style="bold"))
    for index, pc, label, source, trust in rows:
        tail = Text(f"{source}  " if source else "")
        tail.append(f"[{trust}]", style=_TRUST_STYLE[trust])
        head = " ".join(part for part in (pc, label) if part)
        _print_entry(console, Text(f"  #{index:<2} {head}"), tail)


def _print_entry(console: Console, head: Text, tail: Text) -> None:
    """``head  tail`` on one line if it fits, else ``tail`` on the next line,
    indented under ``head`` (a wrap would start it at column 0)."""
    if cell_len(head.plain) + 2 + cell_len(tail.plain) <= console.width:
        print_line(console, Text.assemble(head, "  ", tail))
    else:
        print_line(console, head)
        print_line(console, Text.assemble("        ", tail))


def _render_registers(regs: Iterable[tuple[str, int]], console: Console) -> None:
    """Registers as ``name 0x%016x`` cells, as many per line as fit."""
    cells = [f"{name:>6} 0x{value:016x}" for name, value in regs]
    if not cells:
        console.print(Text("registers: none recorded", style="dim"))
        return
    per_line = max(1, (console.width + 2) // (len(cells[0]) + 2))
    console.print(Text("registers", style="bold"))
    for i in range(0, len(cells), per_line):
        console.print(Text("  ".join(cells[i : i + per_line])))
