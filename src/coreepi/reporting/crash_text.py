"""Human-readable rendering of a CrashReport for the terminal (Rich)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from coreepi.model.report import CrashReport, Frame, FrameTrust

__all__ = ["render_report", "frame_label"]

_TRUST_STYLE = {
    FrameTrust.CONTEXT: "bold green",
    FrameTrust.CFI: "green",
    FrameTrust.FRAME_POINTER: "yellow",
    FrameTrust.SCAN: "red",
}
MAX_SHOWN_FRAMES = 40
MAX_SHOWN_MODULES = 15


def frame_label(frame: Frame) -> str:
    """``function+0xoff`` when symbolized, else ``module+0xoffset``, else the pc."""
    if frame.function:
        off = f"+0x{frame.function_offset:x}" if frame.function_offset else ""
        return f"{frame.function}{off}"
    if frame.module and frame.module_offset is not None:
        return f"{frame.module.rsplit('/', 1)[-1]}+0x{frame.module_offset:x}"
    return "?" if frame.pc is None else f"0x{frame.pc:x}"


def render_report(report: CrashReport, console: Console) -> None:
    """Print the signal, the crashing thread's backtrace (with frame trust),
    the top modules, and any warnings."""
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
    console.print(head)
    if proc.exe or report.arch:
        console.print(f"exe: {proc.exe or '?'}   arch: {report.arch or '?'}   "
                      f"threads: {len(report.threads)}", markup=False)
    if proc.cmdline:
        console.print(f"cmdline: {' '.join(proc.cmdline)}", markup=False)

    if report.signature is not None:
        console.print(f"signature: {report.signature.signature}", style="bold", markup=False)
    for p in report.phenotypes:
        tag = " [hardware-indicative]" if p.hardware_indicative else ""
        evidence = ", ".join(
            f"{k}={_short(v)}" for k, v in p.evidence.items() if v not in (None, "", [], {}, False)
        )
        console.print(f"phenotype {p.name}{tag}: {evidence}", markup=False)

    crashed = report.crashed_thread
    if crashed is not None:
        table = Table(title=f"crashing thread {crashed.tid or ''}", title_justify="left")
        for col in ("#", "pc", "frame", "source", "trust"):
            # A long frame folds rather than ending in "…" (which would hide
            # the +0xoffset); the source column gives way first.
            table.add_column(
                col,
                no_wrap=col not in ("frame", "source"),
                overflow="fold" if col == "frame" else "ellipsis",
                ratio=3 if col == "frame" else (1 if col == "source" else None),
            )
        for f in crashed.frames[:MAX_SHOWN_FRAMES]:
            source = f"{f.file.rsplit('/', 1)[-1]}:{f.line}" if f.file and f.line else ""
            label = frame_label(f) + (" [inlined]" if f.inlined else "")
            table.add_row(
                str(f.index),
                "" if f.pc is None else f"0x{f.pc:x}",
                Text(label),  # Text: names and paths come from the core, never markup
                Text(source),
                Text(f.trust.value, style=_TRUST_STYLE[f.trust]),
            )
        console.print(table)
        if len(crashed.frames) > MAX_SHOWN_FRAMES:
            console.print(f"… {len(crashed.frames) - MAX_SHOWN_FRAMES} more frames (--json)")
        if crashed.unwind_error and crashed.unwind_error != "not unwound":
            console.print(f"unwinding: {crashed.unwind_error}", style="dim", markup=False)

    if report.modules:
        mods = Table(title="modules", title_justify="left")
        for col in ("base", "end", "build-id", "path"):
            mods.add_column(col)
        for m in report.modules[:MAX_SHOWN_MODULES]:
            mods.add_row(f"0x{m.base:x}", f"0x{m.end:x}", Text(m.build_id or "-"), Text(m.path))
        console.print(mods)
        if len(report.modules) > MAX_SHOWN_MODULES:
            console.print(f"… {len(report.modules) - MAX_SHOWN_MODULES} more modules (--json)")
    for w in report.analysis.warnings:
        console.print(f"warning: {w}", style="yellow", markup=False)


def _short(value: object, limit: int = 80) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
