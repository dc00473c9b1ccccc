"""Make a crash report's signature, for every artifact kind: one pipeline of
small rules, one rule list per kind (:data:`RULESETS`).

* native (cores): the frames, normalized and filtered, joined by `` | ``;
  headed by a phenotype when the stack is unusable (:data:`RULES`);
* jvm (hs_err logs): the problematic frame and the next significant ones,
  HotSpot-normalized, headed by ``OOM | …`` / ``Internal Error (…)``
  (:data:`coreepi.analyze.signature.jvm.JVM_RULES`);
* kernel (oops reports): the report's syzbot-style title
  (:data:`coreepi.analyze.signature.kernel.KERNEL_RULES`).

Like Socorro's ``SignatureGenerator`` (``socorro/signature/generator.py``),
whose one pipeline serves C++, Rust and Java frames: an ordered list of
small rules, each recording what it changed, and one failing rule never
costs the crash its signature (the failure is reported and the other rules
still run).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from coreepi.analyze.context import Kind, kind_of
from coreepi.analyze.signature.config import SignatureConfig, load_lists
from coreepi.analyze.signature.cpu_variant import CpuVariants
from coreepi.analyze.signature.jvm import JVM_RULES
from coreepi.analyze.signature.kernel import KERNEL_RULES
from coreepi.analyze.signature.python import PythonFrames
from coreepi.analyze.signature.rules import (
    CollapseRecursion,
    DropNonCodeFrames,
    JoinFrames,
    MarkTruncatedStack,
    NormalizeFrames,
    PreferTrustedFrames,
    SignatureRule,
    SignatureState,
    SkipFaultHandlerFrames,
    SkipIrrelevantFrames,
    SkipPrefixFrames,
    TakeTopFrames,
    TrimModules,
    Truncate,
    UnusableStackHead,
)
from coreepi.model.report import CrashReport, Signature

__all__ = ["RULES", "RULESETS", "SignatureGenerator", "SignatureResult", "generate_signature"]

# Order matters:
# - NormalizeFrames first: every later rule matches the normalized text.
# - CpuVariants right after it: the lists and every later rule see `memset`,
#   whichever CPU-specific memset the crashing host's libc picked.
# - DropNonCodeFrames before the lists: a pc of 0 must not reach them.
# - SkipFaultHandlerFrames before the lists: it cuts by the interrupted
#   frame's pc, which __restore_rt (irrelevant) must not hide.
# - SkipIrrelevantFrames before SkipPrefixFrames: an irrelevant frame inside
#   the innermost run (the personality routine between std::terminate and a
#   noexcept function) must not end the prefix run early.
# - TrimModules after both lists, so a list can still name a trimmed module's
#   symbolized frames.
# - PreferTrustedFrames after filtering: "nothing better exists" is judged on
#   the frames that would be used, not on a trusted abort() we drop anyway.
# - PythonFrames after every rule that reads a frame's native facts (pc,
#   module, trust): the Python frames it adds have none of their own.
# - CollapseRecursion after every rule that drops frames (a dropped frame
#   between two equal ones must not keep them apart).
# - UnusableStackHead before TakeTopFrames: it may set the frame count.
# - JoinFrames, then MarkTruncatedStack (it marks the joined text), then
#   Truncate, last (Socorro: SigFixWhitespace, SigTruncate).
RULES: tuple[type[SignatureRule], ...] = (
    NormalizeFrames,
    CpuVariants,
    DropNonCodeFrames,
    SkipFaultHandlerFrames,
    SkipIrrelevantFrames,
    SkipPrefixFrames,
    TrimModules,
    PreferTrustedFrames,
    PythonFrames,
    CollapseRecursion,
    UnusableStackHead,
    TakeTopFrames,
    JoinFrames,
    MarkTruncatedStack,
    Truncate,
)

#: The rule list of each artifact kind (see :func:`coreepi.analyze.context.kind_of`).
RULESETS: dict[Kind, tuple[type[SignatureRule], ...]] = {
    "native": RULES,
    "jvm": JVM_RULES,
    "kernel": KERNEL_RULES,
}


@dataclass
class SignatureResult:
    """The signature (None when the rules found nothing to sign: an hs_err
    fragment without frames, a kernel report without a title) and the rules
    that failed on this report (``rule: error``)."""

    signature: Signature | None
    errors: list[str] = field(default_factory=list)


class SignatureGenerator:
    """Runs the rule list of each report's kind (:data:`RULESETS`), or
    ``rules`` for every kind, with one configuration. Raises ValueError
    for a malformed frame list."""

    def __init__(
        self,
        config: SignatureConfig | None = None,
        rules: tuple[type[SignatureRule], ...] | None = None,
    ) -> None:
        self.config = config or SignatureConfig()
        self.lists = load_lists(self.config.list_dirs, self.config.builtin_lists)
        self.rulesets = {
            kind: [rule() for rule in (RULESETS[kind] if rules is None else rules)]
            for kind in RULESETS
        }

    def generate(self, report: CrashReport) -> SignatureResult:
        """The signature of ``report`` by its kind's rules; ``report`` is not changed."""
        state = SignatureState(report, self.config, self.lists, limit=self.config.top_n)
        errors = []
        for rule in self.rulesets[kind_of(report)]:
            try:
                if rule.predicate(state):
                    rule.action(state)
            except Exception as exc:  # noqa: BLE001 - a rule's bug must not cost the crash its signature
                errors.append(f"{rule.name}: {type(exc).__name__}: {exc}")
                state.record(rule.name, "", f"rule failed: {type(exc).__name__}")
        if not state.signature:
            return SignatureResult(None, errors)
        signature = Signature(signature=state.signature, frames_used=state.used, trail=state.trail)
        return SignatureResult(signature, errors)


def generate_signature(
    report: CrashReport, config: SignatureConfig | None = None
) -> Signature | None:
    """The signature of ``report`` (not stored in it), None when there is
    nothing to sign; rule failures are appended to
    ``report.analysis.warnings``."""
    result = SignatureGenerator(config).generate(report)
    report.analysis.warnings.extend(f"signature rule {e}" for e in result.errors)
    return result.signature
