"""Small pure summaries of the store's frames for the read endpoints."""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from coreepi.store import Store

__all__ = ["group_counts", "host_rows"]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if value is pd.NaT:
        return None
    if isinstance(value, pd.Timestamp):
        return value.isoformat()
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return value


def group_counts(crashes: pd.DataFrame) -> dict[str, Any]:
    """``total``, ``hosts``; ``signatures`` and ``phenotypes``: one row per
    group with ``crashes`` and distinct ``hosts``, largest first. A crash
    without a signature counts under ``null``."""
    if crashes.empty:
        return {"total": 0, "hosts": 0, "signatures": [], "phenotypes": []}
    sig = (crashes.assign(signature=crashes["signature"].astype(object))
           .groupby("signature", dropna=False)
           .agg(crashes=("crash_id", "size"), hosts=("host_id", "nunique"))
           .reset_index().sort_values(["crashes", "signature"], ascending=[False, True]))
    exploded = crashes[["crash_id", "host_id", "phenotypes"]].explode("phenotypes").dropna(
        subset=["phenotypes"])
    hardware = {p for lst in crashes["hardware_phenotypes"] for p in lst}
    phen = (exploded.groupby("phenotypes")
            .agg(crashes=("crash_id", "nunique"), hosts=("host_id", "nunique"))
            .reset_index().rename(columns={"phenotypes": "phenotype"})
            .sort_values(["crashes", "phenotype"], ascending=[False, True]))
    return {
        "total": len(crashes),
        "hosts": int(crashes["host_id"].nunique()),
        "signatures": [{k: _clean(v) for k, v in r.items()} for r in sig.to_dict("records")],
        "phenotypes": [{**{k: _clean(v) for k, v in r.items()},
                        "hardware_indicative": r["phenotype"] in hardware}
                       for r in phen.to_dict("records")],
    }


def host_rows(store: Store) -> list[dict[str, Any]]:
    """Every host that has attributes, exposure or crashes: ``host_id``,
    ``attributes``, ``exposure_seconds``, ``last_seen`` (end of its latest
    interval), ``crashes``."""
    hosts = store.hosts_frame()
    exposure = store.exposure_frame()
    crashes = store.crash_frame()
    out: dict[str, dict[str, Any]] = {}
    for rec in hosts.to_dict("records"):
        hid = rec.pop("host_id")
        out[hid] = {"host_id": hid,
                    "attributes": {k: _clean(v) for k, v in rec.items() if _clean(v) is not None},
                    "exposure_seconds": 0.0, "last_seen": None, "crashes": 0}

    def row(hid: str) -> dict[str, Any]:
        return out.setdefault(hid, {"host_id": hid, "attributes": {}, "exposure_seconds": 0.0,
                                    "last_seen": None, "crashes": 0})

    if not exposure.empty:
        agg = exposure.groupby("host_id").agg(seconds=("seconds", "sum"), last=("end", "max"))
        for hid, r in agg.iterrows():
            row(str(hid)).update(exposure_seconds=float(r["seconds"]), last_seen=_clean(r["last"]))
    if not crashes.empty:
        for hid, n in crashes.groupby("host_id").size().items():
            row(str(hid))["crashes"] = int(n)
    return [out[k] for k in sorted(out)]
