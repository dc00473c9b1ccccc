"""A crash's stored artifact named by what it is — a core, a kernel log, an
hs_err log — on the crash page, in the download API (``…/artifact`` and its
first name ``…/core``) and in ``coreepi list | info | dump | debug``; the
page's phenotype evidence in words; a kernel log's frames shown as read from
the log; the host evidence's telemetry count says which events it counts.

Real inputs: a syzkaller kernel log and a krashpad hs_err log (tests/data/vendored)
ingested from a fleet directory into a DuckDB store, served in-process."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import zstandard
from fastapi.testclient import TestClient
from testdata import vendored
from typer.testing import CliRunner

from coreepi.cli.main import app as cli_app
from coreepi.epi.models import Evidence, Tally, TelemetryLead
from coreepi.ingest.run import ingest
from coreepi.model.report import FrameTrust
from coreepi.reporting.artifact_kind import LOG_TRUST, frame_trust_text
from coreepi.reporting.crash_text import evidence_items
from coreepi.reporting.phrases import evidence_text
from coreepi.serve import ServeConfig, create_app, create_token
from coreepi.store import DuckDBStore

SYZ = vendored("kernel-oops-syzkaller")
HS_ERR = vendored("jvm-hs_err-krashpad")


@dataclass
class Logs:
    data: Path
    cli_data: Path  # a copy: the served store holds DuckDB's lock on its own
    kernel_id: str
    hs_err_id: str
    kernel_text: bytes
    hs_err_text: bytes


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Logs:
    root = tmp_path_factory.mktemp("logs")
    crashes = root / "fleet" / "crashes"
    crashes.mkdir(parents=True)
    (root / "fleet" / "hosts.csv").write_text("host_id\nh1\nh2\n")
    shutil.copy(HS_ERR / "dataset23.txt", crashes / "hs_err_pid25779.log")
    (crashes / "hs_err_pid25779.log.json").write_text(
        json.dumps({"host_id": "h1", "captured_at": "2024-01-02T00:00:00Z"}))
    # a syzkaller test file from its third report on: the first two are corrupted
    # (and the third, their follow-on, would not be counted); this one is whole
    text = (SYZ / "323").read_text(errors="replace")
    start = text.index("general protection fault: 0000 [#3]")
    body = text[text.rindex("\n", 0, start) + 1:]
    (crashes / "console.log").write_text(body)
    (crashes / "console.log.json").write_text(
        json.dumps({"host_id": "h2", "captured_at": "2024-01-03T00:00:00Z"}))
    with DuckDBStore(root / "store") as store:
        ingest([root / "fleet"], store, jobs=1)
        # one report, one crash
        got = dict(store._query(
            "SELECT source, min(crash_id) FROM crashes GROUP BY source").fetchall())
    shutil.copytree(root / "store", root / "cli")
    return Logs(root / "store", root / "cli", got["kernel-oops"], got["hs_err"],
                (crashes / "console.log").read_bytes(),
                (crashes / "hs_err_pid25779.log").read_bytes())


@pytest.fixture(scope="module")
def client(logs: Logs) -> Iterator[TestClient]:
    store = DuckDBStore(logs.data)
    token = create_token(store, ["read"])[1]
    served = create_app(store, ServeConfig(findings_debounce_seconds=0.05))
    c = TestClient(served, headers={"authorization": f"Bearer {token}"})
    yield c
    served.state.findings.close()
    store.close()


@pytest.mark.parametrize(("which", "kind", "name"), [
    ("kernel_id", "kernel log", "{id}.kernel.log.zst"),
    ("hs_err_id", "hs_err log", "hs_err_{id}.log.zst"),
])
def test_a_log_is_offered_as_the_log_it_is(client: TestClient, logs: Logs, which: str,
                                           kind: str, name: str) -> None:
    crash_id = getattr(logs, which)
    filename = name.format(id=crash_id)
    data = client.get(f"/crashes/{crash_id}.json").json()
    art = data["artifact"]
    assert art["kind"] == kind and art["filename"] == filename
    assert art["gdb_command"] is None
    assert art["read_command"] == f"zstd -dc {filename} | less"
    html = client.get(f"/crashes/{crash_id}").text
    assert f"Download the {kind}</a>" in html and filename in html
    assert "gdb" not in html and ".core" not in html and "Download the core" not in html
    original = logs.kernel_text if which == "kernel_id" else logs.hs_err_text
    for path in ("artifact", "core"):  # …/core: the endpoint's first name, kept
        r = client.get(f"/api/v1/crashes/{crash_id}/{path}")
        assert r.status_code == 200, r.text
        assert r.headers["content-disposition"] == f'attachment; filename="{filename}"'
        assert "x-gdb-command" not in r.headers
        assert zstandard.ZstdDecompressor().stream_reader(r.content).read() == original
    assert client.get(f"/api/v1/crashes/{'0' * 32}/artifact").status_code == 404


def test_page_evidence_is_in_words(client: TestClient, logs: Logs) -> None:
    data = client.get(f"/crashes/{logs.kernel_id}.json").json()
    [pheno] = [p for p in data["crash"]["phenotypes"] if p["name"] == "kernel-fault"]
    assert pheno["evidence"]["corrupted"] is False and pheno["evidence"]["corrupted_reason"] is None
    words = dict(map(tuple, data["evidence"][data["crash"]["phenotypes"].index(pheno)]))
    assert words["corrupted"] == "no" and words["tainted"] == "yes" and words["pid"] == "0"
    assert "corrupted_reason" not in words and "modules_linked_in" not in words
    html = client.get(f"/crashes/{logs.kernel_id}").text
    section = html[html.index('id="phenotypes"'):html.index('id="threads"')]
    for repr_ in (">False<", ">True<", ">None<", ">[]<", "corrupted_reason"):
        assert repr_ not in section
    assert "<code>no</code>" in section


def test_kernel_frames_are_from_the_log(client: TestClient, logs: Logs) -> None:
    data = client.get(f"/crashes/{logs.kernel_id}.json").json()
    frames = data["crash"]["threads"][data["crashed_thread"]]["frames"]
    assert len(frames) >= 3 and data["frame_trust"] == "log"
    # the report's own (schema 1.4.0): the call trace "log", a RIP/pc line's frame 0 the
    # register dump's pc ("context"); the page says "from the log" for both
    assert {f["trust"] for f in frames[1:]} == {"log"}
    assert frames[0]["trust"] in ("log", "context")
    html = client.get(f"/crashes/{logs.kernel_id}").text
    threads = html[html.index('id="threads"'):html.index('id="modules"')]
    assert threads.count(">from the log</span>") == len(frames)
    assert ">cfi<" not in threads and ">context<" not in threads
    assert "unreliable" in threads  # the note says the "?" frames are left out
    # an hs_err log's frames keep the JVM walker's trust
    hs = client.get(f"/crashes/{logs.hs_err_id}").text
    assert ">frame-pointer</span>" in hs and "from the log" not in hs


def test_frame_trust_words_old_and_new_reports() -> None:
    # a kernel log stored before schema 1.4.0 says context/cfi: still "log"
    assert frame_trust_text("kernel-oops", "cfi") == LOG_TRUST == FrameTrust.LOG
    assert frame_trust_text("kernel-oops", "log") == "log"
    assert frame_trust_text("elf-core", "cfi") == "cfi"


def run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli_app, list(args))
    return result.exit_code, result.output


def test_cli_names_the_log(logs: Logs, tmp_path: Path) -> None:
    where = ("--data-dir", str(logs.cli_data))
    code, out = run("info", logs.kernel_id[:10], *where)
    assert code == 0, out
    assert "artifact: kernel log stored (coreepi dump)" in out and "core:" not in out
    assert "corrupted: no" in out and "corrupted_reason" not in out
    assert "│ log " in out and "cfi" not in out
    code, out = run("info", logs.hs_err_id[:10], *where)
    assert code == 0 and "artifact: hs_err log stored, " in out and "coreepi debug" not in out
    code, out = run("dump", logs.kernel_id, "-o", str(tmp_path / "k.log"), *where)
    assert code == 0, out
    assert out == (f"coreepi: wrote {tmp_path / 'k.log'} ({len(logs.kernel_text):,} bytes), "
                   f"the kernel log of crash {logs.kernel_id}\n")
    assert (tmp_path / "k.log").read_bytes() == logs.kernel_text
    code, out = run("debug", logs.hs_err_id, *where)
    assert code == 2 and out == (f"coreepi: error: crash {logs.hs_err_id} came from a hs_err "
                                 f"log, not a core: nothing to debug in gdb (coreepi dump "
                                 f"{logs.hs_err_id} writes the hs_err log)\n")
    code, out = run("list", "--no-pager", *where)
    lines = out.splitlines()
    assert code == 0 and lines[0].split()[5] == "CORE"
    assert [line.split()[5] for line in lines[1:]] == ["log"] * (len(lines) - 1) >= ["log"] * 2


def test_evidence_items_keep_no_and_zero_leave_out_empties() -> None:
    items = evidence_items({"corrupted": False, "pid": 0, "why": None, "mods": [], "t": "",
                            "up": 892.583887, "long": "x" * 200})
    assert items == [("corrupted", "no"), ("pid", "0"), ("up", "892.6"),
                     ("long", "x" * 159 + "…")]
    assert evidence_items({"long": "x" * 200}, max_chars=None) == [("long", "x" * 200)]


def test_telemetry_evidence_says_which_events_it_counts() -> None:
    """The demo's h-086: 11 MCEs in the report window, 10 in the 7 days before a
    crash; the sentence must not call the 10 "the events in the window"."""
    e = Evidence(kind="telemetry", supports="hardware-suspect", strength=15.0, host_ids=["h-086"],
                 observed=44, total=45, tallies=[Tally(name="mce", count=10)], window_days=7.0,
                 lead=TelemetryLead(event_kind="mce", component="cpu 7 bank 0", events=10))
    assert evidence_text(e) == (
        "host h-086: 10 machine checks on cpu 7 bank 0 in the 7 days before 44 of its 45 "
        "crashes (only events in the 7 days before a crash count: 10 mce)")
    no_lead = e.model_copy(update={"lead": None, "window_days": 1.0})
    assert evidence_text(no_lead) == (
        "host h-086: 44 of 45 crashes within 1 day after a hardware event (only events in "
        "the 24 h before a crash count: 10 mce)")


def test_every_source_has_an_artifact_kind() -> None:
    from coreepi.model.report import Source
    from coreepi.reporting.artifact_kind import artifact_kind

    kinds = {s.value: artifact_kind(s.value) for s in Source}
    assert {s for s, k in kinds.items() if k.debuggable} == {"elf-core", "systemd-coredump"}
    assert {s: k.short for s, k in kinds.items()} == {
        "elf-core": "yes", "systemd-coredump": "yes", "hs_err": "log", "kernel-oops": "log",
        "minidump": "minidump"}
    assert kinds["minidump"].filename("ab", ".zst") == "ab.dmp.zst"
    assert kinds["hs_err"].title == "hs_err log" and kinds["kernel-oops"].title == "Kernel log"
