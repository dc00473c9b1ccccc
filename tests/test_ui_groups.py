"""The groups pages of a store with more signatures than the findings analyse
(``max_groups`` = 200): every signature has a page, /groups pages through the
groups and counts the signatures, search finds the unanalysed ones; the
date filter (both days included, the range's crashes counted beside the
window's); plurals and no forest plot for groups too small to compare; and
the same parameter validation on /groups, /hosts, /search and a group page."""

from __future__ import annotations

from html import unescape
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from coreepi.model.fleet import ExposureInterval, HostRow
from coreepi.model.report import AnalysisInfo, CrashReport, Signature, Source
from coreepi.serve import ServeConfig, create_app, create_token
from coreepi.serve.findings import group_id
from coreepi.store import CrashRecord, DuckDBStore

T0 = datetime(2024, 3, 1, tzinfo=UTC)
HOSTS = [f"n-{i}" for i in range(4)]
TOP = 200  # signatures of 2 crashes: the 200 largest, analysed as groups
TAIL = 12  # signatures of 1 crash: outside the 200 largest


def top_sig(i: int) -> str:
    return f"Top::crash_{i:03d}"


def tail_sig(i: int) -> str:
    return f"memory leak in tail_{i:02d}"


def fill(store: DuckDBStore) -> None:
    """4 hosts observed 30 days; top signature i crashes on day i % 10 and day
    i % 10 + 10 (two hosts); tail signature i once, on day 20."""
    store.add_hosts(HostRow(h, {"kernel": "6.1" if n % 2 else "5.15"}, n + 2)
                    for n, h in enumerate(HOSTS))
    store.add_exposure(ExposureInterval(h, T0, T0 + timedelta(days=30), {}, n + 2)
                       for n, h in enumerate(HOSTS))

    def crash(cid: str, host: str, day: int, sig: str) -> CrashRecord:
        return CrashRecord(CrashReport(
            crash_id=cid, host_id=host, captured_at=T0 + timedelta(days=day, hours=5),
            source=Source.ELF_CORE, signature=Signature(signature=sig),
            analysis=AnalysisInfo(analyzer_version="test")), {})

    records = []
    for i in range(TOP):
        records.append(crash(f"t{i:03d}a", HOSTS[i % 4], i % 10, top_sig(i)))
        records.append(crash(f"t{i:03d}b", HOSTS[(i + 1) % 4], i % 10 + 10, top_sig(i)))
    records += [crash(f"x{i:02d}", HOSTS[i % 4], 20, tail_sig(i)) for i in range(TAIL)]
    store.add_crashes(records)


class App:
    def __init__(self, data: Path) -> None:
        self.store = DuckDBStore(data)
        fill(self.store)
        token = create_token(self.store, ["read"], "t")[1]
        self.app = create_app(self.store, ServeConfig(findings_debounce_seconds=0.05))
        self.client = TestClient(self.app)
        self.h = {"authorization": f"Bearer {token}"}

    def get(self, url: str, **kw: object):  # noqa: ANN201
        return self.client.get(url, headers=self.h, **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[App]:
    a = App(tmp_path_factory.mktemp("groups") / "data")
    yield a
    a.app.state.findings.close()
    a.store.close()


def test_an_unanalysed_signature_has_a_plain_page(app: App) -> None:
    gid = group_id("signature", tail_sig(3))
    data = app.get(f"/groups/{gid}.json").json()
    assert data["key"] == tail_sig(3) and data["crashes"] == 1 and data["hosts"] == 1
    assert data["why"] == ("not analysed as a group: the findings analyse the 200 largest of "
                           "212 signatures; this one has 1 crash in the window")
    assert [c["crash_id"] for c in data["crash_list"]] == ["x03"]
    html = app.get(f"/groups/{gid}").text
    assert "1 crash on 1 host" in html and "not analysed as a group" in html
    # the crash's link to its group leads to this page
    assert app.get("/crashes/x03.json").json()["group_href"] == f"/groups/{gid}"
    assert app.get("/groups/00000000deadbeef").status_code == 404
    assert app.get("/groups/00000000deadbeef.json").status_code == 404


def test_the_api_knows_every_signature(app: App) -> None:
    """/api/v1/groups/{id}: the analysed groups' findings, and a plain record
    (saying it is not analysed) for every other signature of the window."""
    gid = group_id("signature", tail_sig(3))
    got = app.get(f"/api/v1/groups/{gid}")
    assert got.status_code == 200, got.text
    assert got.json() == {
        "id": gid, "kind": "signature", "key": tail_sig(3), "crashes": 1, "hosts": 1,
        "analysed": False, "first_seen": "2024-03-21T05:00:00+00:00",
        "last_seen": "2024-03-21T05:00:00+00:00", "phenotypes": {},
        "why": ("not analysed as a group: the findings analyse the 200 largest of 212 "
                "signatures; this one has 1 crash in the window")}
    top = app.get(f"/api/v1/groups/{group_id('signature', top_sig(7))}").json()
    assert top["analysed"] is True and top["key"] == top_sig(7) and top["crashes"] == 2
    assert "attribution" in top
    assert app.get("/api/v1/groups/00000000deadbeef").status_code == 404


def test_groups_pages_and_counts_signatures(app: App) -> None:
    first = app.get("/groups.json").json()
    assert (first["total"], first["pages"], len(first["rows"])) == (200, 2, 100)
    assert (first["signatures"], first["analysed"]) == (212, 200)
    assert first["prev"] is None and first["next"]["page"] == "2"
    second = app.get("/groups.json", params=first["next"]).json()
    assert len(second["rows"]) == 100 and second["next"] is None
    assert second["prev"] is not None and "page" not in second["prev"]
    seen = {r["key"] for r in first["rows"]} | {r["key"] for r in second["rows"]}
    assert seen == {top_sig(i) for i in range(TOP)}
    assert app.get("/groups.json?page=3").status_code == 404
    html = app.get("/groups").text
    assert "212 signatures in the window, 200 analysed as groups" in html
    overview = app.get("/index.json").json()
    assert (overview["signatures"], overview["analysed"]) == (212, 200)
    assert "212 signatures, 200 analysed as groups" in app.get("/").text
    assert 'rel="next" href="?' in html and "page=2" in html


def test_search_finds_unanalysed_signatures(app: App) -> None:
    data = app.get("/search.json", params={"q": "memory leak in tail_0"}).json()
    assert data["groups_total"] == 0
    assert data["unanalysed_total"] == 10
    assert {r["key"] for r in data["unanalysed"]} == {tail_sig(i) for i in range(10)}
    assert all(r["href"] == f"/groups/{group_id('signature', r['key'])}"
               for r in data["unanalysed"])
    grp = app.get("/groups.json", params={"q": "tail_11"}).json()
    assert grp["total"] == 0 and [r["key"] for r in grp["unanalysed"]] == [tail_sig(11)]
    html = app.get("/search", params={"q": "tail_11"}).text
    assert f'href="/groups/{group_id("signature", tail_sig(11))}"' in html


def test_same_day_range_includes_that_day_and_counts_it(app: App) -> None:
    data = app.get("/groups.json", params={"since": "2024-03-01", "until": "2024-03-01"}).json()
    assert data["total"] == 20  # i % 10 == 0
    assert all(r["in_range"] == 1 and r["crashes"] == 2 for r in data["rows"])
    until = app.get("/groups.json", params={"until": "2024-03-02"}).json()
    assert until["total"] == 40
    html = app.get("/groups", params={"since": "2024-03-01", "until": "2024-03-01"}).text
    assert "both days included" in html and "in range" in html


def test_small_group_page_has_no_forest_and_right_plurals(app: App) -> None:
    data = app.get(f"/groups/{group_id('signature', top_sig(7))}.json").json()
    assert data["crashes"] == 2 and data["too_few"] == 5
    html = app.get(f"/groups/{group_id('signature', top_sig(7))}").text
    assert "Too few crashes to compare attribute values (2 crashes; at least 5 needed)" in html
    assert "<svg" not in html.split('id="attributes"')[1].split("</section>")[0]
    assert "2 crashes on 2 hosts" in html
    assert "crash(es)" not in html and "host(s)" not in html


@pytest.mark.parametrize("url, names", [
    ("/hosts?sort=bogus", "'sort'"),
    ("/hosts.json?verdict=x", "verdict"),
    ("/search?attr=nokey", "attr"),
    ("/search?attr==x", "attr"),
    ("/search.json?sort=bogus", "sort"),
    ("/groups?bogus=1", "'bogus'"),
    ("/groups.json?page=0", "page"),
    ("/groups.json?desc=maybe", "desc"),
    (f"/groups/{group_id('signature', top_sig(1))}.json?page=2", "'page'"),
])
def test_bad_parameters_are_400_everywhere(app: App, url: str, names: str) -> None:
    r = app.get(url)
    assert r.status_code == 400, url
    text = unescape(r.text)
    assert names in text and "Traceback" not in text


def test_hosts_filter_by_verdict(app: App) -> None:
    every = app.get("/hosts.json").json()["rows"]
    undetermined = app.get("/hosts.json", params={"verdict": "undetermined"}).json()["rows"]
    assert [h["host_id"] for h in undetermined] == [
        h["host_id"] for h in every if h["verdict"] == "undetermined"]
    assert app.get("/hosts.json", params={"verdict": "hardware-suspect"}).json()["rows"] == []


def test_evidence_counts_are_in_number() -> None:
    from coreepi.epi.models import Evidence
    from coreepi.reporting.phrases import evidence_text

    one = Evidence(kind="sample-size", supports="undetermined", strength=1.0, observed=1,
                   hosts=1, minimum=5)
    assert evidence_text(one) == "only 1 crash on 1 host; at least 5 are needed"
    spread = Evidence(kind="fleet-spread", supports="software", strength=1.0, total=1, hosts=1,
                      observed=1, share=1.0, expected=0.5, host_ids=["h-1"])
    assert evidence_text(spread).startswith("1 crash on 1 host; the top host h-1 has 1 (100%)")
