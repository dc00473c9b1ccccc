"""``coreepi postmortem`` on a small store: twelve hosts over ten days, a
planted bad host (h-07: machine checks, then many crashes with scattered
signatures and a hardware-indicative phenotype), a software bug spread over
the fleet, and a kernel rollout (6.1.0 → 6.6.3 on eight hosts) in the
window. The bad host, its telemetry and the rollout must appear."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cikit import coreepi

T0 = datetime(2024, 5, 1, tzinfo=UTC)
HOSTS = [f"h-{i:02d}" for i in range(1, 13)]
BAD = "h-07"
BUG = "parse_header | handle_request | main"


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _report(n: int, host: str, when: datetime, signature: str, phenotypes: list[dict[str, object]]
            ) -> dict[str, object]:
    return {"crash_id": f"{n:032x}", "source": "elf-core", "captured_at": _iso(when),
            "host_id": host, "arch": "x86_64",
            "signal": {"number": 11, "name": "SIGSEGV", "si_code_name": "SEGV_MAPERR"},
            "process": {"pid": 1000 + n, "exe": "/usr/bin/svc", "comm": "svc"},
            "signature": {"signature": signature}, "phenotypes": phenotypes,
            "attributes": {"app_version": "3.1.2"},
            "analysis": {"analyzer_version": "test"}}


def _fleet(root: Path) -> Path:
    fleet = root / "fleet"
    (fleet / "crashes").mkdir(parents=True)
    (fleet / "hosts.csv").write_text("host_id,cpu_model,kernel,microcode\n" + "".join(
        f"{h},EPYC 7763,6.1.0,0xa0011d1\n" for h in HOSTS))
    rows = ["host_id,start,end,kernel"]
    mid = T0 + timedelta(days=5)
    for i, h in enumerate(HOSTS):
        rows.append(f"{h},{_iso(T0)},{_iso(mid)},6.1.0")
        rows.append(f"{h},{_iso(mid)},{_iso(T0 + timedelta(days=10))},"
                    f"{'6.6.3' if i < 8 else '6.1.0'}")
    (fleet / "exposure.csv").write_text("\n".join(rows) + "\n")
    events = [{"host_id": BAD, "ts": _iso(T0 + timedelta(days=4, hours=h)), "kind": kind,
               "severity": "corrected", "component": "cpu 3 bank 5",
               "summary": f"{kind} on {BAD} cpu 3 bank 5", "hardware_indicative": True}
              for h, kind in ((1, "mce"), (2, "mce"), (3, "edac_ce"))]
    (fleet / "telemetry.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    n = 0
    misaligned = [{"name": "stack-misaligned", "hardware_indicative": True}]
    for k in range(14):  # the bad host: scattered signatures after its machine checks
        n += 1
        r = _report(n, BAD, T0 + timedelta(days=4, hours=6 + 3 * k), f"fn_{k} | caller_{k}",
                    misaligned)
        (fleet / "crashes" / f"{n}.json").write_text(json.dumps(r))
    for k, h in enumerate(HOSTS * 2):  # the software bug, everywhere, all window long
        n += 1
        r = _report(n, h, T0 + timedelta(hours=9 + 9 * k), BUG, [{"name": "null-deref"}])
        (fleet / "crashes" / f"{n}.json").write_text(json.dumps(r))
    return fleet


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("postmortem")
    data = root / "data"
    r = coreepi("ingest", str(_fleet(root)), "--data-dir", str(data), cwd=root)
    assert r.returncode == 0, r.stderr
    assert "rejected" not in r.stderr, r.stderr
    return data


def _pm(store: Path, *args: str) -> str:
    r = coreepi("postmortem", "--data-dir", str(store), *args, cwd=store.parent)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_bad_host_telemetry_and_rollout_appear(store: Path) -> None:
    md = _pm(store, "--since", "2024-05-04", "--until", "2024-05-09",
             "--base-url", "https://coreepi.example")
    hosts = md.split("### Hosts")[1].split("###")[0]
    first = hosts.strip().splitlines()[2]
    # 14 crashes of its own + 1 of the software bug
    assert first.startswith(f"| [{BAD}](https://coreepi.example/hosts/{BAD}) | 15 | 3 (3) |")
    assert "hardware-suspect" in first
    assert f"Drain host {BAD}" in md and "3 hardware events in the window" in md
    timeline = md.split("### Timeline")[1]
    assert timeline.splitlines()[2] == "| time (UTC) | host | kind | what |"  # #23: no blank
    assert f"| 2024-05-05 01:00:00 | {BAD} | hardware | mce: mce on {BAD} cpu 3 bank 5 |" \
        in timeline
    assert timeline.count("| crash | [`") == 14 + sum(
        1 for k in range(24) if datetime(2024, 5, 4, tzinfo=UTC)
        <= T0 + timedelta(hours=9 + 9 * k) < datetime(2024, 5, 9, tzinfo=UTC))
    changed = md.split("### What changed in the window")[1].split("###")[0]
    assert "| kernel | 6.6.3 | 0% | 67% | 2024-05-06 00:00 |" in changed
    assert "| kernel | 6.1.0 | 100% | 33% | - |" in changed
    assert re.search(r"\| crash \| \[`SIGSEGV parse_header \\\| handle_request \\\| main`\]"
                     r"\(https://coreepi\.example/crashes/[0-9a-f]{32}\) \|", md)
    assert re.search(r"\[`parse_header \\\| handle_request \\\| main`\]"
                     r"\(https://coreepi\.example/groups/[0-9a-f]{16}\)", md)


def test_scope_by_host_and_attribute(store: Path) -> None:
    only = _pm(store, "--since", "2024-05-01", "--until", "2024-05-11", "--hosts", "h-12")
    # in number, one or many (before: "2 crashes on 1 hosts")
    assert ("host h-12: 2 crashes on 1 host, 1 signature group, 0 hardware events, 0 rollouts "
            "in the window.") in only and BAD not in only
    kernel = _pm(store, "--since", "2024-05-06", "--until", "2024-05-11",
                 "--attribute", "kernel=6.1.0")
    assert "kernel=6.1.0" in kernel
    assert "| h-09 |" in kernel and "| h-01 |" not in kernel  # h-01 ran 6.6.3 then


def test_html_page(store: Path) -> None:
    page = _pm(store, "--since", "2024-05-04", "--until", "2024-05-09", "--format", "html",
               "--base-url", "https://coreepi.example")
    assert page.startswith("<!DOCTYPE html>") and page.count("<table>") == 4
    assert f'<a href="https://coreepi.example/hosts/{BAD}">{BAD}</a>' in page


@pytest.mark.parametrize(("args", "expected"), [
    (["--since", "2024-05-04", "--until", "2024-05-01"], "--until must be after --since"),
    (["--since", "yesterday", "--until", "2024-05-01"], "--since: not an ISO-8601"),
    (["--since", "2024-05-01", "--until", "2024-05-02", "--attribute", "kernel"],
     "--attribute 'kernel': expected K=V"),
    (["--since", "2024-05-01", "--until", "2024-05-02", "--format", "pdf"], "--format 'pdf'"),
])
def test_bad_usage(store: Path, args: list[str], expected: str) -> None:
    r = coreepi("postmortem", "--data-dir", str(store), *args, cwd=store.parent)
    assert r.returncode == 2 and expected in r.stderr and r.stderr.count("\n") == 1


def test_links_use_the_ui_group_ids(store: Path) -> None:
    # the group page's URL is /groups/{group_id}: the postmortem's links must land there
    from coreepi.epi.models import group_id

    md = _pm(store, "--since", "2024-05-04", "--until", "2024-05-09",
             "--base-url", "http://ui.example")
    assert f"http://ui.example/groups/{group_id('signature', BUG)}" in md


def test_a_short_window_shows_the_whole_store_beside_it(store: Path) -> None:
    """#12: a window holding 2 of the bad host's 16 crashes cannot judge it;
    the whole store's numbers and verdict stand beside the window's and the
    drain recommendation comes from them."""
    md = _pm(store, "--since", "2024-05-05T05:00:00Z", "--until", "2024-05-05T10:00:00Z")
    hosts = md.split("### Hosts")[1].split("###")[0].strip().splitlines()
    assert hosts[0] == ("| host | crashes | hardware events (all events) | SIR | window verdict "
                        "| whole store: crashes, verdict | evidence |")
    bad = next(line for line in hosts if line.startswith(f"| {BAD} |"))
    assert bad.startswith(f"| {BAD} | 2 |") and "| undetermined | 16, hardware-suspect |" in bad
    assert f"Drain host {BAD} and run the vendor's diagnostics (hardware-suspect over the " \
           "whole store: " in md
    groups = md.split("### Groups involved")[1].split("###")[0].strip().splitlines()
    assert groups[0] == ("| signature | crashes in scope | window: crashes / hosts | window "
                         "verdict | whole store: crashes / hosts | whole-store verdict | "
                         "evidence (whole store) |")


def test_store_option_and_environment(store: Path, tmp_path: Path) -> None:
    """#14: postmortem takes --store and $COREEPI_STORE like report; its help
    names the variable it honours for --data-dir."""
    window = ["--since", "2024-05-04", "--until", "2024-05-09"]
    direct = _pm(store, *window)
    r = coreepi("postmortem", "--store", str(store), *window, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout == direct, r.stderr
    r = coreepi("postmortem", *window, cwd=tmp_path,
                env={"COREEPI_STORE": str(store), "HOME": str(tmp_path)})
    assert r.returncode == 0 and r.stdout == direct, r.stderr
    r = coreepi("postmortem", "--store", str(tmp_path / "none"), *window, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.startswith(
        f"coreepi: error: {tmp_path / 'none'}: no coreepi store here") and \
        r.stderr.count("\n") == 1
    usage = coreepi("postmortem", "--help", cwd=tmp_path, env={"COLUMNS": "200"}).stdout
    assert "COREEPI_DATA_DIR" in usage and "COREEPI_STORE" in usage
    assert "COREEPI_DATA]" not in usage


def test_trigger_action_names_the_verdicts_evidence(store: Path) -> None:
    """#21: the action of an environment-triggered group names the attribute
    value its verdict rests on (the evidence shown beside it), not the first
    raising association in list order (load before kernel)."""
    from coreepi.epi.models import Association, Evidence
    from coreepi.reporting.postmortem import _actions, build_postmortem
    from coreepi.store import open_store

    with open_store(store, read_only=True) as opened:
        pm = build_postmortem(opened, datetime(2024, 5, 4, tzinfo=UTC),
                              datetime(2024, 5, 9, tzinfo=UTC))
    assert pm.fleet is not None
    bug = next(g for g in pm.groups if g.key == BUG)
    load, kernel = (Association.model_construct(
        attribute=a, attribute_class="environment", value=v, irr=9.0, q_value=q, p_value=q)
        for a, v, q in (("load", "[3.61, 5.45)", 0.01), ("kernel", "6.6.3", 1e-9)))
    because = Evidence(kind="rate-ratio", supports="environment-triggered", strength=9.0,
                       attribute="kernel", level="6.6.3", observed=20, q=1e-9)
    triggered = bug.model_copy(update={
        "associations": [load, kernel], "attribution": bug.attribution.model_copy(update={
            "verdict": "environment-triggered", "evidence": [because]})})
    pm.groups = [triggered]
    assert f"Check the trigger of `{BUG}` (rate raised with kernel=6.6.3): compare it with " \
           "the fleet." in _actions(pm)
    # the window cannot judge: the whole store's verdict, and the action says so
    pm.groups = [bug.model_copy(update={"attribution": bug.attribution.model_copy(update={
        "verdict": "undetermined", "evidence": []})})]
    pm.fleet.groups = [triggered if g.kind == "signature" and g.key == BUG else g
                       for g in pm.fleet.groups]
    assert f"Check the trigger of `{BUG}` (rate raised with kernel=6.6.3, over the whole " \
           "store): compare it with the fleet." in _actions(pm)


def test_a_drained_host_is_not_recommended_for_a_drain(store: Path, tmp_path: Path) -> None:
    """#22: the bad host drained already: the postmortem and the report say
    so (when, by whom) instead of recommending a drain."""
    import shutil

    data = tmp_path / "data"
    shutil.copytree(store, data)
    r = coreepi("host", "drain", BAD, "--reason", "mce", "--data-dir", str(data), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    md = _pm(data, "--since", "2024-05-04", "--until", "2024-05-09")
    assert f"Drain host {BAD}" not in md
    when = re.search(rf"Host {BAD} is already drained \(since (\S+ \S+) UTC, by cli\): run the "
                     r"vendor's diagnostics \(3 hardware events in the window\); replace the part "
                     rf"they name, then `coreepi host undrain {BAD}`\.", md)
    assert when and datetime.strptime(when.group(1), "%Y-%m-%d %H:%M").year >= 2026
    r = coreepi("report", "--data-dir", str(data), "--no-pager", cwd=tmp_path,
                env={"COLUMNS": "400"})
    assert r.returncode == 0, r.stderr
    line = next(x for x in r.stdout.splitlines() if f"hardware-suspect host {BAD}" in x)
    assert "recommend drain" not in line
    assert f"; already drained (since {when.group(1)} UTC, by cli): run the hardware " \
           f"diagnostics, then `coreepi host undrain {BAD}` once repaired" in line
