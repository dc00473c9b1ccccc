"""A 1 GiB core through `collect` with bounded memory: peak RSS under 150 MB."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from capturekit import kernel_args, queued, report_of, write_config

PROBE = Path(__file__).parent / "rss_probe.py"
LIMIT_BYTES = 150 * 10**6


def test_one_gib_core_peak_rss_under_150_mb(tmp_path: Path) -> None:
    config = write_config(tmp_path)
    cmd = [sys.executable, "-m", "coreepi", "collect", "--config", str(config), "--",
           *kernel_args(comm="bigcore")]
    done = subprocess.run([sys.executable, str(PROBE), "1024", "--", *cmd],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)
    assert probe["status"] == 0
    [entry] = queued(tmp_path / "spool")
    core = report_of(entry)["core"]
    assert core["size_bytes"] == 1 << 30 and core["stored"] and not core["truncated"]
    assert probe["maxrss_kib"] * 1024 < LIMIT_BYTES, probe
    print(f"1 GiB through collect: peak RSS {probe['maxrss_kib'] / 1024:.0f} MiB, "
          f"{probe['seconds']:.1f} s, compressed to {core['compressed_size_bytes'] >> 20} MiB")
