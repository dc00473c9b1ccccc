"""The web UI tests' store: the synthetic fleet of test_report (known answers:
host h-017 is hardware-suspect, ``io_uring_submit | Ring::flush`` is
environment-triggered by kernel 6.1) plus one crash with a real core (gcc +
gdb's gcore) stored as a blob, filed under the environment-triggered group
on a kernel-6.1 host, ingested first so that it is the group's representative
crash — the one whose core the browser downloads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from test_epi_fleets import T0, make_fleet
from test_report import fill_store

from coreepi.ingest.artifacts import inspect_file
from coreepi.model.report import Signature
from coreepi.serve import create_token
from coreepi.store import CoreStatus, CrashRecord, open_store

BAD_HOST = "h-017"
ENV_GROUP = "io_uring_submit | Ring::flush"


@dataclass(frozen=True)
class UiStore:
    data_dir: Path
    read_token: str
    core_crash_id: str
    core_host: str
    core_path: Path
    admin_token: str = ""


def make_ui_store(data_dir: Path, core: Path, binary: Path) -> UiStore:
    """Fill ``data_dir`` (see the module docstring); returns what the tests need."""
    _, exposure, _ = make_fleet()
    host = sorted(exposure.loc[exposure["kernel"] == "6.1.0", "host_id"].unique())[0]
    report = inspect_file(core, exe=binary)[0]
    with open_store(data_dir) as store:
        key = store.put_blob(core)
        report = report.model_copy(update={
            "host_id": host, "captured_at": (T0 + timedelta(days=20, hours=3)).to_pydatetime(),
            "signature": Signature(signature=ENV_GROUP)})
        report.core.blob_key = key
        report.core.stored = True
        store.add_crashes([CrashRecord(report, {"app_version": "2.3.1"}, CoreStatus.STORED)])
        fill_store(store)
        token = create_token(store, ["read"], "ui-read")[1]
        admin = create_token(store, ["admin"], "ui-admin")[1]
    return UiStore(data_dir, token, report.crash_id, host, core, admin)
