"""Small digests of the analysis tables that findings cite: per group, per host.

Each function is one group-by over a table (no pandas operation per group or
per host) returning plain dicts keyed by ``gid`` or ``host_id``.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import numpy as np
import pandas as pd

from coreepi.epi.lists import explode_lists
from coreepi.epi.models import DayCount, NamedCount, TelemetryLead

__all__ = [
    "epidemic_curves",
    "group_hw_counts",
    "named_counts",
    "records_by_gid",
    "rows_by_gid",
    "telemetry_details",
    "telemetry_examples",
    "telemetry_leads",
    "top_signatures",
]


def records_by_gid(frame: pd.DataFrame) -> dict[int, list[dict[str, Any]]]:
    """{gid: [row dicts in frame order]} of a frame with a ``gid`` column."""
    out: dict[int, list[dict[str, Any]]] = {}
    for rec in frame.to_dict("records"):
        out.setdefault(int(rec["gid"]), []).append(rec)
    return out


def rows_by_gid(members: pd.DataFrame) -> dict[int, np.ndarray]:
    """{gid: crash row indexes} from the (``gid``, ``row``) members table."""
    order = np.argsort(members["gid"].to_numpy(), kind="stable")
    gids = members["gid"].to_numpy()[order]
    rows = members["row"].to_numpy()[order]
    uniq, starts = np.unique(gids, return_index=True)
    bounds = [*starts[1:], len(gids)] if len(gids) else []  # no members: no groups
    return {int(g): rows[s:e] for g, s, e in zip(uniq, starts, bounds, strict=True)}


def epidemic_curves(members: pd.DataFrame, crashes: pd.DataFrame) -> dict[int, list[DayCount]]:
    """{gid: crashes per UTC day, days in order, days without a crash left out}."""
    out: dict[int, list[DayCount]] = {}
    if not len(members):
        return out
    at = crashes["captured_at"].dt.tz_convert("UTC").dt.tz_localize(None).to_numpy()
    day = at.astype("datetime64[D]").astype(np.int64)[members["row"].to_numpy()]
    counts = (
        pd.DataFrame({"gid": members["gid"].to_numpy(), "day": day})
        .groupby(["gid", "day"], sort=True)
        .size()
    )
    epoch = date(1970, 1, 1)
    for (gid, d), n in zip(counts.index, counts.to_numpy(), strict=True):
        out.setdefault(int(gid), []).append(
            DayCount(day=epoch + timedelta(days=int(d)), crashes=int(n))
        )
    return out


def group_hw_counts(members: pd.DataFrame, crashes: pd.DataFrame) -> pd.DataFrame:
    """``gid``, ``phenotype``, ``crashes``: each group's hardware phenotype counts."""
    hw = crashes["hardware_phenotypes"].iloc[members["row"].to_numpy()]
    pos, items = explode_lists(hw)
    frame = pd.DataFrame({"gid": members["gid"].to_numpy()[pos],
                          "phenotype": pd.Series(items, dtype=object)})
    return frame.groupby(["gid", "phenotype"], sort=False).size().rename("crashes").reset_index()


def named_counts(
    frame: pd.DataFrame, key: str = "host_id"
) -> dict[Any, tuple[tuple[str, int], ...]]:
    """{key: ((name, count), ...) largest first} from a (key, phenotype, crashes) frame."""
    out: dict[Any, tuple[tuple[str, int], ...]] = {}
    if not len(frame):
        return out
    frame = frame.sort_values([key, "crashes", "phenotype"], ascending=[True, False, True])
    for k, sub in frame.groupby(key, sort=False):
        out[k] = tuple(
            (str(p), int(n)) for p, n in zip(sub["phenotype"], sub["crashes"], strict=True)
        )
    return out


def telemetry_details(
    events: pd.DataFrame | None, hosts: set[str]
) -> dict[str, tuple[tuple[tuple[str, int], ...], str | None]]:
    """{host: (((kind, events), ...), latest hardware event summary)} for ``hosts``."""
    out: dict[str, tuple[tuple[tuple[str, int], ...], str | None]] = {}
    if events is None or not len(events) or not hosts:
        return out
    sub = events.loc[events["host_id"].isin(list(hosts))]
    for h, frame in sub.groupby("host_id", sort=False):
        kinds = frame["kind"].astype(str).value_counts()
        hw = frame.loc[frame["hardware_indicative"].astype(bool)].sort_values("ts")
        example = str(hw["summary"].iloc[-1]) if len(hw) else None
        out[str(h)] = (tuple((str(k), int(n)) for k, n in kinds.items()), example)
    return out


def telemetry_leads(events: pd.DataFrame | None) -> dict[str, TelemetryLead]:
    """{host: its commonest (kind, component) among the hardware events that precede its
    crashes, with the event count}; ties: kind, then component, in name order."""
    if events is None or not len(events):
        return {}
    hw = events.loc[events["hardware_indicative"].astype(bool)]
    component = hw["component"] if "component" in hw.columns else pd.Series("", index=hw.index)
    counts = (
        hw.assign(_c=component.astype(object).fillna(""), _k=hw["kind"].astype(str))
        .groupby(["host_id", "_k", "_c"], sort=False).size().rename("n").reset_index()
        .sort_values(["host_id", "n", "_k", "_c"], ascending=[True, False, True, True])
        .drop_duplicates("host_id")
    )
    return {
        str(host): TelemetryLead(event_kind=str(kind), component=str(c) or None, events=int(n))
        for host, kind, c, n in counts[["host_id", "_k", "_c", "n"]].itertuples(index=False)
    }


def telemetry_examples(events: pd.DataFrame | None, hosts: list[str]) -> dict[Any, list[str]]:
    """{host_id: up to 3 event summaries, latest first} for ``hosts``."""
    if events is None or not len(events):
        return {}
    sub = events.loc[events["host_id"].isin(hosts)]
    return {
        h: [str(s) for s in frame.sort_values("ts", ascending=False)["summary"].head(3)]
        for h, frame in sub.groupby("host_id", sort=False, dropna=True)
    }


def top_signatures(crashes: pd.DataFrame, host_ids: list[str]) -> dict[str, list[NamedCount]]:
    """{host: its up to 5 commonest signatures}; ties in signature order."""
    sub = crashes.loc[
        crashes["host_id"].isin(host_ids) & crashes["signature"].notna(), ["host_id", "signature"]
    ]
    counts = sub.groupby(["host_id", "signature"], sort=False).size().rename("n").reset_index()
    counts = counts.sort_values(["host_id", "n", "signature"], ascending=[True, False, True])
    out: dict[str, list[NamedCount]] = {}
    for h, frame in counts.groupby("host_id", sort=False):
        out[str(h)] = [
            NamedCount(name=str(s), crashes=int(n))
            for s, n in zip(frame["signature"].head(5), frame["n"].head(5), strict=True)
        ]
    return out
