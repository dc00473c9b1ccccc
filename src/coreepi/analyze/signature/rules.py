"""Signature rules: small steps, each with ``predicate()`` (does it apply?) and
``action()`` (change the state), every change recorded in the trail as
``SignatureStep(rule, before, after)`` (Socorro's ``socorro/signature/rules.py``
and the trail of ``socorro/signature/generator.py``).

Order is fixed in :data:`coreepi.analyze.signature.generator.RULES`; the
constraints are written there.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from coreepi.analyze.signature.config import SigLists, SignatureConfig, UnusableStackRule
from coreepi.analyze.signature.normalize import frame_text, module_name
from coreepi.model.report import CrashReport, Frame, FrameTrust, RuntimeFrame, SignatureStep

__all__ = [
    "CollapseRecursion",
    "DropNonCodeFrames",
    "JoinFrames",
    "MarkTruncatedStack",
    "NormalizeFrames",
    "PreferTrustedFrames",
    "SigFrame",
    "SignatureRule",
    "SignatureState",
    "SkipFaultHandlerFrames",
    "SkipIrrelevantFrames",
    "SkipPrefixFrames",
    "TakeTopFrames",
    "TrimModules",
    "Truncate",
    "UnusableStackHead",
]

NULL_PAGE = 0x1000
EMPTY_NO_THREAD = "EMPTY: no crashing thread identified"
EMPTY_NO_FRAMES = "EMPTY: no frame data available"
#: the last part of a signature whose stack was cut by a truncated core
TRUNCATED_MARK = "(core truncated)"


@dataclass
class SigFrame:
    """A frame still in the running, with its current signature text.
    ``runtime``: the managed-runtime frame this one stands for (a Python
    function), whose ``frame`` is the native frame where the runtime's stack
    was entered."""

    frame: Frame
    text: str
    runtime: RuntimeFrame | None = None

    @property
    def index(self) -> int:
        """The frame's index in the crashing thread."""
        return self.frame.index


@dataclass
class SignatureState:
    """Everything the rules read and change while one signature is made."""

    report: CrashReport
    config: SignatureConfig
    lists: SigLists
    frames: list[SigFrame] = field(default_factory=list)
    head: str | None = None  # the phenotype of an unusable stack
    key: str = "frames"  # what follows the head: "frames" or "exe"
    limit: int = 5
    signature: str = ""
    used: list[int] = field(default_factory=list)
    trail: list[SignatureStep] = field(default_factory=list)

    def record(self, rule: str, before: str, after: str) -> None:
        """Add one step to the trail: ``rule`` changed ``before`` into ``after``."""
        self.trail.append(SignatureStep(rule=rule, before=before, after=after))

    def drop(self, rule: str, keep: list[SigFrame]) -> None:
        """Replace the frames by ``keep``, recording each one dropped."""
        kept = {id(f) for f in keep}
        for f in self.frames:
            if id(f) not in kept:
                self.record(rule, f"#{f.index} {f.text}", "")
        self.frames = keep


class SignatureRule(ABC):
    """One step of signature generation."""

    name: ClassVar[str]

    def predicate(self, state: SignatureState) -> bool:
        return True

    @abstractmethod
    def action(self, state: SignatureState) -> None: ...


class NormalizeFrames(SignatureRule):
    """Frames of the crashing thread, each normalized (see :mod:`.normalize`)."""

    name = "normalize"

    def predicate(self, state: SignatureState) -> bool:
        return state.report.crashed_thread is not None

    def action(self, state: SignatureState) -> None:
        thread = state.report.crashed_thread
        assert thread is not None
        for frame in thread.frames:
            text = frame_text(frame, strip_templates=state.config.strip_templates)
            raw = frame.function or (f"pc 0x{frame.pc:x}")
            if text != raw:
                state.record(self.name, f"#{frame.index} {raw}", text)
            state.frames.append(SigFrame(frame, text))


class DropNonCodeFrames(SignatureRule):
    """Frames whose pc is not code (0, a stack address, data): an unwinder's
    guess or the crash itself, never a place in the program."""

    name = "non-code-pc"

    def action(self, state: SignatureState) -> None:
        executable = [(m.start, m.end) for m in state.report.memory_map if "x" in m.perms]

        def is_code(pc: int) -> bool:
            if pc < NULL_PAGE:
                return False
            if not state.report.memory_map:
                return True  # no map (an uploaded report): trust the unwinder
            return any(lo <= pc < hi for lo, hi in executable)

        state.drop(self.name, [f for f in state.frames if is_code(f.frame.pc)])


class SkipFaultHandlerFrames(SignatureRule):
    """abort() called by a handler of a fault (a crash reporter's, HotSpot's
    JVM_handle_linux_signal -> VMError::report_and_die -> os::abort): the
    handler's frames are how the fault was reported, not where it was, so
    the signature starts at the interrupted frame, as the JVM's hs_err log
    does. Only for SIGABRT with the signal-handler-active phenotype naming
    an x86 trap that raises a fatal signal (``interrupted_trap``) and an
    ``interrupted_pc`` found among the frames; a handler that crashed on
    its own (SIGSEGV inside the handler) keeps its frames."""

    name = "fault-handler"

    def predicate(self, state: SignatureState) -> bool:
        sig = state.report.signal
        return sig is not None and sig.name == "SIGABRT" and self._interrupted(state) is not None

    def action(self, state: SignatureState) -> None:
        pc = self._interrupted(state)
        first = next(i for i, f in enumerate(state.frames) if f.frame.pc == pc)
        state.drop(self.name, state.frames[first:])

    @staticmethod
    def _interrupted(state: SignatureState) -> int | None:
        """The interrupted pc when it is a kept frame's pc past frame 0, else None."""
        handler = next(
            (p for p in state.report.phenotypes if p.name == "signal-handler-active"), None
        )
        if handler is None or not handler.evidence.get("interrupted_trap"):
            return None
        text = handler.evidence.get("interrupted_pc")
        pc = int(text, 16) if isinstance(text, str) else None
        found = any(f.frame.pc == pc and f.index > 0 for f in state.frames)
        return pc if found else None


class SkipPrefixFrames(SignatureRule):
    """Innermost frames on the prefix list (abort, raise, __assert_fail …)."""

    name = "prefix"

    def predicate(self, state: SignatureState) -> bool:
        return state.lists.prefix is not None

    def action(self, state: SignatureState) -> None:
        assert state.lists.prefix is not None
        i = 0
        while i < len(state.frames) and state.lists.prefix.fullmatch(state.frames[i].text):
            i += 1
        state.drop(self.name, state.frames[i:])


class SkipIrrelevantFrames(SignatureRule):
    """Frames on the irrelevant list, wherever they are."""

    name = "irrelevant"

    def predicate(self, state: SignatureState) -> bool:
        return state.lists.irrelevant is not None

    def action(self, state: SignatureState) -> None:
        pattern = state.lists.irrelevant
        assert pattern is not None
        state.drop(self.name, [f for f in state.frames if not pattern.fullmatch(f.text)])


class TrimModules(SignatureRule):
    """Unsymbolized frames of trimmed modules become the module name; a run
    of them counts once."""

    name = "trim-module"

    def predicate(self, state: SignatureState) -> bool:
        return state.lists.trim_modules is not None

    def action(self, state: SignatureState) -> None:
        pattern = state.lists.trim_modules
        assert pattern is not None
        keep: list[SigFrame] = []
        for f in state.frames:
            module = module_name(f.frame.module)
            if not f.frame.function and module and pattern.fullmatch(module):
                if f.text != module:
                    state.record(self.name, f"#{f.index} {f.text}", module)
                    f.text = module
                if keep and keep[-1].text == module and not keep[-1].frame.function:
                    continue
            keep.append(f)
        state.drop(self.name, keep)


class PreferTrustedFrames(SignatureRule):
    """Scanned frames only when no frame of better trust is left."""

    name = "prefer-trusted"

    def action(self, state: SignatureState) -> None:
        trusted = [f for f in state.frames if f.frame.trust != FrameTrust.SCAN]
        if trusted:
            state.drop(self.name, trusted)
        elif state.frames:
            state.record(self.name, "", "only scanned frames left: using them")


class UnusableStackHead(SignatureRule):
    """A phenotype that marks the stack unusable heads the signature."""

    name = "unusable-stack"

    def predicate(self, state: SignatureState) -> bool:
        return bool(state.report.phenotypes and state.lists.unusable_stack) and _stack_unusable(
            state.report
        )

    def action(self, state: SignatureState) -> None:
        fired = {p.name for p in state.report.phenotypes}
        rule: UnusableStackRule | None = next(
            (r for r in state.lists.unusable_stack if r.phenotype in fired), None
        )
        if rule is None:
            return
        state.head, state.key = rule.phenotype, rule.key
        if rule.frames is not None:
            state.limit = rule.frames
        state.record(self.name, "", rule.phenotype)


def _stack_unusable(report: CrashReport) -> bool:
    """The phenotype alone is not enough: the stack must also look broken
    (frame 0's pc is not code, or frames had to be recovered by scanning).
    A phenotype rule that misfires on a healthy, CFI-unwound stack then
    cannot move an ordinary crash into a disease's bucket."""
    thread = report.crashed_thread
    if thread is None or not thread.frames:
        return True
    if any(f.trust == FrameTrust.SCAN for f in thread.frames):
        return True
    pc = thread.frames[0].pc
    if pc < NULL_PAGE:
        return True
    maps = report.memory_map
    return bool(maps) and not any(m.start <= pc < m.end and "x" in m.perms for m in maps)


class CollapseRecursion(SignatureRule):
    """A run of the same frame counts once, so the recursion depth at the
    crash does not change the signature and the frames that started the
    recursion stay in it."""

    name = "recursion"

    def action(self, state: SignatureState) -> None:
        keep: list[SigFrame] = []
        for f in state.frames:
            if keep and keep[-1].text == f.text:
                continue
            keep.append(f)
        state.drop(self.name, keep)


class TakeTopFrames(SignatureRule):
    """The first N frames left (``top_n``, or the unusable-stack rule's count)."""

    name = "top-frames"

    def action(self, state: SignatureState) -> None:
        if state.key == "exe":
            exe = module_name(state.report.process.exe) or module_name(
                state.report.modules[0].path if state.report.modules else None
            )
            state.record(self.name, " | ".join(f.text for f in state.frames), exe or "")
            state.frames = []
            state.used = []
            state.signature = exe or ""
            return
        state.drop(self.name, state.frames[: state.limit])


class JoinFrames(SignatureRule):
    """Join with `` | `` (Socorro's delimiter), the phenotype first."""

    name = "join"

    def action(self, state: SignatureState) -> None:
        parts = [state.head] if state.head else []
        if state.key == "exe":
            parts += [state.signature] if state.signature else []
        else:
            parts += [f.text for f in state.frames]
            state.used = list(dict.fromkeys(f.index for f in state.frames))
        if not parts:
            no_thread = state.report.crashed_thread is None
            parts = [EMPTY_NO_THREAD if no_thread else EMPTY_NO_FRAMES]
        state.signature = " | ".join(parts)
        state.record(self.name, "", state.signature)


class MarkTruncatedStack(SignatureRule):
    """A truncated core whose stack pages are gone gives only the frames
    found in the registers (``walk`` of ``walk | handler | main``): the
    signature gets a last part, :data:`TRUNCATED_MARK`, so it can never be
    taken for a complete stack that ends there (a new ``walk`` group). Only
    when the frames ran out before the signature's frame count, and the
    outermost frame's stack pointer lies in a region the core should hold
    but does not (:attr:`~coreepi.model.report.Mapping.in_core` False in a
    truncated core); a complete core's signature never changes."""

    name = "truncated-core"

    def predicate(self, state: SignatureState) -> bool:
        thread = state.report.crashed_thread
        if not state.report.core.truncated or thread is None or state.key != "frames":
            return False
        if len(state.frames) >= state.limit:
            return False
        sp = next((f.sp for f in reversed(thread.frames) if f.sp is not None), None)
        if sp is None:
            return False
        region = next((m for m in state.report.memory_map if m.start <= sp < m.end), None)
        return region is not None and not region.in_core

    def action(self, state: SignatureState) -> None:
        before = state.signature
        state.signature = f"{before} | {TRUNCATED_MARK}"
        state.record(self.name, before, state.signature)


class Truncate(SignatureRule):
    """At most ``max_length`` characters (Socorro's SigTruncate)."""

    name = "truncate"

    def predicate(self, state: SignatureState) -> bool:
        return len(state.signature) > state.config.max_length

    def action(self, state: SignatureState) -> None:
        before = state.signature
        state.signature = before[: state.config.max_length - 3] + "..."
        state.record(self.name, before, state.signature)
