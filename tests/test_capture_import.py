"""`coreepi collect --from-systemd-coredump` on a journal JSON fixture written
from systemd-coredump(8)'s field list, with a real zstd core as its stored core."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import zstandard
from capturekit import queued, report_of, write_config
from corefactory import Crash

FIXTURE = Path(__file__).parent / "data" / "systemd-coredump-journal.json"


def test_import_systemd_coredump(tmp_path: Path, get_crash: Callable[[str], Crash]) -> None:
    crash = get_crash("null_deref")
    stored = tmp_path / "core.null_deref.1000.abc.31337.1733036400000000.zst"
    stored.write_bytes(zstandard.ZstdCompressor().compress(crash.core.read_bytes()))
    journal = tmp_path / "journal.json"
    journal.write_text(FIXTURE.read_text().replace("@CORE_ZST@", str(stored)))
    config = write_config(tmp_path, collect={"edge_analysis_seconds": 120})
    argv = [sys.executable, "-m", "coreepi", "collect", "--config", str(config),
            "--from-systemd-coredump", "--journal-json", str(journal)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "imported 2, already imported 0, failed 0" in done.stdout
    reports = {r["process"]["pid"]: (r, e) for e in queued(tmp_path / "spool")
               for r in [report_of(e)]}
    first, entry = reports[31337]
    assert first["source"] == "systemd-coredump"
    assert first["host_id"] == "0f0e0d0c0b0a09080706050403020100"
    assert first["boot_id"] == "1234567890abcdef1234567890abcdef"
    assert first["captured_at"].startswith("2024-12-01T07:00:00")
    assert first["process"]["ppid"] == 31000 and first["process"]["uid"] == 1000
    assert first["process"]["exe"] == "/opt/app/null_deref"
    assert first["process"]["cmdline"] == ["/opt/app/null_deref", "--port", "8080"]
    assert first["process"]["container_id"] == "ab" * 32
    assert first["process"]["pod"] == "3f2a1b4c-5d6e-4f70-8a9b-0c1d2e3f4a5b"
    assert first["attributes"]["env.APP_VERSION"] == "3.1.4"
    assert first["attributes"]["env.systemd.package_version"] == "3.1.4-1"
    assert not any("DB_PASSWORD" in k for k in first["attributes"])
    assert first["core"]["stored"] and first["core"]["size_bytes"] == crash.core.stat().st_size
    with open(entry / "core.zst", "rb") as fh:
        assert zstandard.ZstdDecompressor().stream_reader(fh).read() == crash.core.read_bytes()
    assert first["signal"]["name"] == "SIGSEGV" and first["signature"]["signature"]

    second, entry2 = reports[4100]
    assert second["signal"]["number"] == 6 and second["signal"]["name"] == "SIGABRT"
    assert second["core"]["stored"] is False and "stored no core" in second["core"]["dropped_reason"]
    assert second["attributes"]["env.TZ"] == "UTC" and second["attributes"]["rlimit_core"] == 0
    assert not (entry2 / "core.zst").exists()

    # a second run imports nothing new
    done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert "imported 0, already imported 2" in done.stdout
    assert len(queued(tmp_path / "spool")) == 2
    state = json.loads((tmp_path / "spool" / "state" / "systemd-coredump.json").read_text())
    assert len(state["imported"]) == 2
