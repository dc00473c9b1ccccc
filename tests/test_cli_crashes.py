"""`coreepi list | info | dump | debug` on a store of real cores ingested by
the CLI, and the same commands against `coreepi serve` on 127.0.0.1: one
code path, two sources. `debug` runs gdb non-interactively (-batch -ex bt)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from clikit import CliFleet, cli, coreepi_argv, in_pty, make_cli_fleet
from fleetfactory import CoreSet, coreset  # noqa: F401
from servekit import ServeProcess

from coreepi.cli.listing import VERDICTS
from coreepi.epi.models import Verdict


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, coreset: CoreSet) -> CliFleet:  # noqa: F811
    return make_cli_fleet(tmp_path_factory.mktemp("clifleet"), coreset)


def rows(fleet: CliFleet, *args: str, env: dict[str, str] | None = None) -> list[dict]:
    done = cli("list", "--json", *args, env=(env or {"COREEPI_DATA_DIR": str(fleet.data)}))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_list_filters_and_orders(fleet: CliFleet) -> None:
    every = rows(fleet)
    assert len(every) == 6
    times = [r["captured_at"] for r in every]
    assert times == sorted(times) and times[0].startswith("2024-01-02T10:00")
    assert {r["host_id"] for r in every} == {"h1", "h2", "h3"}
    assert all(r["core_status"] == "stored" and r["signal"] == "SIGSEGV" for r in every)
    assert [r["host_id"] for r in rows(fleet, "--host", "h2")] == ["h2", "h2"]
    since = rows(fleet, "--since", "2024-01-05", "--until", "2024-01-07")
    assert [r["captured_at"][:10] for r in since] == ["2024-01-05", "2024-01-06"]
    last = rows(fleet, "--limit", "2")
    assert [r["crash_id"] for r in last] == [r["crash_id"] for r in every[-2:]]
    assert len(rows(fleet, "--phenotype", "null-deref")) == 6
    assert rows(fleet, "--phenotype", "stack-misaligned") == []
    signature = every[0]["signature"]
    assert signature and len(rows(fleet, "--signature", signature)) == 6


def test_list_by_verdict_uses_the_reports_findings(fleet: CliFleet) -> None:
    assert VERDICTS == Verdict.__args__  # type: ignore[attr-defined]
    found = {v: rows(fleet, "--verdict", v) for v in VERDICTS}
    # six crashes of one signature spread over three hosts: one group, one verdict
    assert sum(len(v) for v in found.values()) >= 6
    assert not found["hardware-suspect"]
    for listed in found.values():
        assert all(r["verdicts"] for r in listed)
    bad = cli("list", "--verdict", "broken", "--data-dir", str(fleet.data))
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "hardware-suspect" in bad.stderr


def test_list_text_fits_80_columns_and_ids_resolve(fleet: CliFleet) -> None:
    done = cli("list", "--data-dir", str(fleet.data))
    lines = done.stdout.splitlines()
    assert lines[0].split()[:3] == ["TIME", "(UTC)", "CRASH"]
    assert len(lines) == 7
    short = lines[1].split()[2]
    assert len(short) == 12
    first = rows(fleet)[0]
    assert first["crash_id"].startswith(short)
    # a terminal of 80 columns: every line fits (the signature is cut with …)
    out = in_pty(["list", "--data-dir", str(fleet.data), "--no-pager"], cols=80)
    assert out.strip() and all(len(line) <= 80 for line in out.splitlines()), out
    info = cli("info", short[:8], "--data-dir", str(fleet.data))
    assert info.returncode == 0, info.stderr
    assert f"crash: {first['crash_id']}" in info.stdout
    assert "host: h1" in info.stdout and "core: stored" in info.stdout
    assert "SIGSEGV" in info.stdout and "crashing thread" in info.stdout
    unknown = cli("info", "ffff0000", "--data-dir", str(fleet.data))
    assert unknown.returncode == 2 and "no crash with this id" in unknown.stderr


def test_info_all_threads_and_registers(fleet: CliFleet) -> None:
    first = rows(fleet)[0]["crash_id"]
    done = cli("info", first, "--registers", "--all-threads", "--data-dir", str(fleet.data),
               env={"COLUMNS": "100"})
    assert done.returncode == 0, done.stderr
    assert "registers" in done.stdout
    assert " rip 0x" in done.stdout and " rsp 0x" in done.stdout
    assert "{'" not in done.stdout and "[{" not in done.stdout  # no Python reprs


def test_dump_gives_the_original_core(fleet: CliFleet, tmp_path: Path) -> None:
    listed = rows(fleet)
    originals = list(fleet.cores.items())  # in time order, as listed
    for row, (name, original) in zip(listed[:2], originals[:2], strict=True):
        out = tmp_path / f"{name}.core"
        done = cli("dump", row["crash_id"], "-o", str(out), "--data-dir", str(fleet.data))
        assert done.returncode == 0, done.stderr
        assert out.read_bytes() == original.read_bytes(), name  # .zst decompressed
        assert not out.with_name(out.name + ".part").exists()
    with open(tmp_path / "piped", "wb") as fh:  # stdout that is not a terminal
        piped = subprocess.run(
            [*coreepi_argv(), "dump", listed[1]["crash_id"], "--data-dir", str(fleet.data)],
            stdout=fh, stderr=subprocess.PIPE, timeout=120, check=False)
    assert piped.returncode == 0, piped.stderr
    assert (tmp_path / "piped").read_bytes() == originals[1][1].read_bytes()
    tty = in_pty(["dump", listed[0]["crash_id"], "--data-dir", str(fleet.data)])
    assert "refusing to write a core to a terminal" in tty and "\x7fELF" not in tty


def test_debug_runs_gdb_with_the_files_found_by_build_id(fleet: CliFleet) -> None:
    if shutil.which("gdb") is None:
        pytest.skip("gdb is not installed")
    crash = rows(fleet)[1]["crash_id"]  # a zstd-compressed core
    done = cli("debug", crash, "--data-dir", str(fleet.data), "--", "-batch", "-ex", "bt",
               "-ex", "info sharedlibrary")
    assert done.returncode == 0, done.stderr
    assert "renamed-crasher" in done.stderr  # found under symbols/ by build-id, not by name
    assert "#0" in done.stdout and "main" in done.stdout, done.stdout
    assert "crasher.c" in done.stdout  # the binary's DWARF: file and line
    assert "libc.so" in done.stdout
    also = cli("debug", crash, "--data-dir", str(fleet.data), "--gdb-args", "-batch -ex bt")
    assert also.returncode == 0 and "main" in also.stdout


# -- the same commands against a server on 127.0.0.1


@pytest.fixture(scope="module")
def server(fleet: CliFleet, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[str, str]]:
    root = tmp_path_factory.mktemp("cliserve")
    data = root / "data"
    shutil.copytree(fleet.data, data)
    made = cli("token", "create", "--scope", "read", "--data-dir", str(data))
    assert made.returncode == 0, made.stderr
    running = ServeProcess(["--data-dir", str(data)], root / "serve.log")
    try:
        yield running.url, made.stdout.strip()
    finally:
        running.kill()
        running.log.close()


def test_server_source_agrees_with_the_store(fleet: CliFleet, server: tuple[str, str],
                                             tmp_path: Path) -> None:
    url, token = server
    remote = {"COREEPI_SERVER": url, "COREEPI_TOKEN": token}
    local = rows(fleet)
    assert [r["crash_id"] for r in rows(fleet, env=remote)] == [r["crash_id"] for r in local]
    assert [r["host_id"] for r in rows(fleet, "--host", "h3", env=remote)] == ["h3", "h3"]
    crash = local[1]["crash_id"]
    info = cli("info", crash[:10], env=remote)
    assert info.returncode == 0 and f"crash: {crash}" in info.stdout, info.stderr
    out = tmp_path / "core"
    dumped = cli("dump", crash, "-o", str(out), env=remote)
    assert dumped.returncode == 0, dumped.stderr
    assert out.read_bytes() == list(fleet.cores.values())[1].read_bytes()
    if shutil.which("gdb"):
        bt = cli("debug", crash, "--symbol-dir", str(fleet.fleet / "symbols"), "--gdb-args",
                 "-batch -ex bt", env=remote)
        assert bt.returncode == 0 and "crasher.c" in bt.stdout, bt.stderr
    # a missing or wrong token: one line that says what to do
    anonymous = cli("list", "--server", url)
    assert anonymous.returncode == 2 and anonymous.stderr.count("\n") == 1
    assert "401" in anonymous.stderr and "COREEPI_TOKEN" in anonymous.stderr
    tokfile = tmp_path / "token"
    tokfile.write_text(token + "\n")
    assert cli("list", "--server", url, "--token-file", str(tokfile)).returncode == 0
    gone = cli("list", "--server", "http://127.0.0.1:9", env={"COREEPI_TOKEN": token})
    assert gone.returncode == 2 and "cannot reach the server" in gone.stderr
    # a read token cannot submit: the missing scope said once
    report = tmp_path / "r.json"
    report.write_text(cli("inspect", str(list(fleet.cores.values())[0]), "--json",
                          "--host-id", "h1").stdout)
    denied = cli("submit", str(report), "--server", url, env={"COREEPI_TOKEN": token})
    assert denied.returncode == 2 and denied.stderr.count("\n") == 1, denied.stderr
    assert "lacks the 'ingest' scope" in denied.stderr and denied.stderr.count("scope") == 1


def test_inspect_json_crash_id_depends_on_host_and_time(fleet: CliFleet) -> None:
    # a fresh user inspected one core for node-1, then node-2 (a mistyped host, then the
    # right one): both got one id, and the server refused the second submit as a
    # conflicting re-send. The id now follows host and capture time, as ingest's does.
    core = str(list(fleet.cores.values())[0])

    def crash_id(*args: str) -> str:
        done = cli("inspect", core, "--json", *args)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)["crash_id"]

    bare = crash_id()
    one = crash_id("--host-id", "node-1", "--captured-at", "2024-05-01T00:00:00Z")
    assert one == crash_id("--host-id", "node-1", "--captured-at", "2024-05-01T00:00:00Z")
    others = {crash_id("--host-id", "node-2", "--captured-at", "2024-05-01T00:00:00Z"),
              crash_id("--host-id", "node-1", "--captured-at", "2024-05-02T00:00:00Z"),
              crash_id("--host-id", "node-1")}
    assert len({bare, one, *others}) == 5
