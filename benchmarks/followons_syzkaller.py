"""Crashes per log after the follow-on rule, on syzkaller's console logs.

Each vendored syzkaller log is one crash by its ground truth (``TITLE:``).
Prints the reports :func:`coreepi.ingest.artifacts.inspect_file` finds, the
crashes :func:`coreepi.ingest.followons.split_follow_ons` keeps, and each
titled log that still gives more than one crash, with its crashes' titles and
follow-on counts. Run: ``.venv/bin/python benchmarks/followons_syzkaller.py``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from coreepi.errors import InputError
from coreepi.ingest.artifacts import inspect_file
from coreepi.ingest.followons import split_follow_ons

SYZ = Path(__file__).resolve().parents[1] / "tests" / "data" / "vendored" / "kernel-oops-syzkaller"


def main() -> None:
    logs = reports = crashes = titled = 0
    several: list[str] = []
    for path in sorted((p for p in SYZ.iterdir() if p.name.isdigit()), key=lambda p: int(p.name)):
        head, _, body = path.read_text(errors="replace").partition("\n\n")
        with tempfile.NamedTemporaryFile("w", suffix=".log") as tmp:
            tmp.write(body)
            tmp.flush()
            try:
                found = inspect_file(tmp.name)
            except InputError:  # a no-crash log not recognised as a kernel log (#15)
                continue
        incidents = split_follow_ons(found)
        logs += 1
        reports += len(found)
        crashes += len(incidents)
        if any(line.startswith("TITLE:") for line in head.splitlines()):
            titled += 1
            if len(incidents) > 1:
                several.append(f"{path.name}: " + "; ".join(
                    f"{i.report.artifact.title if i.report.artifact else '?'} (+{len(i.follow_ons)})"
                    for i in incidents))
    print(f"logs read {logs} ({titled} with one crash by their TITLE): {reports} reports, "
          f"{crashes} crashes stored; {len(several)} titled logs give more than one crash")
    print("\n".join(several))


if __name__ == "__main__":
    main()
