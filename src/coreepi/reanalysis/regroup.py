"""Regroup history: what a rule change did to the groups.

A group is named by its signature; when signature rules change, re-analysis
gives crashes new signatures. So that a group keeps its identity, every
re-analysis records, per (old signature, new signature), how many crashes
went from one to the other (:class:`RegroupHistory`); from that mapping:

- **split**: an old group whose crashes now fall in two or more groups;
- **merge**: a new group that gathers crashes of two or more old groups;
- **rename**: an old group that went whole into one new group of another name;
- **moved**: crashes whose signature changed.

Pure functions of (crash_id, old, new) triples; a missing signature (None)
is a group of its own ("no signature"). :meth:`RegroupHistory.store_rows`
gives the rows the store keeps (``regroup_history``, shown on the group page).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime

from coreepi.store.regroup_sql import RegroupRow

__all__ = ["Change", "RegroupHistory", "regroup_history"]


@dataclass(frozen=True)
class Change:
    """One old group -> the new groups its crashes went to (crashes each), or
    one new group <- the old groups it gathered."""

    group: str | None
    others: dict[str | None, int]


@dataclass
class RegroupHistory:
    """What one re-analysis did to the groups (see the module docstring)."""

    mapping: dict[tuple[str | None, str | None], int] = field(default_factory=dict)
    """(old signature, new signature) -> crashes; unchanged pairs included."""
    crashes: int = 0
    moved: int = 0
    splits: list[Change] = field(default_factory=list)
    merges: list[Change] = field(default_factory=list)
    renames: list[tuple[str | None, str | None]] = field(default_factory=list)

    def lines(self) -> list[str]:
        """The summary ``reanalyze`` prints: one line per split, merge and rename."""
        out = [f"{self.crashes} crashes re-analysed, {self.moved} moved to another group; "
               f"{len(self.splits)} groups split, {len(self.merges)} merged, "
               f"{len(self.renames)} renamed"]
        out += [f"split: {c.group!r} -> " + ", ".join(f"{k!r} ({n})" for k, n in c.others.items())
                for c in self.splits]
        out += [f"merge: " + ", ".join(f"{k!r} ({n})" for k, n in c.others.items())
                + f" -> {c.group!r}" for c in self.merges]
        out += [f"rename: {old!r} -> {new!r}" for old, new in self.renames]
        return out

    def change(self, old: str | None, new: str | None) -> str:
        """What the pair ``old -> new`` was: ``same``, ``split`` (old went
        to 2+ groups), ``merge`` (new gathered 2+ groups), ``split+merge``
        or ``rename`` (one whole group under another name)."""
        if old == new:
            return "same"
        split = sum(1 for o, _ in self.mapping if o == old) > 1
        merge = sum(1 for _, n in self.mapping if n == new) > 1
        return "split+merge" if split and merge else "split" if split else \
            "merge" if merge else "rename"

    def store_rows(self, run_id: str, analyzer_version: str, rules_version: str,
                   at: datetime) -> list[RegroupRow]:
        """The mapping as the store's rows (one per pair, unchanged pairs
        included), ordered as :meth:`as_rows`."""
        return [RegroupRow(run_id, old, new, n, self.change(old, new), analyzer_version,
                           rules_version, at) for (old, new), n in self._pairs()]

    def _pairs(self) -> list[tuple[tuple[str | None, str | None], int]]:
        return sorted(self.mapping.items(), key=lambda kv: (str(kv[0][0]), str(kv[0][1])))

    def as_rows(self) -> list[dict[str, object]]:
        """The mapping as rows (old_signature, new_signature, crashes), for a file or a table."""
        return [{"old_signature": o, "new_signature": n, "crashes": c}
                for (o, n), c in self._pairs()]


def _ordered(counter: Counter[str | None]) -> dict[str | None, int]:
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], str(kv[0]))))


def regroup_history(triples: Iterable[tuple[str, str | None, str | None]]) -> RegroupHistory:
    """The history of ``(crash_id, old signature, new signature)`` triples
    (a crash_id seen twice counts once: its last triple wins)."""
    last: dict[str, tuple[str | None, str | None]] = {}
    for crash_id, old, new in triples:
        last[crash_id] = (old, new)
    mapping = Counter(last.values())
    to_new: dict[str | None, Counter[str | None]] = defaultdict(Counter)
    from_old: dict[str | None, Counter[str | None]] = defaultdict(Counter)
    for (old, new), n in mapping.items():
        to_new[old][new] += n
        from_old[new][old] += n
    h = RegroupHistory(mapping=dict(mapping), crashes=len(last),
                       moved=sum(n for (o, w), n in mapping.items() if o != w))
    for old in sorted(to_new, key=str):
        if len(to_new[old]) > 1:
            h.splits.append(Change(old, _ordered(to_new[old])))
        else:
            (new,) = to_new[old]
            if new != old and len(from_old[new]) == 1:
                h.renames.append((old, new))
    for new in sorted(from_old, key=str):
        if len(from_old[new]) > 1:
            h.merges.append(Change(new, _ordered(from_old[new])))
    return h
