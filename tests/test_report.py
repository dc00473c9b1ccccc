"""`coreepi report`: a store filled through the Store API from the synthetic fleet of
test_epi_fleets (known answers), rendered in every format; the store's summed
(node-time) path agrees with the interval path; HTML is self-contained and
escapes what crash data puts in it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from test_epi_fleets import T0, make_fleet
from typer.testing import CliRunner

from coreepi.cli.main import app
from coreepi.epi import FleetFindings, analyze_fleet
from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.model.fleet import ExposureInterval, HostRow
from coreepi.model.report import AnalysisInfo, CrashReport, Phenotype, Signature, Source
from coreepi.reporting import build_findings, render, text_report
from coreepi.store import CrashRecord, DuckDBStore, open_store

EVIL = "<script>alert(1)</script>"
HW = {"stack-misaligned"}


def split_intervals(exposure: pd.DataFrame) -> pd.DataFrame:
    """Every interval of every other host cut in two unequal pieces, same attributes: the
    same node-time, but intervals of many lengths (as a real fleet's heartbeats give)."""
    hosts = sorted(exposure["host_id"].unique())
    cut = exposure["host_id"].isin(hosts[::2])
    rows = exposure.loc[cut]
    mid = rows["start"] + (rows["end"] - rows["start"]) * 0.37
    return pd.concat([exposure.loc[~cut], rows.assign(end=mid), rows.assign(start=mid)],
                     ignore_index=True)


def fill_store(store: DuckDBStore, *, split: bool = False) -> pd.DataFrame:
    """The synthetic fleet (plus a group whose signature is an XSS attempt) via the Store API;
    ``split``: its intervals cut by :func:`split_intervals`."""
    crashes, exposure, telemetry = make_fleet()
    if split:
        exposure = split_intervals(exposure)
    evil = pd.DataFrame({
        "crash_id": [f"evil{i}" for i in range(40)],
        "host_id": [f"h-{i * 5:03d}" for i in range(40)],
        "captured_at": [T0 + pd.Timedelta(days=i, hours=5) for i in range(40)],
        "signature": EVIL, "phenotypes": [["null-deref"]] * 40,
        "hardware_phenotypes": [[]] * 40, "app_version": "2.3.1",
    })
    crashes = pd.concat([crashes, evil], ignore_index=True)
    static = ["cpu_model", "kernel", "zone"]
    hosts = exposure.drop_duplicates("host_id")
    store.add_hosts(HostRow(r["host_id"], {a: r[a] for a in static}, i + 2)
                    for i, r in enumerate(hosts.to_dict("records")))
    store.add_exposure(
        ExposureInterval(r["host_id"], r["start"].to_pydatetime(), r["end"].to_pydatetime(),
                         {"load1": float(r["load1"])}, i + 2)  # type: ignore[dict-item]
        for i, r in enumerate(exposure.to_dict("records"))
    )
    records = []
    for r in crashes.to_dict("records"):
        report = CrashReport(
            crash_id=r["crash_id"], host_id=r["host_id"], captured_at=r["captured_at"],
            source=Source.ELF_CORE,
            phenotypes=[Phenotype(name=p, hardware_indicative=p in HW) for p in r["phenotypes"]],
            signature=Signature(signature=r["signature"]),
            analysis=AnalysisInfo(analyzer_version="test"),
        )
        records.append(CrashRecord(report, {"app_version": r["app_version"]}))
    store.add_crashes(records)
    store.add_events(
        TelemetryEvent(event_id=f"t{i}", host_id=r["host_id"], ts=r["ts"],
                       kind=EventKind(r["kind"]), summary=r["summary"],
                       hardware_indicative=r["hardware_indicative"])
        for i, r in enumerate(telemetry.to_dict("records"))
    )
    return crashes


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("report") / "data"
    with open_store(d) as store:
        fill_store(store)
    return d


@pytest.fixture(scope="module")
def findings(data_dir: Path) -> FleetFindings:
    with open_store(data_dir, read_only=True) as store:
        return build_findings(store)


def test_known_verdicts(findings: FleetFindings) -> None:
    h = findings.hosts[0]
    assert (h.host_id, h.attribution.verdict) == ("h-017", "hardware-suspect")
    groups = {(g.kind, g.key): g for g in findings.groups}
    assert groups["signature", "io_uring_submit | Ring::flush"].attribution.verdict == (
        "environment-triggered")
    assert groups["signature", "_Unwind_RaiseException | __cxa_throw"].attribution.verdict == (
        "software")
    assert groups["signature", "__memmove_avx_unaligned_erms"].attribution.verdict == (
        "hardware-suspect")
    assert findings.window.node_days == pytest.approx(200 * 60)


def test_summed_path_agrees_with_the_interval_path(data_dir: Path,
                                                   findings: FleetFindings) -> None:
    with open_store(data_dir, read_only=True) as store:
        assert store.node_time_frames() is not None
        w = findings.window
        slow = analyze_fleet(store.crash_frame(), store.exposure_frame(), store.telemetry_frame(),
                             since=w.since, until=w.until)
    fast = json.loads(findings.model_dump_json())
    ref = json.loads(slow.model_dump_json())
    for key in ("window", "attributes", "groups", "hosts"):
        assert fast[key] == ref[key], key


def test_both_paths_test_the_same_attributes_on_intervals_of_many_lengths(
    tmp_path: Path,
) -> None:
    """The store's exposure frame carries ``seconds`` (each interval's length): a measure,
    not an attribute. Once tested as one on the interval path only (its lengths vary here),
    so that path ran more tests, hence other q-values, than the summed path."""
    with open_store(tmp_path / "data") as store:
        fill_store(store, split=True)
        assert "seconds" in store.exposure_frame().columns
        assert store.exposure_frame()["seconds"].nunique() > 1
        fast = build_findings(store)
        w = fast.window
        slow = analyze_fleet(store.crash_frame(), store.exposure_frame(), store.telemetry_frame(),
                             since=w.since, until=w.until)
    assert [a.name for a in slow.attributes] == [a.name for a in fast.attributes]
    assert "seconds" not in [a.name for a in slow.attributes]
    assert slow.window.tests == fast.window.tests
    assert slow.window.node_days == pytest.approx(fast.window.node_days)

    def associations(f: FleetFindings) -> dict[tuple[str, ...], tuple[object, ...]]:
        return {(g.kind, g.key, a.attribute, a.value): (a.crashes, a.rest_crashes, a.irr_status,
                                                         a.irr, a.p_value, a.q_value)
                for g in f.groups for a in g.associations}

    got, want = associations(slow), associations(fast)
    assert got.keys() == want.keys()
    for key, (crashes, rest, status, *stats) in want.items():
        assert got[key][:3] == (crashes, rest, status), key
        for x, y in zip(got[key][3:], stats, strict=True):  # None: an unbounded ratio
            assert (x is None and y is None) or x == pytest.approx(y, rel=1e-9), key
    assert [(g.key, g.attribution.verdict) for g in slow.groups] == [
        (g.key, g.attribution.verdict) for g in fast.groups]


def test_epidemic_curve(findings: FleetFindings) -> None:
    g = next(g for g in findings.groups if g.key == "__memmove_avx_unaligned_erms")
    assert [(p.day.isoformat(), p.crashes) for p in g.epidemic_curve] == [
        (f"2024-01-{22 + 3 * j:02d}" if 22 + 3 * j <= 31 else f"2024-02-{22 + 3 * j - 31:02d}", 1)
        for j in range(6)
    ]
    for g in findings.groups:
        assert sum(p.crashes for p in g.epidemic_curve) == g.crashes


def test_text(findings: FleetFindings) -> None:
    text = text_report(findings, width=250, details=True)
    for title in ("Crash groups by rate", "Suspect hosts", "Strongest attribute associations"):
        assert title in text
    assert re.search(r"host h-017: \d+ crashes where [\d.]+ expected \(SIR", text)
    assert "hardware-suspect" in text and "environment-triggered" in text
    assert "kernel=6.1.0" in text and "software" in text
    assert EVIL in text  # a terminal shows it as text; Rich markup is not interpreted
    # every printed q names the family it was corrected in (signature and phenotype groups
    # are separate FDR families): none is bare
    qs = re.findall(r"q (?:<|=) [0-9.e+-]+(?: \(([a-z]+)-group family\))?", text)
    assert qs and all(family in ("signature", "phenotype") for family in qs)


def test_a_ratio_reads_the_same_in_the_findings_and_the_evidence(
        findings: FleetFindings) -> None:
    """Before: "rate ratio ∞ (24.4–unbounded)" in a finding, "rate ratio
    unbounded (95% CI 24.4–unbounded)" in the same group's evidence."""
    from coreepi.reporting.phrases import evidence_text
    from coreepi.reporting.text import finding_lines

    evidence = " ".join(evidence_text(e) for g in findings.groups
                        for e in g.attribution.evidence)
    said = [m.group(1) for line in finding_lines(findings)
            for m in [re.search(r"rate ratio (.+?), q", line.plain)] if m]
    assert said, "no finding names a rate ratio"
    for ratio in said:
        assert "∞" not in ratio and f"rate ratio {ratio} vs" in evidence, ratio


def test_json_round_trips(findings: FleetFindings) -> None:
    text = render(findings, "json")
    assert FleetFindings.model_validate_json(text) == findings
    data = json.loads(text)
    assert list(data) == ["schema_version", "window", "attributes", "groups", "hosts",
                          "config", "notes"]
    doc = (Path(__file__).resolve().parents[1] / "docs" / "report-json.md").read_text()
    for key in data:
        assert f"`{key}`" in doc
    assert "`epidemic_curve`" in doc


def test_markdown(findings: FleetFindings) -> None:
    md = render(findings, "markdown")
    assert "| kind | group | crashes | hosts | rate (95% CI) | attribution | top evidence |" in md
    assert "| host | crashes | expected | SIR (95% CI) |" in md
    assert "| group | attribute | crashes | hosts (with it) | rate ratio (95% CI) |" in md
    assert r"io\_uring\_submit \| Ring::flush" in md  # a pipe cannot split a cell
    assert "**hardware-suspect**" in md and "kernel=6.1.0" in md
    assert "(signature-group family)" in md
    assert EVIL not in md and "&lt;script&gt;alert\\(1\\)&lt;/script&gt;" not in md
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md


def test_html_is_self_contained_and_escaped(findings: FleetFindings) -> None:
    html = render(findings, "html")
    assert html.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.IGNORECASE)
    assert "<script" not in html.lower() and "<link" not in html.lower()
    assert "@import" not in html and "url(" not in html
    assert html.count("<svg") >= 3  # epidemic curves, hosts, forest plot
    assert "Epidemic curves" in html and "observed (bar) vs expected" in html
    assert "Rate ratio (value vs rest of the fleet)" in html
    assert EVIL not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert re.search(r"host h-017: \d+ crashes where", html)


def test_cli_formats_and_window(data_dir: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "r.json"
    res = runner.invoke(app, ["report", "--data-dir", str(data_dir), "--format", "json",
                              "--since", "2024-01-01", "--until", "2024-01-16", "--out", str(out)])
    assert res.exit_code == 0, res.output
    f = FleetFindings.model_validate_json(out.read_text())
    assert f.window.node_days == pytest.approx(200 * 15)
    assert all(g.key != "__memmove_avx_unaligned_erms" for g in f.groups)
    for fmt in ("text", "markdown", "html"):
        res = runner.invoke(app, ["report", "--data-dir", str(data_dir), "-f", fmt])
        assert res.exit_code == 0, res.output
        assert "h-017" in res.output
    bad = runner.invoke(app, ["report", "--data-dir", str(data_dir), "-f", "pdf"])
    assert bad.exit_code == 2


def test_cli_empty_store(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["report", "--data-dir", str(tmp_path / "none")])
    assert res.exit_code == 2 and "no coreepi store here" in res.output
    open_store(tmp_path / "empty").close()
    res = runner.invoke(app, ["report", "--data-dir", str(tmp_path / "empty"), "-f", "json"])
    assert res.exit_code == 0 and "nothing to report" in res.output


def test_suspect_hosts_are_accused_or_unexplained_never_software(findings: FleetFindings) -> None:
    from coreepi.reporting.summary import WATCH_P, suspect_hosts

    shown = suspect_hosts(findings)
    assert "h-017" in [h.host_id for h in shown]
    for h in shown:
        assert h.attribution.verdict != "software"
        if h.attribution.verdict == "undetermined":
            assert h.p_value is not None and h.p_value < WATCH_P
    hidden = [h for h in findings.hosts if h not in shown]
    assert all(
        h.attribution.verdict == "software"
        or (h.attribution.verdict == "undetermined" and (h.p_value is None or h.p_value >= WATCH_P))
        for h in hidden
    )


def test_every_evidence_kind_has_a_phrase_and_a_documented_row(findings: FleetFindings) -> None:
    from typing import get_args

    from coreepi.epi.models import EvidenceKind
    from coreepi.reporting.phrases import PHRASES, evidence_text

    kinds = set(get_args(EvidenceKind))
    assert set(PHRASES) == kinds
    doc = (Path(__file__).resolve().parents[1] / "docs" / "epidemiology.md").read_text()
    for kind in kinds:
        assert f"| `{kind}` |" in doc, kind
    # every item of the report words into a sentence with no placeholder left
    for item in [*findings.groups, *findings.hosts]:
        for e in item.attribution.evidence:
            text = evidence_text(e)
            assert text and "None" not in text, (e.kind, text)


def test_counts_are_said_in_number() -> None:
    from coreepi.reporting.phrases import how_many

    assert [how_many(1, "crash"), how_many(2, "crash"), how_many(1204, "host"),
            how_many(0, "host")] == ["1 crash", "2 crashes", "1,204 hosts", "0 hosts"]
    assert how_many(None, "crash") == "? crashes"  # a count the evidence did not record


def test_evidence_of_one_crash_on_one_host_is_said_in_number() -> None:
    """Before: "1 crashes on 1 hosts", "1 host(s) hold 1 of the 1 crashes"."""
    from coreepi.epi.models import Evidence
    from coreepi.reporting.phrases import evidence_text

    def said(kind: str, **fields: object) -> str:
        return evidence_text(Evidence(kind=kind, supports=None, strength=1.0, **fields))

    assert said("fleet-spread", total=1, hosts=1) == "1 crash on 1 host"
    assert said("sample-size", observed=1, hosts=1, minimum=5) == (
        "only 1 crash on 1 host; at least 5 are needed")
    assert said("host-concentration", observed=1, total=1, host_ids=["h1"], expected=0.5,
                p=0.5).startswith("1 of 1 crash on host h1, expected 0.5")
    assert said("group-verdicts", total=1, host_ids=["h1"]).startswith(
        "host h1: of its 1 crash,")
