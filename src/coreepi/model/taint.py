"""The kernel's taint letters: the vocabulary of ``KernelReportInfo.taint``.

Shared by the kernel-log parser (which reads the letters off a report's
``Tainted:`` line and module list) and the taint phenotypes in ``analyze``
(which name what a letter means); both may import ``model``, neither the
other.

Source: the kernel's ``taint_flags[]`` table (``kernel/panic.c``) and
Documentation/admin-guide/tainted-kernels.rst.
"""

from __future__ import annotations

from typing import Final

__all__ = ["OUT_OF_TREE_TAINTS", "TAINT_FLAGS"]

# Taint letter -> meaning (kernel/panic.c taint_flags[]).
TAINT_FLAGS: Final = {
    "P": "proprietary module loaded", "F": "module force-loaded", "S": "SMP on unsafe CPU",
    "R": "module force-unloaded", "M": "machine check exception", "B": "bad page referenced",
    "U": "user request", "D": "kernel died recently (oops)", "A": "ACPI table overridden",
    "W": "warning issued", "C": "staging driver loaded", "I": "firmware bug workaround",
    "O": "out-of-tree module loaded", "E": "unsigned module loaded", "L": "soft lockup occurred",
    "K": "kernel live-patched", "X": "auxiliary taint", "T": "built with struct randomization",
    "N": "test module loaded", "J": "fwctl used",
}
# The letters of a module that is not the kernel's own (proprietary, out of tree, unsigned).
OUT_OF_TREE_TAINTS: Final = frozenset("POE")
