"""Telemetry in the epidemiology, through the store: events join crashes by
host and time and become a host's attribution evidence; a GPU node whose
crashes follow Xid 79/48/94/95 is hardware-suspect; kernel-oops and hs_err
crashes share groups with native ones. Synthetic fleets with known answers
(plus real hs_err / kernel logs from tests/data/vendored)."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from testdata import vendored

from coreepi.epi import EpiConfig, analyze_fleet
from coreepi.ingest.run import ingest
from coreepi.model.events import EventKind, TelemetryEvent, event_id
from coreepi.model.fleet import ExposureInterval, HostRow
from coreepi.model.report import AnalysisInfo, CrashReport, Phenotype, SignalInfo, Signature, Source
from coreepi.store import CoreStatus, CrashRecord, DuckDBStore
from coreepi.reporting.phrases import evidence_text

T0 = datetime(2024, 1, 1, tzinfo=UTC)
DAYS = 60


def _crash(cid: str, host: str, at: datetime, sig: str, source: Source = Source.ELF_CORE,
           phenotypes: tuple[str, ...] = ()) -> CrashRecord:
    report = CrashReport(
        crash_id=cid, captured_at=at, host_id=host, source=source,
        signal=SignalInfo(number=11, name="SIGSEGV", si_code=1, si_code_name="SEGV_MAPERR"),
        signature=Signature(signature=sig),
        phenotypes=[Phenotype(name=p) for p in phenotypes],
        analysis=AnalysisInfo(analyzer_version="test"),
    )
    return CrashRecord(report, {}, CoreStatus.NOT_STORED)


def _event(host: str, at: datetime, kind: EventKind, component: str, summary: str,
           **detail: object) -> TelemetryEvent:
    return TelemetryEvent(event_id=event_id(host, at.isoformat(), kind, component), host_id=host,
                          ts=at, kind=kind, component=component, summary=summary,
                          hardware_indicative=True, detail=dict(detail),
                          severity="uncorrected")


def _fleet(store: DuckDBStore, hosts: int = 60) -> list[str]:
    names = [f"h-{i:03d}" for i in range(hosts)] + ["h-dimm", "gpu-3"]
    store.add_hosts(HostRow(h, {"gpu_model": "H100" if h.startswith("gpu") else ""}, i + 2)
                    for i, h in enumerate(names))
    store.add_exposure(ExposureInterval(h, T0, T0 + timedelta(days=DAYS), {}, i + 2)
                       for i, h in enumerate(names))
    # background: one software bug spread thinly over the fleet
    store.add_crashes(_crash(f"bg-{i}", names[i], T0 + timedelta(days=1 + i % 50, hours=i),
                             "std::vector::at | Service::handle")
                      for i in range(0, hosts, 2))
    return names


def _findings(store: DuckDBStore, days: float = 2.0):  # type: ignore[no-untyped-def]
    return analyze_fleet(store.crash_frame(), store.exposure_frame(), store.telemetry_frame(),
                         config=EpiConfig(telemetry_days=days))


def test_edac_errors_before_a_hosts_crashes_are_its_evidence(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "s") as store:
        _fleet(store)
        # 3 EDAC UE errors on DIMM_B2 at days 5, 20, 40; three crashes within 48 h after each
        # (9 crashes), two crashes far from any error: 9 of 11 crashes follow one.
        events, crashes = [], []
        for k, day in enumerate((5, 20, 40)):
            at = T0 + timedelta(days=day)
            events.append(_event("h-dimm", at, EventKind.EDAC_UE, "DIMM_B2",
                                 "EDAC MC0: 1 UE on DIMM_B2", dimm_label="DIMM_B2"))
            for j, hours in enumerate((2, 20, 40)):
                crashes.append(_crash(f"d-{k}-{j}", "h-dimm", at + timedelta(hours=hours),
                                      f"random_place_{k}_{j} | caller"))
        crashes.append(_crash("d-x1", "h-dimm", T0 + timedelta(days=12), "lonely_a | caller"))
        crashes.append(_crash("d-x2", "h-dimm", T0 + timedelta(days=30), "lonely_b | caller"))
        # an error AFTER the last crash does not count
        events.append(_event("h-dimm", T0 + timedelta(days=55), EventKind.EDAC_UE, "DIMM_B2",
                             "late"))
        store.add_crashes(crashes)
        store.add_events(events)
        findings = _findings(store)
    host = next(h for h in findings.hosts if h.host_id == "h-dimm")
    assert host.crashes == 11
    assert host.attribution.verdict == "hardware-suspect"
    assert host.telemetry is not None and host.telemetry.crashes_after_hardware_event == 9
    texts = [evidence_text(e) for e in host.attribution.evidence if e.kind == "telemetry"]
    assert texts, host.attribution.evidence
    assert "3 EDAC uncorrected errors on DIMM_B2 in the 48 h before 9 of its 11 crashes" in texts[0]
    # a host of the background bug: no telemetry evidence
    assert all(e.kind != "telemetry" for h in findings.hosts if h.host_id != "h-dimm"
               for e in h.attribution.evidence)


def test_gpu_node_whose_crashes_follow_xid_errors_is_hardware_suspect(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "s") as store:
        _fleet(store)
        crashes, events = [], []
        for k, code in enumerate((79, 48, 94, 95, 79, 48, 79, 94)):
            at = T0 + timedelta(days=3 + 6 * k)
            events.append(_event("gpu-3", at, EventKind.XID, "GPU 0000:3b:00.0",
                                 f"Xid {code}", code=code))
            crashes.append(_crash(f"g-{k}", "gpu-3", at + timedelta(minutes=5),
                                  "cudaStreamSynchronize | train_step"))
        # the same CUDA call crashes once elsewhere too (not a one-host signature only)
        crashes.append(_crash("g-other", "h-001", T0 + timedelta(days=9),
                              "cudaStreamSynchronize | train_step"))
        store.add_crashes(crashes)
        store.add_events(events)
        findings = _findings(store)
    host = next(h for h in findings.hosts if h.host_id == "gpu-3")
    assert host.attribution.verdict == "hardware-suspect", host.attribution
    text = next(evidence_text(e) for e in host.attribution.evidence if e.kind == "telemetry")
    assert "8 NVIDIA Xid errors on GPU 0000:3b:00.0" in text and "8 of its 8 crashes" in text
    group = next(g for g in findings.groups if g.key == "cudaStreamSynchronize | train_step")
    assert group.attribution.verdict == "hardware-suspect"


def test_without_telemetry_the_same_host_has_no_telemetry_evidence(tmp_path: Path) -> None:
    with DuckDBStore(tmp_path / "s") as store:
        _fleet(store)
        store.add_crashes(_crash(f"g-{k}", "gpu-3", T0 + timedelta(days=3 + 6 * k),
                                 "cudaStreamSynchronize | train_step") for k in range(8))
        findings = _findings(store)
    host = next(h for h in findings.hosts if h.host_id == "gpu-3")
    assert all(e.kind != "telemetry" for e in host.attribution.evidence)


def test_kernel_and_hs_err_crashes_share_groups_with_native_ones(tmp_path: Path) -> None:
    hs = vendored("jvm-hs_err-krashpad") / "dataset26.txt"  # SIGSEGV at 0x0: null-deref
    syz = vendored("kernel-oops-syzkaller") / "323"
    crashes = tmp_path / "crashes"
    crashes.mkdir()
    shutil.copy(hs, crashes / "hs_err_pid92333.log")
    (crashes / "hs_err_pid92333.log.json").write_text(
        json.dumps({"host_id": "h-002", "captured_at": "2024-01-10T00:00:00Z"}))
    (crashes / "console.log").write_text(syz.read_text(errors="replace").split("\n\n", 1)[1])
    (crashes / "console.log.json").write_text(
        json.dumps({"host_id": "h-003", "captured_at": "2024-01-11T00:00:00Z"}))
    with DuckDBStore(tmp_path / "s") as store:
        _fleet(store)
        # native null-derefs on other hosts, and native crashes with the kernel's title
        store.add_crashes(_crash(f"n-{i}", f"h-{10 + i:03d}", T0 + timedelta(days=10 + i),
                                 f"native_{i} | main", phenotypes=("null-deref",))
                          for i in range(6))
        summary = ingest([crashes], store, jobs=2, store_cores=False)
        assert summary.crashes_added == 2 and summary.follow_ons == 2  # 323: one crash
        frame = store.crash_frame()
        kernel_sig = frame.loc[frame["source"] == "kernel-oops", "signature"].iloc[-1]
        store.add_crashes(_crash(f"k-{i}", f"h-{20 + i:03d}", T0 + timedelta(days=20 + i),
                                 kernel_sig) for i in range(4))
        findings = _findings(store)
        frame = store.crash_frame()
    null = next(g for g in findings.groups if g.kind == "phenotype" and g.key == "null-deref")
    assert null.crashes == 7 and null.hosts == 7  # 6 native + 1 hs_err
    kernel = next(g for g in findings.groups if g.kind == "signature" and g.key == kernel_sig)
    n_kernel = int((frame["signature"] == kernel_sig).sum())
    assert kernel.crashes == n_kernel >= 5
    assert set(frame.loc[frame["signature"] == kernel_sig, "source"]) == {"kernel-oops",
                                                                        "elf-core"}
