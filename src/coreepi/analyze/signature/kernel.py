"""The kernel rule list of the signature generator: a kernel report's
signature is its title in syzbot's style (``KASAN: use-after-free Read in
ip6_send_skb``), so buckets match syzbot's.

The title itself is read by the kernel-log parser
(:mod:`coreepi.parse.kernel.title`, after syzkaller's ``pkg/report``) and
travels as ``report.artifact.title`` with how it was read
(``artifact.kernel.title_rule``); this rule makes it the signature, with
the trail of how it was obtained and the guilty frame as the frame used.
"""

from __future__ import annotations

from typing import Final

from coreepi.analyze.signature.rules import SignatureRule, SignatureState

__all__ = ["KERNEL_RULES", "KernelTitle"]

NORMALIZE_TITLE: Final = "normalize-title (ADDR/NUM/LINE, 120 bytes)"


class KernelTitle(SignatureRule):
    """The report's title; for a report the parser could not read, its
    header line (no trail)."""

    name = "kernel-title"

    def predicate(self, state: SignatureState) -> bool:
        artifact = state.report.artifact
        return artifact is not None and bool(artifact.title)

    def action(self, state: SignatureState) -> None:
        artifact = state.report.artifact
        assert artifact is not None and artifact.title
        info = artifact.kernel
        state.signature = artifact.title
        if info is None:
            return
        state.record(info.title_rule, info.first_line, info.raw_title)
        if info.raw_title != artifact.title:
            state.record(NORMALIZE_TITLE, info.raw_title, artifact.title)
        thread = state.report.crashed_thread
        guilty = info.guilty_frame
        if thread is not None and guilty:
            state.used = [f.index for f in thread.frames if f.function == guilty][:1]


KERNEL_RULES: Final[tuple[type[SignatureRule], ...]] = (KernelTitle,)
