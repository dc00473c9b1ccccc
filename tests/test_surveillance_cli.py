"""``coreepi watch``, ``coreepi alerts …`` and ``coreepi host drain`` in-process, on a real store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner
from webhook import WebhookReceiver

from coreepi.cli.main import app
from coreepi.simulate.timeline import BadHost, TimelineFleet, make_timeline, write_timeline
from coreepi.store import DuckDBStore


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fleet's store as written, never touched by a test (copy it)."""
    d = tmp_path_factory.mktemp("surv") / "pristine"
    f = TimelineFleet(hosts=40, days=40, groups=3, rate_range=(1, 1),
                      bad_hosts=(BadHost(host=9, day=25, rate=0.8),))
    with DuckDBStore(d) as store:
        write_timeline(store, make_timeline(f, seed=4))
    return d


@pytest.fixture(scope="module")
def data_dir(pristine: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy the module's tests share (and change: alerts, silences, drains)."""
    import shutil

    d = tmp_path_factory.mktemp("surv") / "data"
    shutil.copytree(pristine, d)
    return d


def test_watch_once_fires_lists_and_drains(data_dir: Path, tmp_path: Path) -> None:
    hook = WebhookReceiver()
    rules = tmp_path / "rules.toml"
    rules.write_text('[evaluation]\nkinds = ["hardware-suspect-host"]\n'
                     f'[[receiver]]\nname = "hook"\nformat = "slack"\nurl = "{hook.url}"\n')
    run = CliRunner().invoke
    try:
        # a replay is a dry run by default: printed, not stored, not delivered
        r = run(app, ["watch", "--data-dir", str(data_dir), "--rules", str(rules), "--once",
                      "--at", "2026-11-10T00:00:00"])
        assert r.exit_code == 0, r.output
        assert r.output.splitlines()[:2] == [
            "replay: alerts printed, not stored or delivered (--deliver sends them)",
            r.output.splitlines()[1]]
        assert r.output.splitlines()[1].startswith("firing: host h00009 looks hardware-suspect")
        assert hook.bodies == []
        with DuckDBStore(data_dir, read_only=True) as store:
            assert store.alerts("firing") == []
        r = run(app, ["watch", "--data-dir", str(data_dir), "--rules", str(rules), "--once",
                      "--at", "2026-11-10T00:00:00", "--deliver"])
        assert r.exit_code == 0, r.output
        assert r.output.startswith("firing: host h00009 looks hardware-suspect")
        assert len(hook.bodies) == 1 and "h00009" in hook.bodies[0]["text"]
        r = run(app, ["alerts", "test", "--data-dir", str(data_dir), "--rules", str(rules)])
        assert (r.exit_code, r.output) == (0, "hook: delivered\n")
        assert "coreepi-test" in hook.bodies[1]["text"]
    finally:
        hook.close()
    r = run(app, ["alerts", "list", "--json", "--data-dir", str(data_dir)])
    listed = json.loads(r.output)
    assert [(a["kind"], a["state"], a["labels"]["host_id"]) for a in listed] == [
        ("hardware-suspect-host", "firing", "h00009")]
    assert listed[0]["evidence"]["hardware_crashes"] >= 1
    r = run(app, ["alerts", "silence", "--match", "kind=rising", "--hours", "2",
                  "--data-dir", str(data_dir)])
    assert r.exit_code == 0 and r.output.startswith("silence ")
    with DuckDBStore(data_dir, read_only=True) as store:
        assert [s.matchers for s in store.silences()] == [{"kind": "rising"}]
    r = run(app, ["host", "drain", "h00009", "--reason", "mce", "--data-dir", str(data_dir)])
    assert (r.exit_code, r.output) == (0, "h00009: drained\n")
    r = run(app, ["host", "drain", "h00009", "--data-dir", str(data_dir)])
    assert r.output == "h00009: already drained\n"
    with DuckDBStore(data_dir, read_only=True) as store:
        assert [d.reason for d in store.drained_hosts()] == ["mce"]
    # repaired: back in service, the drained span kept in the history
    r = run(app, ["host", "undrain", "h00009", "--data-dir", str(data_dir)])
    assert (r.exit_code, r.output) == (0, "h00009: back in service\n")
    r = run(app, ["host", "undrain", "h00009", "--data-dir", str(data_dir)])
    assert (r.exit_code, r.output) == (0, "h00009: was not drained\n")
    r = run(app, ["host", "undrain", "nope", "--data-dir", str(data_dir)])
    assert r.exit_code == 2 and "host 'nope': not in the store" in r.output
    with DuckDBStore(data_dir, read_only=True) as store:
        assert store.drained_hosts() == []
        (ended,) = store.drain_history()
        assert (ended.host_id, ended.reason, ended.undrained_by) == ("h00009", "mce", "cli")
        assert ended.undrained_at is not None and ended.undrained_at >= ended.drained_at


def test_a_replay_honours_the_silences_active_today(pristine: Path, tmp_path: Path) -> None:
    # a fresh user silenced the bad host for 2 hours, then replayed last month with
    # --deliver: the silence (active now, not at the replayed time) must mute it
    import shutil

    data = tmp_path / "data"
    shutil.copytree(pristine, data)
    hook = WebhookReceiver()
    rules = tmp_path / "rules.toml"
    rules.write_text('[evaluation]\nkinds = ["hardware-suspect-host"]\n'
                     f'[[receiver]]\nname = "hook"\nformat = "json"\nurl = "{hook.url}"\n')
    run = CliRunner().invoke
    try:
        r = run(app, ["alerts", "silence", "--match", "host_id=h00009", "--hours", "2",
                      "--data-dir", str(data)])
        assert r.exit_code == 0, r.output
        r = run(app, ["watch", "--data-dir", str(data), "--rules", str(rules), "--once",
                      "--at", "2026-11-10T00:00:00", "--deliver"])
        assert r.exit_code == 0, r.output
        assert r.output.startswith("firing (silenced): host h00009 looks hardware-suspect")
        assert hook.bodies == []
    finally:
        hook.close()


def test_bad_input_is_one_line_and_exit_2(data_dir: Path, tmp_path: Path) -> None:
    run = CliRunner().invoke
    r = run(app, ["host", "drain", "nope", "--data-dir", str(data_dir)])
    assert (r.exit_code, r.stderr) == (2, "coreepi: error: host 'nope': not in the store\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("[[receiver]]\nname = 1\n")
    r = run(app, ["watch", "--data-dir", str(data_dir), "--rules", str(bad), "--once"])
    assert r.exit_code == 2
    assert r.stderr == (f"coreepi: error: {bad}: receiver[0].name: expected str, got int 1\n")
    r = run(app, ["watch", "--data-dir", str(data_dir), "--once", "--at", "yesterday"])
    assert (r.exit_code, r.stderr) == (2, "coreepi: error: --at 'yesterday': not an ISO 8601 time\n")
    r = run(app, ["alerts", "list", "--state", "open", "--data-dir", str(data_dir)])
    assert r.exit_code == 2 and "firing or resolved" in r.stderr


def test_a_data_dir_without_a_store_is_refused_not_created(tmp_path: Path) -> None:
    run = CliRunner().invoke
    nope = tmp_path / "x" / "nope"
    hook_rules = tmp_path / "rules.toml"
    hook_rules.write_text('[[receiver]]\nname = "hook"\nformat = "slack"\n'
                          'url = "http://127.0.0.1:9/"\n')
    for args in (["host", "drain", "h-002"], ["alerts", "list"],
                 ["alerts", "silence", "--match", "kind=rising", "--hours", "2"],
                 ["alerts", "test", "--rules", str(hook_rules)],
                 ["watch", "--once"],
                 ["store", "prune", "--max-age-days", "1"]):
        r = run(app, [*args, "--data-dir", str(nope)])
        assert (r.exit_code, r.stdout) == (2, ""), (args, r.output)
        assert r.stderr.startswith("coreepi: error: ") and f"{nope}: no coreepi store here" \
            in r.stderr and r.stderr.count("\n") == 1, (args, r.stderr)
        assert not nope.exists(), args
    # no --data-dir: the per-user data dir is not created either
    xdg = tmp_path / "xdg"
    r = run(app, ["host", "drain", "h-002"], env={"XDG_DATA_HOME": str(xdg),
                                                  "COREEPI_DATA_DIR": None, "COREEPI_STORE": None})
    assert r.exit_code == 2 and "no coreepi store here" in r.stderr
    assert not xdg.exists()


def test_bad_rules_values_and_silence_hours_exit_2(data_dir: Path, tmp_path: Path) -> None:
    run = CliRunner().invoke
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"[evaluation]\n# caf\xe9\n")
    r = run(app, ["alerts", "test", "--data-dir", str(data_dir), "--rules", str(bad)])
    assert (r.exit_code, r.stderr) == (
        2, f"coreepi: error: {bad}: not UTF-8 text (byte 18): TOML must be UTF-8\n")
    bad.write_text("[evaluation]\ninterval_seconds = 0\n")
    r = run(app, ["watch", "--data-dir", str(data_dir), "--rules", str(bad), "--once"])
    assert (r.exit_code, r.stderr) == (
        2, (f"coreepi: error: {bad}: evaluation.interval_seconds: 0.0 is out of range "
            "(accepted: 0 < x)\n"))
    for hours in ("1e12", "inf", "nan", "-1"):
        r = run(app, ["alerts", "silence", "--match", "kind=rising", "--hours", hours,
                      "--data-dir", str(data_dir)])
        assert r.exit_code == 2, (hours, r.output)
        assert r.stderr == (f"coreepi: error: --hours {float(hours)!r}: out of range "
                            "(accepted: 0 to 87840)\n")


def test_a_failed_test_delivery_is_shown_and_logged(data_dir: Path, tmp_path: Path) -> None:
    run = CliRunner().invoke
    rules = tmp_path / "rules.toml"
    # port 9 (discard) on 127.0.0.1: nothing listens there, the connection is refused
    rules.write_text("[delivery]\nretries = 1\nbackoff_seconds = 0.01\n"
                     '[[receiver]]\nname = "dead"\nformat = "json"\nurl = "http://127.0.0.1:9/"\n')
    r = run(app, ["alerts", "test", "--data-dir", str(data_dir), "--rules", str(rules)])
    assert (r.exit_code, r.stdout) == (1, "")
    assert r.stderr.startswith("coreepi: error: receiver dead (http://127.0.0.1:9/): "
                               "not delivered after 2 attempts: ConnectError: ")
    assert r.stderr.count("\n") == 1
    r = run(app, ["alerts", "deliveries", "--json", "--receiver", "dead",
                  "--data-dir", str(data_dir)])
    log = json.loads(r.output)
    assert [(d["alert_key"], d["attempt"], d["status"], d["ok"]) for d in log] == [
        ("new-group|signature=coreepi-test", 1, 0, False),
        ("new-group|signature=coreepi-test", 2, 0, False)]
    assert all(d["error"].startswith("ConnectError: ") for d in log)
    r = run(app, ["alerts", "deliveries", "--failed", "--data-dir", str(data_dir)])
    lines = [x for x in r.output.splitlines() if " dead " in x]
    assert len(lines) == 2 and lines[1].split(" ", 2)[2].startswith(
        "dead #2 firing new-group|signature=coreepi-test: FAILED ConnectError: ")


def test_watch_at_outside_the_data_is_refused(data_dir: Path) -> None:
    run = CliRunner().invoke
    r = run(app, ["watch", "--data-dir", str(data_dir), "--once", "--at", "1990-01-01"])
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr == ("coreepi: error: --at 1990-01-01T00:00:00+00:00: before the store's "
                        "first crash and node-time (nothing to evaluate)\n")
    r = run(app, ["watch", "--data-dir", str(data_dir), "--once", "--at", "2999-01-01"])
    assert (r.exit_code, r.stderr) == (
        2, "coreepi: error: --at 2999-01-01T00:00:00+00:00: in the future "
        "(a replay evaluates a past time)\n")
    # the fleet starts 2026-10-01: its first day is accepted (the bad host, bad from
    # day 25, is not detected then: an alert fired by an earlier test resolves)
    r = run(app, ["watch", "--data-dir", str(data_dir), "--once", "--at", "2026-10-01T12:00"])
    assert (r.exit_code, r.stderr) == (0, "")
    assert "firing" not in r.stdout


def test_host_drain_through_a_real_server(data_dir: Path, tmp_path: Path) -> None:
    import shutil

    from servekit import ServeProcess

    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    run = CliRunner().invoke
    tokens = {}
    for scope in ("read", "admin"):
        made = run(app, ["token", "create", "--scope", scope, "--data-dir", str(data)])
        assert made.exit_code == 0, made.output
        tokens[scope] = made.stdout.strip()
    served = ServeProcess(["--data-dir", str(data)], tmp_path / "serve.log")
    try:
        def drain(host: str, token: str) -> tuple[int, str, str]:
            r = run(app, ["host", "drain", host, "--reason", "mce 3x", "--server", served.url],
                    env={"COREEPI_TOKEN": token})
            return r.exit_code, r.stdout, r.stderr

        url = f"{served.url}/api/v1/hosts/h00005/drain"
        code, out, err = drain("h00005", tokens["read"])
        assert (code, out) == (2, "") and err.startswith(f"coreepi: error: {url}: 403 forbidden")
        assert drain("h00005", tokens["admin"]) == (0, "h00005: drained\n", "")
        assert drain("h00005", tokens["admin"]) == (0, "h00005: already drained\n", "")
        code, _, err = drain("nope", tokens["admin"])
        assert (code, err) == (2, f"coreepi: error: {served.url}/api/v1/hosts/nope/drain: "
                                  "404: host 'nope': not in the store\n")

        def undrain(host: str, token: str) -> tuple[int, str, str]:
            r = run(app, ["host", "undrain", host, "--server", served.url],
                    env={"COREEPI_TOKEN": token})
            return r.exit_code, r.stdout, r.stderr

        code, out, err = undrain("h00005", tokens["read"])
        assert (code, out) == (2, "") and err.startswith(f"coreepi: error: {url}: 403 forbidden")
        assert undrain("h00005", tokens["admin"]) == (0, "h00005: back in service\n", "")
        assert undrain("h00005", tokens["admin"]) == (0, "h00005: was not drained\n", "")
        code, _, err = undrain("nope", tokens["admin"])
        assert (code, err) == (2, f"coreepi: error: {served.url}/api/v1/hosts/nope/drain: "
                                  "404: host 'nope': not in the store\n")
        assert drain("h00005", tokens["admin"]) == (0, "h00005: drained\n", "")  # again
        # a drain done earlier by hand, recorded with its time (the `at` of the POST body)
        r = run(app, ["host", "drain", "h00007", "--at", "2026-10-20T06:00:00+02:00",
                      "--server", served.url], env={"COREEPI_TOKEN": tokens["admin"]})
        assert (r.exit_code, r.stdout, r.stderr) == (0, "h00007: drained\n", "")
    finally:
        served.kill()
        served.log.close()
    with DuckDBStore(data, read_only=True) as store:
        got = [(d.host_id, d.reason, d.drained_by.startswith("token:")) for d in store.drained_hosts()]
    assert ("h00005", "mce 3x", True) in got
    with DuckDBStore(data, read_only=True) as store:
        at = {d.host_id: d.drained_at for d in store.drained_hosts()}
    assert at["h00007"].isoformat() == "2026-10-20T04:00:00+00:00"


def test_host_drain_at_a_past_time(pristine: Path, tmp_path: Path) -> None:
    # an operator drained h00009 by hand on day 30 (2026-10-31) and records it
    # afterwards: the drain starts then, its node-time is cut from then, and
    # the re-check compares the 28 days before that day
    import shutil
    from datetime import UTC, datetime, timedelta

    import pandas as pd

    from coreepi.epi.surveillance import DetectorParams, clip_drained
    from coreepi.surveil.drains import recheck

    data = tmp_path / "data"
    shutil.copytree(pristine, data)
    run = CliRunner().invoke
    ahead = (datetime.now(UTC) + timedelta(hours=1)).replace(microsecond=0)
    r = run(app, ["host", "drain", "h00009", "--at", ahead.isoformat(), "--data-dir", str(data)])
    assert (r.exit_code, r.stdout) == (2, "")
    assert r.stderr.startswith(f"coreepi: error: --at {ahead.isoformat()}: in the future (now is ")
    assert r.stderr.count("\n") == 1
    r = run(app, ["host", "drain", "h00009", "--at", "last week", "--data-dir", str(data)])
    assert (r.exit_code, r.stderr) == (
        2, "coreepi: error: --at 'last week': not an ISO 8601 time\n")
    r = run(app, ["host", "drain", "h00009", "--at", "2026-10-31T08:00", "--reason", "mce",
                  "--data-dir", str(data)])
    assert (r.exit_code, r.output) == (0, "h00009: drained\n")
    at = datetime(2026, 10, 31, 8, tzinfo=UTC)
    with DuckDBStore(data, read_only=True) as store:
        (d,) = store.drained_hosts()
        assert (d.host_id, d.drained_at, d.reason) == ("h00009", at, "mce")
        exposure = store.exposure_frame()
        kept = clip_drained(exposure, {d.host_id: pd.Timestamp(d.drained_at)})
        mine = kept[kept["host_id"] == "h00009"]
        assert mine["end"].max() == pd.Timestamp(at)  # no node-time after the drain
        assert exposure[exposure["host_id"] == "h00009"]["end"].max() > pd.Timestamp(at)
        check = recheck(store, d, DetectorParams(), now=datetime(2026, 11, 10, tzinfo=UTC))
        assert check["host_crashes_before"] > 0 and "host_last_crash" not in check
    # the same time again changes nothing; another time is not dropped silently
    r = run(app, ["host", "drain", "h00009", "--at", "2026-10-31T08:00", "--data-dir", str(data)])
    assert (r.exit_code, r.output) == (0, "h00009: already drained\n")
    r = run(app, ["host", "drain", "h00009", "--at", "2026-10-20", "--data-dir", str(data)])
    assert (r.exit_code, r.stderr) == (
        2, "coreepi: error: --at 2026-10-20T00:00:00+00:00: host 'h00009' is drained already, "
           "since 2026-10-31T08:00:00+00:00; to record another start, undrain it, then drain "
           "it again with this time\n")
    # back in service; a drain starting inside the ended one is refused, one before it
    # (the start corrected) covers it
    r = run(app, ["host", "undrain", "h00009", "--data-dir", str(data)])
    assert r.exit_code == 0, r.output
    r = run(app, ["host", "drain", "h00009", "--at", "2026-11-01T00:00", "--data-dir", str(data)])
    assert r.exit_code == 2 and r.stderr.startswith(
        "coreepi: error: --at 2026-11-01T00:00:00+00:00: host 'h00009' was drained from "
        "2026-10-31T08:00:00+00:00 until ")
    assert r.stderr.endswith(" already; a new drain starts before or after that\n")
    r = run(app, ["host", "drain", "h00009", "--at", "2026-10-20", "--data-dir", str(data)])
    assert (r.exit_code, r.output) == (0, "h00009: drained\n")
    with DuckDBStore(data, read_only=True) as store:
        (d,) = store.drained_hosts()
        (ended,) = store.drain_history()
        kept = clip_drained(store.exposure_frame(), {d.host_id: pd.Timestamp(d.drained_at)},
                            [(ended.host_id, pd.Timestamp(ended.drained_at),
                              pd.Timestamp(ended.undrained_at))])
    assert kept[kept["host_id"] == "h00009"]["end"].max() == pd.Timestamp("2026-10-20", tz="UTC")


def test_recheck_names_the_last_crash_when_it_predates_the_baseline(pristine: Path) -> None:
    # the defect: a host drained long after its crashes read "no crash on this host"
    from datetime import UTC, datetime

    from coreepi.epi.surveillance import DetectorParams
    from coreepi.reporting.phrases import recheck_sentence
    from coreepi.store.alert_records import DrainRecord
    from coreepi.surveil.drains import recheck

    with DuckDBStore(pristine, read_only=True) as store:
        frame = store.crash_frame()
        last = frame[frame["host_id"] == "h00009"]["captured_at"].max().to_pydatetime()
        drain = DrainRecord("h00009", datetime(2027, 1, 20, tzinfo=UTC), "cli")
        check = recheck(store, drain, DetectorParams(), now=datetime(2027, 1, 25, tzinfo=UTC))
        assert store.last_crash_at("h00009", last) < last
        assert store.last_crash_at("nope", drain.drained_at) is None
    days = (drain.drained_at - last).total_seconds() / 86400
    assert check["host_crashes_before"] == 0 and check["verdict"] == "undetermined"
    assert check["host_last_crash"] == last.isoformat()
    assert check["host_last_crash_days_before"] == pytest.approx(days)
    assert recheck_sentence(check, 28) == (
        f"the host's last crash was {last:%Y-%m-%d}, {days:,.0f} days before the drain "
        "(more than the 28 days compared): nothing recent to follow on the other hosts")
    never = {**check, "host_last_crash": None}
    assert recheck_sentence(never, 28).startswith(
        "nothing to compare: no crash on this host in the 28 days before the drain, nor earlier")
