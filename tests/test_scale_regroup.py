"""The stored regroup history (migration 5) on DuckDB and PostgreSQL: a
re-analysis run's pairs kept with when and which rules, the changed pairs of
a group read back; and the group page's "this group was split from …" /
"merged from …" line, with a link to the old group, in-process."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from test_report import EVIL, fill_store
from test_store_contract import store  # noqa: F401 (the DuckDB and PostgreSQL stores)
from uikit import ENV_GROUP

from coreepi.reanalysis.regroup import regroup_history
from coreepi.serve import ServeConfig, create_app, create_token
from coreepi.serve.findings import group_id
from coreepi.serve.lineage import lineage_rows
from coreepi.store import DuckDBStore, Store
from coreepi.store.migrations import latest_version

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def _history():  # noqa: ANN202
    return regroup_history([
        ("c1", "A", "A1"), ("c2", "A", "A2"), ("c3", "A", "A2"),   # A split in A1, A2
        ("c4", "B", "M"), ("c5", "C", "M"),                        # B and C merged in M
        ("c6", "D", "E"), ("c7", "F", "F"), ("c8", None, "G"),     # renames, unchanged
    ])


def test_history_rows_name_each_change() -> None:
    rows = {(r.old_signature, r.new_signature): (r.crashes, r.change)
            for r in _history().store_rows("run1", "1.0", "abc", AT)}
    assert rows == {("A", "A1"): (1, "split"), ("A", "A2"): (2, "split"),
                    ("B", "M"): (1, "merge"), ("C", "M"): (1, "merge"),
                    ("D", "E"): (1, "rename"), ("F", "F"): (1, "same"),
                    (None, "G"): (1, "rename")}


def test_lineage_lines_merge_and_split_into() -> None:
    rows = _history().store_rows("run1", "1.0", "abc", AT)
    groups = {group_id("signature", s) for s in ("B", "A1", "A2", "G")}  # C is gone
    merged = lineage_rows([r for r in rows if "M" in (r.old_signature, r.new_signature)], "M",
                          groups)
    assert [(e["verb"], [g["key"] for g in e["groups"]], e["crashes"]) for e in merged] == [
        ("merged from", ["B", "C"], 2)]
    assert [g["href"] for g in merged[0]["groups"]] == [f"/groups/{group_id('signature', 'B')}",
                                                       None]
    a = lineage_rows([r for r in rows if r.old_signature == "A"], "A", groups)
    assert [(e["verb"], [g["key"] for g in e["groups"]]) for e in a] == [
        ("split into", ["A1", "A2"])]
    g = lineage_rows([r for r in rows if r.new_signature == "G"], "G", groups)
    assert (g[0]["verb"], g[0]["groups"]) == ("renamed from",
                                              [{"key": "(no signature)", "href": None}])


def test_regroup_history_round_trips(store: Store) -> None:  # noqa: F811
    rows = _history().store_rows("run1", "1.0", "abc", AT)
    assert store.record_regroup(rows) == 7
    assert store.record_regroup(rows) == 7  # the same run again: replaced, not doubled
    assert store.schema_version() == latest_version() >= 5  # regroup_history is migration 5
    a2 = store.group_lineage("A2")
    assert [(r.run_id, r.old_signature, r.new_signature, r.crashes, r.change, r.rules_version,
             r.analyzer_version, r.recorded_at) for r in a2] == [
        ("run1", "A", "A2", 2, "split", "abc", "1.0", AT)]
    assert [(r.old_signature, r.new_signature) for r in store.group_lineage("A")] == [
        ("A", "A1"), ("A", "A2")]
    assert [r.old_signature for r in store.group_lineage("M")] == ["B", "C"]
    assert [r.old_signature for r in store.group_lineage("G")] == [None]  # no signature kept
    assert store.group_lineage("F") == []  # unchanged pairs are no lineage


def test_a_bad_change_is_refused_whole(store: Store) -> None:  # noqa: F811
    good, bad = _history().store_rows("run2", "1.0", "abc", AT)[:2]
    with pytest.raises(ValueError, match="'A' -> 'A2': change 'moved' is not one of"):
        store.record_regroup([good, type(bad)(*[getattr(bad, f) if f != "change" else "moved"
                                                for f in bad.__slots__])])
    assert store.group_lineage("A") == []


def test_group_page_says_split_from_with_a_link(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with DuckDBStore(data) as s:
        fill_store(s)
        token = create_token(s, ["read"], "t")[1]
        # last year's rules had the environment group inside a bigger one,
        # "old-io", now gone; a later run merged crashes of the EVIL group into it
        s.record_regroup(regroup_history([
            ("c1", "old-io", ENV_GROUP), ("c2", "old-io", ENV_GROUP), ("c3", "old-io", "other"),
        ]).store_rows("run7", "0.9", "r1", AT))
        s.record_regroup(regroup_history([
            ("c4", EVIL, ENV_GROUP), ("c5", "x", ENV_GROUP),
        ]).store_rows("run8", "1.0", "r2", AT + timedelta(days=1)))
    store_ = DuckDBStore(data)
    app = create_app(store_, ServeConfig(findings_debounce_seconds=0.05))
    try:
        client = TestClient(app)
        h = {"authorization": f"Bearer {token}"}
        gid = group_id("signature", ENV_GROUP)
        page = client.get(f"/groups/{gid}", headers=h)
        assert page.status_code == 200
        assert ('This group was split from <code>old-io</code> <span class="muted">(no longer '
                'a group)</span> <span class="muted">(2 crashes, re-analysis of 2026-11-30 '
                '12:00:00, rules r1)') in page.text
        evil = f"/groups/{group_id('signature', EVIL)}"
        assert (f'This group was merged from <a href="{evil}"><code>&lt;script&gt;alert(1)'
                '&lt;/script&gt;</code></a>, <code>x</code>') in page.text
        assert client.get(evil, headers=h).status_code == 200  # the link leads to a group
        lineage = client.get(f"/groups/{gid}.json", headers=h).json()["lineage"]
        assert lineage[0] == {"verb": "split from", "groups": [{"key": "old-io", "href": None}],
                              "crashes": 2, "when": "2026-11-30T12:00:00+00:00", "rules": "r1",
                              "run_id": "run7"}
        assert [(e["verb"], e["crashes"], e["rules"]) for e in lineage[1:]] == [
            ("merged from", 2, "r2")]
    finally:
        app.state.findings.close()
        store_.close()
