"""The CLI's conventions: inspect's threads, registers and warnings; a local
report sent with `submit`; one data dir for `token` and `serve` (flag or
COREEPI_DATA_DIR); `serve` on a busy port; `agent status` creates nothing;
an ingest that stores nothing fails; --help without Python type names."""

from __future__ import annotations

import json
import re
import socket
import time
from pathlib import Path

import httpx
import pytest
from clikit import cli
from fleetfactory import CoreSet, coreset  # noqa: F401
from servekit import ServeProcess, free_port


def test_inspect_threads_registers_and_warnings(coreset: CoreSet) -> None:  # noqa: F811
    core = str(coreset.cores[0])
    plain = cli("inspect", core, env={"COLUMNS": "100"})
    assert plain.returncode == 0, plain.stderr
    assert "crashing thread" in plain.stdout and "registers" not in plain.stdout
    full = cli("inspect", core, "--all-threads", "--registers", env={"COLUMNS": "100"})
    assert full.returncode == 0, full.stderr
    assert re.search(r"\brip 0x[0-9a-f]{16}\b", full.stdout)
    assert re.search(r"\brsp 0x[0-9a-f]{16}\b", full.stdout)
    for text in (plain.stdout, full.stdout):
        assert "{'" not in text and "[{" not in text and "warning" not in text
    # the core was made without the binary at hand: a warning, on stderr only
    moved = cli("inspect", core, "--exe", "/bin/true")
    assert moved.returncode == 0
    assert "warning" in moved.stderr and "warning" not in moved.stdout


@pytest.mark.parametrize("when,reason", [
    ("1990-01-01", "--captured-at 1990-01-01T00:00:00+00:00 is before 2000 "
                   "(limit earliest_time=2000-01-01)"),
    ("2099-01-01", "--captured-at 2099-01-01T00:00:00+00:00 is in the future"),
])
def test_captured_at_outside_the_servers_range_is_refused(
        coreset: CoreSet, tmp_path: Path, when: str, reason: str) -> None:  # noqa: F811
    """The time range of model/limits.py (the server's 422) applies at
    --captured-at: inspect and submit refuse it in one line, and submit a
    report dated outside it."""
    for args in (["inspect", str(coreset.cores[2]), "--json", "--host-id", "h", "--captured-at",
                  when],
                 ["submit", str(tmp_path / "r.json"), "--server", "http://127.0.0.1:9",
                  "--captured-at", when]):
        done = cli(*args)
        assert done.returncode == 2, done.stderr
        assert done.stderr.startswith(f"coreepi: error: {reason}"), done.stderr
        assert len(done.stderr.splitlines()) == 1
    report = json.loads(cli("inspect", str(coreset.cores[2]), "--json").stdout)
    dated = tmp_path / "dated.json"
    dated.write_text(json.dumps(report | {"host_id": "h", "captured_at": f"{when}T00:00:00Z"}))
    sent = cli("submit", str(dated), "--server", "http://127.0.0.1:9")
    assert sent.returncode == 2 and sent.stderr.startswith(
        f"coreepi: error: {dated}: crash {report['crash_id']}: captured_at "), sent.stderr


def test_inspect_identity_then_submit(coreset: CoreSet, tmp_path: Path) -> None:  # noqa: F811
    out = cli("inspect", str(coreset.cores[2]), "--json", "--host-id", "lab-3",
              "--captured-at", "2024-03-01T12:00:00")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["host_id"] == "lab-3" and report["captured_at"].startswith("2024-03-01T12:00")
    path = tmp_path / "report.json"
    path.write_text(out.stdout)
    data = tmp_path / "data"
    # token create at a path without a store: refused (a typo is not made a store)
    typo = cli("token", "create", "--scope", "ingest", "--data-dir", str(data))
    assert (typo.returncode, typo.stdout) == (2, ""), typo.stderr
    assert typo.stderr == (f"coreepi: error: {data}: no coreepi store here (create one with "
                           f"`coreepi store init {data}`)\n")
    assert not data.exists()
    made = cli("store", "init", "--data-dir", str(data))
    assert (made.returncode, made.stdout) == (0, f"store ready: {data} (0 crashes)\n"), made.stderr
    ingest_token = cli("token", "create", "--scope", "ingest", env={"COREEPI_DATA_DIR": str(data)})
    read_token = cli("token", "create", "--scope", "read", "--data-dir", str(data))
    assert ingest_token.returncode == 0 and read_token.returncode == 0
    # the same store as the tokens (one made with the flag, one with the env var)
    server = ServeProcess(["--data-dir", str(data)],
                           tmp_path / "serve.log")
    try:
        env = {"COREEPI_TOKEN": ingest_token.stdout.strip()}
        sent = cli("submit", str(path), "--server", server.url, env=env)
        assert sent.returncode == 0, sent.stderr
        assert sent.stdout.strip() == f"{report['crash_id']}: created"
        again = cli("submit", str(path), "--server", server.url, env=env)
        assert again.stdout.strip() == f"{report['crash_id']}: duplicate"
        listed = cli("list", "--json", "--server", server.url,
                     env={"COREEPI_TOKEN": read_token.stdout.strip()})
        assert [r["host_id"] for r in json.loads(listed.stdout)] == ["lab-3"]
        hostless = tmp_path / "hostless.json"
        hostless.write_text(json.dumps(report | {"host_id": None}))
        refused = cli("submit", str(hostless), "--server", server.url, env=env)
        assert refused.returncode == 2 and "--host-id" in refused.stderr
    finally:
        server.kill()
        server.log.close()


def test_serve_access_log_and_busy_port(tmp_path: Path) -> None:
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", port))
        busy.listen()
        done = cli("serve", "--data-dir", str(tmp_path / "d"), "--port", str(port))
        assert done.returncode == 2 and done.stderr.count("\n") == 1
        assert done.stderr.startswith("coreepi: error: cannot listen on 127.0.0.1:")
        assert "startup complete" not in done.stdout + done.stderr
        assert not (tmp_path / "d").exists()  # nothing created
    assert cli("store", "init", str(tmp_path / "d")).returncode == 0
    import subprocess
    import sys

    log = tmp_path / "serve.log"
    with open(log, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "coreepi", "serve", "--data-dir",
                                 str(tmp_path / "d"), "--port", str(port)], stdout=fh,
                                stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        time.sleep(0.5)
        assert '"GET /healthz HTTP/1.1" 200' in log.read_text()
    finally:
        proc.terminate()  # our own child, by its handle
        proc.wait(timeout=60)


def test_a_store_held_by_serve_names_the_server(tmp_path: Path) -> None:
    """#3: with `coreepi serve` holding the DuckDB store, list/report/token
    create say in one line who holds it and what to do (exit 2)."""
    data = tmp_path / "d"
    assert cli("store", "init", "--data-dir", str(data)).returncode == 0
    server = ServeProcess(["--data-dir", str(data)], tmp_path / "serve.log")
    try:
        for command in (["list"], ["report"], ["postmortem", "--since", "2024-05-20",
                                               "--until", "2024-05-22"], ["alerts", "list"],
                        ["token", "create", "--name", "x", "--scope", "read"]):
            done = cli(*command, "--data-dir", str(data))
            assert (done.returncode, done.stderr) == (2, (
                f"coreepi: error: the store {data} is open in coreepi serve (pid "
                f"{server.proc.pid}), and DuckDB lets one process open it: stop the server, "
                "or go through it: list, info, dump and debug take --server URL (read token), "
                "host drain --server URL (admin token); findings, groups, hosts and alerts "
                "are in its web UI and /api/v1; other commands need the server stopped\n")
                ), command
    finally:
        server.kill(15)


def test_agent_status_creates_nothing(tmp_path: Path) -> None:
    spool = tmp_path / "spool" / "deep"
    config = tmp_path / "capture.toml"
    config.write_text(f'spool_dir = "{spool}"\n')
    done = cli("agent", "status", "--config", str(config), "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["exists"] is False and status["queued"] == 0
    # text by default, as every other status command
    text = cli("agent", "status", "--config", str(config))
    assert (text.returncode, text.stdout) == (
        0, f"spool {spool}: does not exist yet (nothing captured)\n")
    assert not (tmp_path / "spool").exists()


def test_agent_status_text_counts_the_spool(tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    config = tmp_path / "capture.toml"
    config.write_text(f'spool_dir = "{spool}"\n[spool]\nmax_bytes = 104857600\n')
    (spool / "queue").mkdir(parents=True)
    (spool / "quarantine").mkdir()
    (spool / "quarantine" / "x.core").write_bytes(b"x")
    done = cli("agent", "status", "--config", str(config))
    assert (done.returncode, done.stdout) == (0, (
        f"spool {spool}\nqueued: 0 (0 pending analysis, 0 reported and awaiting their core)\n"
        "stuck: 0\nquarantined: 1\nspace: 0.0 MiB of a 100 MiB quota\n")), done.stderr


@pytest.mark.parametrize("text,reason", [
    (None, "no such file"),
    ("spool_dirr = '/x'\n", "unknown key 'spool_dirr'"),
    ("not = [toml\n", "not valid TOML"),
    ("spool_dir = 5\n", "spool_dir must be text (a quoted string), not int 5"),
])
@pytest.mark.parametrize("command", [["status"], ["install"]])
def test_agent_config_errors_are_one_line(tmp_path: Path, text: str | None, reason: str,
                                          command: list[str]) -> None:
    config = tmp_path / "capture.toml"
    if text is not None:
        config.write_text(text)
    done = cli("agent", "--config", str(config), *command)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"coreepi: error: {config}: {reason}"), done.stderr
    assert len(done.stderr.splitlines()) == 1 and not done.stdout


def test_telemetry_of_a_directory_or_a_core_says_it_is_not_a_log(
        tmp_path: Path, coreset: CoreSet) -> None:  # noqa: F811
    for given, reason in [(tmp_path, "is a directory, not a log file"),
                          (coreset.cores[0], "not a log: an ELF file (a core? coreepi inspect "
                                             "reads cores)"),
                          (tmp_path / "nope.log", "no such file")]:
        done = cli("telemetry", str(given))
        assert (done.returncode, done.stderr) == (2, f"coreepi: error: {given}: {reason}\n")
    log = tmp_path / "quiet.log"
    log.write_text("Jan  1 00:00:00 h kernel: nothing to see\n")
    quiet = cli("telemetry", str(log))
    assert (quiet.returncode, quiet.stderr) == (0, f"coreepi: {log}: no hardware events found\n")


def test_list_and_info_agree_on_an_unreadable_core(tmp_path: Path) -> None:
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    (crashes / "empty.core").write_bytes(b"")
    (crashes / "empty.json").write_text(json.dumps({"host_id": "h1",
                                                    "captured_at": "2024-05-03T10:00:00Z"}))
    data = str(tmp_path / "data")
    assert cli("ingest", str(crashes), "--data-dir", data).returncode == 0
    listed = cli("list", "--data-dir", data)
    head, row = listed.stdout.splitlines()
    assert row.split()[head.split().index("CORE")] == "unreadable", listed.stdout
    crash_id = json.loads(cli("list", "--json", "--data-dir", data).stdout)[0]["crash_id"]
    info = cli("info", crash_id, "--data-dir", data)
    core_line = next(line for line in info.stdout.splitlines() if line.startswith("core: "))
    assert core_line.startswith("core: unreadable, kept as received, 0 bytes (core unreadable: ")


def test_ingest_that_stores_nothing_fails(tmp_path: Path) -> None:
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "a.core").write_bytes(b"not a core at all")
    done = cli("ingest", str(junk), "--data-dir", str(tmp_path / "d" / "deep"))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "nothing ingested" in done.stderr
    # the store the failed ingest opened is gone again, its folders with it: a
    # later reader says "no store here" instead of reporting an empty one
    assert not (tmp_path / "d").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    again = cli("ingest", str(junk), "--data-dir", str(mine))
    assert again.returncode == 2 and "nothing ingested" in again.stderr
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    report = cli("report", "--data-dir", str(mine))
    assert report.returncode == 2 and "no coreepi store here" in report.stderr


@pytest.mark.parametrize("command", [
    [], ["inspect"], ["ingest"], ["report"], ["list"], ["info"], ["dump"], ["debug"],
    ["submit"], ["serve"], ["token", "create"], ["agent"], ["collect"], ["telemetry"],
    ["simulate"], ["demo"]])
def test_help_has_no_python_type_names(command: list[str]) -> None:
    done = cli(*command, "--help", env={"COLUMNS": "80"})
    assert done.returncode == 0, done.stderr
    types = r"<(path|str|int|float|bool|datetime|list\[\w+\]|(int|float) range)>|\{[A-Z_]+\}"
    assert not re.search(types, done.stdout, re.IGNORECASE), done.stdout
    assert all(len(line) <= 80 for line in done.stdout.splitlines())


@pytest.mark.parametrize("command", [
    ["serve", "--port", "0"], ["report"], ["list"], ["watch", "--once"], ["alerts", "list"],
    ["token", "create", "--scope", "read"], ["worker", "--once"], ["reanalyze"],
    ["export", "parquet", "out"], ["postmortem", "--since", "2024-05-20", "--until", "2024-05-22"]])
@pytest.mark.parametrize("option", ["--store", "--data-dir"])
def test_a_command_that_opens_a_store_never_makes_one(tmp_path: Path, command: list[str],
                                                      option: str) -> None:
    """Opening is not creating: before, `coreepi serve --store TYPO` made an
    empty store at TYPO and served it. Every command that opens a store says
    the same one line (only ingest, store init and store copy --to make one)."""
    from typer.testing import CliRunner

    from coreepi.cli.main import app

    typo = tmp_path / "sotre"
    done = CliRunner().invoke(app, [*command, option, str(typo)], env={
        k: None for k in ("COREEPI_STORE", "COREEPI_DATA_DIR", "COREEPI_BLOBS")})
    assert (done.exit_code, done.stdout) == (2, ""), done.output
    assert done.stderr == (f"coreepi: error: {typo}: no coreepi store here (create one with "
                           f"`coreepi store init {typo}`)\n")
    assert not typo.exists()
    made = CliRunner().invoke(app, ["store", "init", str(typo)])
    assert made.exit_code == 0 and made.stdout == f"store ready: {typo} (0 crashes)\n"
