"""The web UI in-process (FastAPI TestClient over a real DuckDB store): every
page in HTML and as ``.json``, filters as permalinks, the read API for the
findings, groups, hosts and the core download, cookie login, HTML escaping,
offline ``/docs``, and the findings refreshed after ingest."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
from html import unescape
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import zstandard
from fastapi.testclient import TestClient
from fleetfactory import CoreSet, coreset  # noqa: F401
from test_report import EVIL
from uikit import BAD_HOST, ENV_GROUP, UiStore, make_ui_store

from coreepi.serve import ServeConfig, create_app, create_token
from coreepi.serve.findings import group_id
from coreepi.store import DuckDBStore


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory, coreset: CoreSet) -> UiStore:  # noqa: F811
    return make_ui_store(tmp_path_factory.mktemp("ui") / "data", coreset.cores[0], coreset.binary)


class App:
    def __init__(self, ui: UiStore) -> None:
        self.store = DuckDBStore(ui.data_dir)
        self.app = create_app(self.store, ServeConfig(findings_debounce_seconds=0.05))
        self.client = TestClient(self.app)
        self.h = {"authorization": f"Bearer {ui.read_token}"}

    def get(self, url: str, **kw: object):  # noqa: ANN201
        return self.client.get(url, headers=self.h, **kw)  # type: ignore[arg-type]

    def close(self) -> None:
        self.app.state.findings.close()
        self.store.close()


@pytest.fixture(scope="module")
def app(ui: UiStore) -> Iterator[App]:
    a = App(ui)
    yield a
    a.close()


ENV_ID = group_id("signature", ENV_GROUP)


def test_overview_names_the_bad_host_and_the_environment_group(app: App) -> None:
    data = app.get("/index.json").json()
    assert [h["host_id"] for h in data["hardware_hosts"]] == [BAD_HOST]
    bad = data["hardware_hosts"][0]
    assert bad["recommendation"].startswith(("drain", "replace"))
    assert bad["sir_lower"] > 1
    env = {g["key"]: g for g in data["environment_groups"]}
    assert set(env) == {ENV_GROUP}
    assert env[ENV_GROUP]["trigger"]["label"] == "kernel=6.1.0"
    assert env[ENV_GROUP]["href"] == f"/groups/{ENV_ID}"
    assert data["window"]["crashes"] == 304 + 1
    assert sum(p["crashes"] for p in data["fleet_curve"]) == 305
    page = app.get("/").text
    assert f'href="/hosts/{BAD_HOST}"' in page and f'href="/groups/{ENV_ID}"' in page
    # the verdict is text (and an icon), not only a colour
    assert "▲</span> hardware-suspect" in page and "◆</span> environment-triggered" in page
    assert page.index(BAD_HOST) < page.index("Top software groups")


def test_groups_filters_are_permalinks(app: App) -> None:
    everything = app.get("/groups.json").json()
    assert everything["rows"] and all(r["kind"] == "signature" for r in everything["rows"])
    rates = [r["rate"] for r in everything["rows"]]
    assert rates == sorted(rates, reverse=True)
    sw = app.get("/groups.json", params={"verdict": "software"}).json()
    assert sw["rows"] and {r["verdict"] for r in sw["rows"]} == {"software"}
    assert dict(everything["facets"]["verdict"])["software"] == sw["total"]
    # phenotypes are filters: return-to-null belongs to the unwinder bug only
    rtn = app.get("/groups.json", params={"phenotype": "return-to-null"}).json()
    assert [r["key"] for r in rtn["rows"]] == ["_Unwind_RaiseException | __cxa_throw"]
    kernel = app.get("/groups.json", params={"attr": "kernel=6.1.0", "sort": "crashes",
                                             "desc": "0"}).json()
    assert ENV_GROUP in [r["key"] for r in kernel["rows"]]
    counts = [r["crashes"] for r in kernel["rows"]]
    assert counts == sorted(counts)
    late = app.get("/groups.json", params={"since": "2024-02-25"}).json()
    assert all(r["last_seen"] >= "2024-02-25" for r in late["rows"])
    assert late["total"] < everything["total"]
    html = app.get("/groups", params={"verdict": "software"}).text
    assert "phenotype=return-to-null" in html and 'aria-sort="descending"' in html
    assert app.get("/groups", params={"sort": "nope"}).status_code == 400


def test_group_page(app: App, ui: UiStore) -> None:
    data = app.get(f"/groups/{ENV_ID}.json").json()
    assert data["key"] == ENV_GROUP and data["verdict"] == "environment-triggered"
    assert data["representative"]["crash_id"] == ui.core_crash_id
    assert data["crash_list"][0]["href"] == f"/crashes/{ui.core_crash_id}"
    assert sum(p["crashes"] for p in data["curve"]) == data["crashes"]
    kernel = next(a for a in data["associations"] if a["label"] == "kernel=6.1.0")
    assert kernel["irr"] is None and kernel["irr_upper"] is None  # no crash on 5.15: unbounded
    assert kernel["irr_status"] == "unbounded"
    assert data["phenotypes"]["null-deref"] >= data["crashes"] - 1  # all but the real core's
    html = app.get(f"/groups/{ENV_ID}").text
    assert "∞" in html and "unbounded" in html  # the forest plot says so in text
    assert "<svg" in html and f"/hosts/{ui.core_host}" in html
    assert app.get("/groups/0000000000000000").status_code == 404
    assert app.get("/groups/0000000000000000.json").json()["reason"] == "not-found"


def test_every_printed_q_names_its_fdr_family(app: App) -> None:
    # the overview's trigger cell and the group page's q column printed "q < 1e-20" bare;
    # signature and phenotype groups are separate FDR families, so a q names its own
    pages = {"/": "signature", f"/groups/{ENV_ID}": "signature",
             f"/groups/{group_id('phenotype', 'null-deref')}": "phenotype"}
    for url, family in pages.items():
        html = unescape(re.sub(r"<[^>]+>", "", app.get(url).text))  # the words, no tags
        found = re.findall(r"\bq (?:<|=) [0-9.e+-]+(.{0,30})", html)
        assert found, url  # each page prints at least one q
        for after in found:
            assert after.startswith(f" ({family}-group family)"), (url, after)


def test_group_crash_list_pages(app: App) -> None:
    gid = group_id("signature", "_Unwind_RaiseException | __cxa_throw")
    first = app.get(f"/groups/{gid}.json").json()
    assert len(first["crash_list"]) == 50 and first["next_cursor"]
    second = app.get(f"/groups/{gid}.json", params={"cursor": first["next_cursor"]}).json()
    ids = [c["crash_id"] for c in first["crash_list"] + second["crash_list"]]
    assert len(ids) == len(set(ids)) == min(100, first["crashes"])
    assert first["crash_list"][0]["host_href"].startswith("/hosts/h-")


def test_host_page(app: App) -> None:
    data = app.get(f"/hosts/{BAD_HOST}.json").json()
    assert data["verdict"] == "hardware-suspect" and data["recommendation"]
    assert len(data["crashes"]) == data["finding"]["crashes"] >= 20  # 20 planted + its share
    assert any(t["hardware"] for t in data["telemetry"])
    assert data["facts"]["kernel"] in ("5.15.0", "6.1.0")
    html = app.get(f"/hosts/{BAD_HOST}").text
    assert "Recommendation:" in html and "telemetry" in html
    assert html.count('href="/crashes/') >= 20
    assert app.get("/hosts/no-such-host").status_code == 404


def test_a_drained_host_page_says_drained_not_drain(app: App) -> None:
    # #22: the page said "Recommendation: replace: drain now" above "Drained since …"
    from datetime import UTC, datetime

    from coreepi.store.alert_records import DrainRecord

    app.store.drain_host(DrainRecord(BAD_HOST, datetime(2026, 12, 1, 22, 28, tzinfo=UTC),
                                     "ui:adm", "test drain"))
    try:
        # one sentence, one owner (views.recommendation): the host page had its own
        # wording ("... and see the re-check below ...") beside the overview's
        drained = ("already drained (since 2026-12-01 22:28 UTC, by ui:adm): run the vendor's "
                   "diagnostics; undrain it once repaired")
        data = app.get(f"/hosts/{BAD_HOST}.json").json()
        assert data["recommendation"] == drained
        html = unescape(app.get(f"/hosts/{BAD_HOST}").text)
        assert f"<strong>Recommendation:</strong> {drained}</p>" in html
        assert "drain now" not in html
        # the overview and the hosts list say so too (the overview still said "drain now")
        for page, key in (("/index.json", "hardware_hosts"), ("/hosts.json", "rows")):
            (row,) = [r for r in app.get(page).json()[key] if r["host_id"] == BAD_HOST]
            assert row["recommendation"] == drained, page
        assert "drain now" not in unescape(app.get("/").text)
    finally:
        app.store.undrain_host(BAD_HOST, datetime.now(UTC), "test")
    back = app.get(f"/hosts/{BAD_HOST}.json").json()["recommendation"]
    assert back.startswith(("replace: drain now", "drain: take it out of service"))


def test_crash_page_and_core_download(app: App, ui: UiStore) -> None:
    data = app.get(f"/crashes/{ui.core_crash_id}.json").json()
    assert data["crash"]["crash_id"] == ui.core_crash_id
    assert data["crash"]["signal"]["name"] == "SIGSEGV"
    assert data["group_href"] == f"/groups/{ENV_ID}"
    assert data["artifact"]["kind"] == "core" and data["frame_trust"] is None
    assert data["artifact"]["gdb_command"].startswith(f"zstd -dc {ui.core_crash_id}.core.zst")
    html = app.get(f"/crashes/{ui.core_crash_id}").text
    crashed = data["crash"]["threads"][data["crashed_thread"]]
    assert crashed["frames"] and crashed["frames"][0]["trust"] in html
    assert "Download the core" in html and "<details" in html and "rip" in html
    r = app.get(data["artifact"]["url"])
    assert r.status_code == 200 and r.headers["content-type"] == "application/zstd"
    assert r.headers["content-disposition"] == f'attachment; filename="{ui.core_crash_id}.core.zst"'
    assert r.headers["x-gdb-command"] == data["artifact"]["gdb_command"]
    assert app.get(f"/api/v1/crashes/{ui.core_crash_id}/core").content == r.content  # first name
    raw = zstandard.ZstdDecompressor().stream_reader(r.content).read()
    assert hashlib.sha256(raw).digest() == hashlib.sha256(ui.core_path.read_bytes()).digest()
    # a crash without a stored core: no download, a 404 from the API
    other = app.get(f"/groups/{ENV_ID}.json").json()["crash_list"][1]["crash_id"]
    assert app.get(f"/crashes/{other}.json").json()["artifact"] is None
    assert app.get(f"/api/v1/crashes/{'0' * 32}/core").status_code == 404


def test_search(app: App, ui: UiStore) -> None:
    data = app.get("/search.json", params={"q": "io_uring"}).json()
    assert [g["key"] for g in data["groups"]] == [ENV_GROUP]
    data = app.get("/search.json", params={"host": "h-01"}).json()
    assert BAD_HOST in [h["host_id"] for h in data["hosts"]]
    data = app.get("/search.json", params={"q": ui.core_crash_id}).json()
    assert data["crash"] == f"/crashes/{ui.core_crash_id}"
    # the 12 digits `coreepi list` shows find the crash too, in search and in the URL
    short = ui.core_crash_id[:12].upper()
    assert app.get("/search.json", params={"q": short}).json()["crash"] == \
        f"/crashes/{ui.core_crash_id}"
    r = app.get(f"/crashes/{short}", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == f"/crashes/{ui.core_crash_id}"
    r = app.get(f"/crashes/{short}.json")
    assert r.status_code == 200 and r.json()["crash"]["crash_id"] == ui.core_crash_id
    assert app.get("/search.json", params={"q": "ffffffffffff"}).json()["crash"] is None
    assert app.get("/search.json").json()["asked"] is False


def test_escaping(app: App) -> None:
    html = app.get("/groups").text
    assert EVIL not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    gid = group_id("signature", EVIL)
    assert EVIL not in app.get(f"/groups/{gid}").text


def test_read_api(app: App) -> None:
    r = app.get("/api/v1/findings")
    assert r.status_code == 200 and r.headers["x-findings-stale"] == "false"
    findings = r.json()
    assert findings["hosts"][0]["host_id"] == BAD_HOST
    groups = app.get("/api/v1/groups").json()["groups"]
    env = next(g for g in groups if g["key"] == ENV_GROUP)
    one = app.get(f"/api/v1/groups/{env['id']}").json()
    assert one["attribution"]["verdict"] == "environment-triggered"
    host = app.get(f"/api/v1/hosts/{BAD_HOST}").json()
    assert host["finding"]["attribution"]["verdict"] == "hardware-suspect"
    listed = app.get("/api/v1/hosts").json()["hosts"]
    assert len(listed) == 200 and any(h["verdict"] == "hardware-suspect" for h in listed)
    assert app.get("/api/v1/groups/nope").status_code == 404


def test_auth(app: App, ui: UiStore) -> None:
    c = app.client
    r = c.get("/groups?verdict=software", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == (
        "/login?next=" + quote("/groups?verdict=software", safe=""))
    assert c.get("/groups.json").status_code == 401
    assert c.get("/api/v1/findings").status_code == 401
    bad = c.post("/login", data={"token": "cep_nope", "next": "/"})
    assert bad.status_code == 401 and "unknown or revoked" in bad.text
    evil_next = c.post("/login", data={"token": ui.read_token, "next": "//evil.example/"},
                       follow_redirects=False)
    assert evil_next.headers["location"] == "/"
    cookie = evil_next.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    with TestClient(app.app) as person:
        r = person.post("/login", data={"token": ui.read_token, "next": "/hosts"})
        assert r.status_code == 200 and r.url.path == "/hosts"
        assert person.get("/api/v1/groups").status_code == 200  # the cookie reads the API
        assert person.post("/api/v1/tokens", json={"scopes": ["read"]}).status_code == 401
        page = person.get("/logout")  # typed or bookmarked: a page with the button
        assert page.status_code == 200 and 'action="/logout"' in page.text
        assert person.get("/groups.json").status_code == 200  # a GET logs nobody out
        person.post("/logout")
        assert person.get("/groups.json").status_code == 401
    code = app.app.state.auth.login_code()
    with TestClient(app.app) as person:
        r = person.get(f"/login?code={code}", follow_redirects=False)
        assert r.status_code == 303
        assert person.get("/index.json").status_code == 200
        session = person.cookies["coreepi_session"]
        person.post("/logout")
    with TestClient(app.app) as thief:  # a copy of the cookie dies with the logout
        thief.cookies.set("coreepi_session", session)
        assert thief.get("/index.json").status_code == 401
    with TestClient(app.app) as again:  # one time only
        assert again.get(f"/login?code={code}").status_code == 401


def test_docs_work_offline(app: App) -> None:
    html = app.client.get("/docs").text
    urls = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert urls and all(u.startswith("/") for u in urls), urls
    for u in urls:
        assert app.client.get(u).status_code == 200, u
    assert "swagger-ui" in html


def test_findings_refresh_after_ingest(tmp_path: Path) -> None:
    store = DuckDBStore(tmp_path / "data")
    try:
        ingest = create_token(store, ["ingest", "read"], "both")[1]
        app = create_app(store, ServeConfig(findings_debounce_seconds=0.05))
        c = TestClient(app)
        h = {"authorization": f"Bearer {ingest}"}
        hb = {"host_id": "n1", "start": "2024-03-01T00:00:00Z", "end": "2024-03-02T00:00:00Z"}
        assert c.post("/api/v1/heartbeats", json=hb, headers=h).status_code == 201

        def crash(n: int, signature: str) -> None:
            body = {"crash_id": f"{n:032x}", "host_id": "n1", "source": "elf-core",
                    "captured_at": f"2024-03-01T0{n}:00:00Z", "signature": {"signature": signature},
                    "analysis": {"analyzer_version": "t"}}
            assert c.post("/api/v1/crashes", json=body, headers=h).status_code == 201

        crash(1, "Foo::bar")
        first = c.get("/api/v1/findings", params={"fresh": "true"}, headers=h).json()
        assert first["window"]["crashes"] == 1
        crash(2, "Baz::qux")
        after = c.get("/api/v1/findings", params={"fresh": "true"}, headers=h).json()
        assert after["window"]["crashes"] == 2
        assert sorted(g["key"] for g in after["groups"] if g["kind"] == "signature") == [
            "Baz::qux", "Foo::bar"]
        page = c.get("/groups.json", headers=h).json()
        assert page["total"] == 2 and page["findings"]["stale"] is False
        assert app.state.findings.refreshes >= 2
        app.state.findings.close()
    finally:
        store.close()


def test_forest_plot_draws_unbounded_and_undefined_honestly() -> None:
    from coreepi.serve.charts import forest

    svg = forest([
        {"label": "kernel=6.1", "irr": None, "irr_lower": 45.9, "irr_upper": None,
         "irr_status": "unbounded"},
        {"label": "zone=z9", "irr": None, "irr_lower": None, "irr_upper": None,
         "irr_status": "undefined"},
        {"label": "cpu=x", "irr": 1.5, "irr_lower": 0.9, "irr_upper": 2.4,
         "irr_status": "finite"},
    ])
    assert svg.count("<rect") == 1  # a square only where there is a finite ratio
    assert "∞ unbounded" in svg and "undefined (0/0)" in svg
    assert svg.count("<path") == 1  # one arrow: the unbounded interval runs off the axis


@pytest.mark.parametrize(("params", "message"), [
    ({"attr": "kernel"}, "attr: give name=value (e.g. kernel=6.1.0), not 'kernel'"),
    ({"attr": "=6.1.0"}, "attr: give name=value (e.g. kernel=6.1.0), not '=6.1.0'"),
    ({"since": "2024-03-01", "until": "2024-02-01"},
     "since 2024-03-01 is after until 2024-02-01 (both days included): no day lies "
     "between them"),
    ({"phenotype": "return-to-nul"}, "phenotype: unknown 'return-to-nul' (one of "),
])
def test_search_refuses_a_query_that_can_match_nothing(app: App, params: dict[str, str],
                                                       message: str) -> None:
    """Before: each of these was a 200 with an empty result, which reads as
    "no such crashes" rather than "your query is wrong"."""
    for url in ("/search.json", "/groups.json"):
        r = app.get(url, params=params)
        assert r.status_code == 400, (url, r.text)
        assert r.json()["detail"].startswith(message), r.json()
    page = app.get("/search", params=params)
    assert page.status_code == 400 and "text/html" in page.headers["content-type"]
    assert message in unescape(page.text)
    # a known phenotype (built in, or carried by a crash) and a proper value pass
    assert "return-to-null" in app.get("/search.json", params={"phenotype": "x"}).json()["detail"]
    ok = app.get("/search.json", params={"attr": "kernel=6.1.0", "since": "2024-02-01",
                                         "until": "2024-03-01", "phenotype": "return-to-null"})
    assert ok.status_code == 200 and ok.json()["asked"] is True


def test_api_crash_list_refuses_an_inverted_range(app: App) -> None:
    r = app.get("/api/v1/crashes", params={"since": "2024-03-01T00:00:00Z",
                                           "until": "2024-02-01T00:00:00Z"})
    assert r.status_code == 400
    assert r.json()["detail"] == ("since 2024-03-01T00:00:00Z is not before until "
                                  "2024-02-01T00:00:00Z: an empty range")


def test_a_short_crash_id_says_why_it_names_no_crash(tmp_path: Path) -> None:
    """Before: ``/crashes/fac`` (too short) and an ambiguous prefix were a bare
    404 "not found"."""
    from datetime import UTC, datetime

    from test_hardening_limits import report

    from coreepi.store import CoreStatus, CrashRecord

    ids = [f"fac0{n}" + "0" * 27 for n in range(3)] + ["fac1" + "0" * 28]
    store = DuckDBStore(tmp_path / "data")
    store.add_crashes([CrashRecord(report(i, datetime(2024, 5, 1, tzinfo=UTC)), {},
                                   CoreStatus.NOT_STORED, None, None) for i in ids])
    _, token = create_token(store, ["read"], "t")
    app = create_app(store, ServeConfig(analysis_jobs=0))
    try:
        with TestClient(app, headers={"authorization": f"Bearer {token}"}) as client:
            short = client.get("/crashes/fac.json")
            short_page = client.get("/crashes/fac")
            ambiguous = client.get("/crashes/FAC0.json")
            unknown = client.get("/crashes/fac2.json")
            one = client.get("/crashes/fac1", follow_redirects=False)
    finally:
        store.close()
    assert short.status_code == 400 and short_page.status_code == 400
    assert short.json()["detail"] == ("crash id 'fac' is too short: give at least 4 of its hex "
                                      "digits (`coreepi list` shows 12)")
    assert "too short: give at least 4" in short_page.text
    assert ambiguous.status_code == 400
    assert ambiguous.json()["detail"] == (
        "crash id 'FAC0' is ambiguous: 3 crashes start with it (fac000000000…, fac010000000…, "
        "fac020000000…); give more digits")
    assert unknown.status_code == 404
    assert unknown.json()["detail"] == "no crash id starts with 'fac2'"
    assert one.status_code == 303 and one.headers["location"] == f"/crashes/{ids[3]}"


def _listed(copy: Path, *args: str) -> list[dict[str, object]]:
    """`coreepi list --json ARGS` on ``copy``, a copy of the UI store (the
    app holds the store's DuckDB file; the CLI's own code, in-process)."""
    from typer.testing import CliRunner

    from coreepi.cli.main import app as cli
    done = CliRunner().invoke(cli, ["list", "--json", "--data-dir", str(copy), *args])
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_search_counts_the_crashes_in_range_and_on_matching_hosts(app: App, ui: UiStore,
                                                                   tmp_path: Path) -> None:
    # breaker5 #16: /search picked the groups by day or host but showed only the window's numbers
    copy = tmp_path / "data"
    shutil.copytree(ui.data_dir, copy)
    day = app.get(f"/groups/{ENV_ID}.json").json()["last_seen"][:10]
    data = app.get("/search.json", params={"since": day, "until": day}).json()
    env = next(g for g in data["groups"] if g["key"] == ENV_GROUP)
    listed = _listed(copy, "--since", day, "--until", f"{day}T23:59:59Z", "--signature", ENV_GROUP)
    assert env["in_range"] == len(listed) and 0 < env["in_range"] < env["crashes"]
    html = app.get("/search", params={"since": day, "until": day}).text
    assert '<th scope="col" class="n">in range</th>' in html
    assert f'<td class="n">{env["crashes"]}</td><td class="n">{env["in_range"]}</td>' in html

    data = app.get("/search.json", params={"host": BAD_HOST}).json()
    on_bad = _listed(copy, "--host", BAD_HOST)
    assert data["groups_total"] == len({c["signature"] for c in on_bad})
    for g in data["groups"]:
        assert g["on_hosts"] == sum(c["signature"] == g["key"] for c in on_bad) > 0
    assert sum(g["on_hosts"] for g in data["groups"]) == len(on_bad)
    html = app.get("/search", params={"host": BAD_HOST}).text
    assert "on matching hosts" in html
    # the same filter on /groups, kept by its form
    rows = app.get("/groups.json", params={"host": BAD_HOST}).json()["rows"]
    assert {r["key"]: r["on_hosts"] for r in rows} == {g["key"]: g["on_hosts"]
                                                      for g in data["groups"]}
