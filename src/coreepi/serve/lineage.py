"""The group page's lineage line: "this group was split from …" / "merged
from …", from the store's regroup history (``coreepi reanalyze``)."""

from __future__ import annotations

from collections.abc import Container
from itertools import groupby
from typing import Any

from coreepi.serve.findings import group_id
from coreepi.store.regroup_sql import RegroupRow

__all__ = ["lineage_rows"]


def _link(signature: str | None, groups: Container[str]) -> dict[str, Any]:
    """A group named in the line, with its page when the findings have the
    group (an old group whose crashes all moved has none: ``href`` None)."""
    if signature is None:
        return {"key": "(no signature)", "href": None}
    gid = group_id("signature", signature)
    return {"key": signature, "href": f"/groups/{gid}" if gid in groups else None}


def lineage_rows(rows: list[RegroupRow], signature: str,
                 groups: Container[str]) -> list[dict[str, Any]]:
    """One entry per re-analysis run that changed the group ``signature``
    (``rows``: ``Store.group_lineage(signature)``): ``verb`` ("split from",
    "merged from", "renamed from" — how the group came to be — or "split
    into", where its crashes went), ``groups`` (key, and href when
    ``groups`` — the findings' group ids — holds it), ``crashes``
    (moved), ``when`` (ISO-8601 UTC), ``rules`` (rules version), ``run_id``."""
    out: list[dict[str, Any]] = []
    for run_id, run in groupby(rows, key=lambda r: r.run_id):
        run = list(run)
        came = [r for r in run if r.new_signature == signature]
        went = [r for r in run if r.old_signature == signature]
        for side, verb in ((came, _verb(came)), (went, "split into")):
            if not side:
                continue
            others = [r.old_signature if side is came else r.new_signature for r in side]
            out.append({"verb": verb, "groups": [_link(s, groups) for s in others],
                        "crashes": sum(r.crashes for r in side),
                        "when": side[0].recorded_at.isoformat(timespec="seconds"),
                        "rules": side[0].rules_version, "run_id": run_id})
    return out


def _verb(came: list[RegroupRow]) -> str:
    changes = {r.change for r in came}
    if any("merge" in c for c in changes):
        return "merged from"
    return "split from" if "split" in changes else "renamed from"
