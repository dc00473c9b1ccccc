"""Signatures: the normalized, human-readable key of a crash's stack
(Socorro's sense), with the trail of every rule that shaped it. One
generator for every artifact kind, one rule list per kind
(:data:`RULESETS`: native, jvm, kernel).

``run_signature`` is the analysis pipeline's step; :func:`generate_signature`
and :class:`SignatureGenerator` make one on demand (e.g. with another
:class:`SignatureConfig`). See ``docs/signatures.md``.
"""

from __future__ import annotations

from coreepi.analyze.context import AnalysisContext
from coreepi.analyze.signature.config import SignatureConfig, env_list_dirs, load_lists
from coreepi.analyze.signature.generator import (
    RULES,
    RULESETS,
    SignatureGenerator,
    SignatureResult,
    generate_signature,
)
from coreepi.analyze.signature.normalize import frame_text, normalize_function

__all__ = [
    "RULES",
    "RULESETS",
    "SignatureConfig",
    "SignatureGenerator",
    "SignatureResult",
    "frame_text",
    "generate_signature",
    "load_lists",
    "normalize_function",
    "run_signature",
]


def run_signature(ctx: AnalysisContext) -> None:
    """Pipeline step: set ``report.signature`` with the default configuration
    (None when there is nothing to sign); the operator's lists in
    ``$COREEPI_SIGLISTS`` extend the built-in ones."""
    ctx.report.signature = generate_signature(ctx.report,
                                              SignatureConfig(list_dirs=env_list_dirs()))
