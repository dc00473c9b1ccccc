"""Follow-on kernel reports of one incident count as one crash (#23).

Real inputs: syzkaller's console logs (tests/data/vendored), each one crash
by its ground truth (``TITLE:``), whose later reports are follow-ons of the
first: ``329`` (14 paging-request oopses of one pid, then a bad usercopy),
``385`` (the hung-task detector's reports of one stall, repeated).
"""

from __future__ import annotations

import json
from pathlib import Path

from testdata import vendored

from coreepi.ingest.artifacts import inspect_file
from coreepi.ingest.followons import split_follow_ons
from coreepi.ingest.run import ingest
from coreepi.model.report import CrashReport
from coreepi.store import DuckDBStore

SYZ = vendored("kernel-oops-syzkaller")


def _body(name: str, dest: Path) -> Path:
    """The raw log of syzkaller test file ``name`` (its header lines cut) at ``dest``."""
    dest.write_text((SYZ / name).read_text(errors="replace").split("\n\n", 1)[1])
    return dest


class _Lines:
    def start(self, total: int) -> None:
        self.lines: list[str] = []

    def advance(self, path: str, outcome: str) -> None:
        self.lines.append(f"{Path(path).name}: {outcome}")


def test_repeated_oopses_of_one_log_are_follow_ons_of_the_first(tmp_path: Path) -> None:
    reports = inspect_file(_body("329", tmp_path / "329.log"))
    incidents = split_follow_ons(reports)
    assert len(reports) == 15
    assert [(i.report.artifact.title, len(i.follow_ons)) for i in incidents] == [
        ("BUG: unable to handle kernel paging request in bpf_prog_kallsyms_find", 13),
        ("BUG: bad usercopy", 0),
    ]
    assert incidents[0].report is reports[0]


def test_hung_task_reminders_are_one_stall(tmp_path: Path) -> None:
    reports = inspect_file(_body("385", tmp_path / "385.log"))
    incidents = split_follow_ons(reports)
    assert len(reports) == 10
    assert [(i.report.artifact.title, len(i.follow_ons)) for i in incidents] == [
        ("INFO: task hung in mount_bdev", 9)]


def test_a_new_boot_starts_a_new_incident(tmp_path: Path) -> None:
    """The same oops after the printk clock went back (a reboot) is a crash again."""
    reports = inspect_file(_body("329", tmp_path / "329.log"))[:2]
    second = reports[1]
    assert second.artifact is not None and second.artifact.kernel is not None
    second.artifact.kernel.uptime_seconds = 3.5
    assert [len(i.follow_ons) for i in split_follow_ons(reports)] == [0, 0]


def test_taint_d_makes_a_follow_on_of_the_first(tmp_path: Path) -> None:
    reports = inspect_file(_body("329", tmp_path / "329.log"))
    last = reports[-1]  # "BUG: bad usercopy", independent while not tainted D
    assert last.artifact is not None and last.artifact.kernel is not None
    last.artifact.kernel.taint = "D"
    incidents = split_follow_ons(reports)
    assert [len(i.follow_ons) for i in incidents] == [14]


def test_fleet_ingest_stores_one_crash_per_incident_and_says_so(tmp_path: Path) -> None:
    crashes = tmp_path / "fleet" / "crashes"
    crashes.mkdir(parents=True)
    (tmp_path / "fleet" / "hosts.csv").write_text("host_id\nk-07\nk-08\n")
    for name, host in (("329", "k-07"), ("385", "k-08")):
        _body(name, crashes / f"{name}.log")
        (crashes / f"{name}.log.json").write_text(
            json.dumps({"host_id": host, "captured_at": "2024-05-01T00:00:00Z"}))
    observer = _Lines()
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([tmp_path / "fleet"], store, store_cores=False, observer=observer)
        stored = store._query("SELECT host_id, signature, report FROM crashes "
                              "ORDER BY host_id, signature").fetchall()
    assert [(h, s) for h, s, _ in stored] == [
        ("k-07", "BUG: bad usercopy"),
        ("k-07", "BUG: unable to handle kernel paging request in bpf_prog_kallsyms_find"),
        ("k-08", "INFO: task hung in mount_bdev"),
    ]
    assert summary.crashes_added == 3 and summary.follow_ons == 22
    assert sorted(observer.lines) == [
        "329.log: 15 reports, 2 crashes: 13 follow-ons of the first (same boot)",
        "385.log: 10 reports, 1 crash: 9 follow-ons of the first (same boot)",
    ]
    assert ("22 kernel report(s) not counted: follow-ons of an earlier crash of the same log "
            "and boot") in str(summary)
    hung = CrashReport.model_validate_json(stored[2][2])
    assert hung.analysis.warnings[-1] == (
        "9 follow-on reports of this crash in the same log and boot, not counted as crashes "
        "(lines 28, 55, 85, 112, 252, 279, 306, 336, 363)")


def test_host_log_ingest_counts_one_crash_per_incident(tmp_path: Path) -> None:
    log = _body("385", tmp_path / "kern.log")
    with DuckDBStore(tmp_path / "store") as store:
        summary = ingest([], store, telemetry_logs=[(log, "k-08")])
        stored = store._query("SELECT signature FROM crashes").fetchall()
    assert stored == [("INFO: task hung in mount_bdev",)]
    assert summary.crashes_added == 1 and summary.follow_ons == 9
