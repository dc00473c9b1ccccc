"""Hardware telemetry lines from the wild (tests/data/telemetry-wild/, sources
in tests/data/NOTICE): Xen's console machine checks, pre-2.6.32 kernels'
unprefixed ones, skx_edac's MCE print, ghes_edac locations, old k8_edac lines,
rasdaemon's `ras-mc-ctl --errors` of AMD SMCA banks and its syslog lines.
Expected values are read off the lines by hand (see each file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from coreepi.model.events import TelemetryEvent
from coreepi.parse.telemetry.logs import parse_telemetry

WILD = Path(__file__).resolve().parent / "data" / "telemetry-wild"


def events(name: str) -> list[TelemetryEvent]:
    return list(parse_telemetry(WILD / name, host_id="h1"))


def summary(event: TelemetryEvent, *keys: str) -> tuple[object, ...]:
    return (event.kind.value, event.severity, event.component,
            *(event.detail.get(k) for k in keys))  # fmt: skip


def test_xen_console_polled_machine_checks() -> None:
    got = [summary(e, "source", "cpu", "bank", "status") for e in events("xen-3.0.3-opteron-polled.log")]
    banks = [(2, "0xd400400000000813"), (4, "0x9410400100000813"), (4, "0x9410400000000a13"),
             (2, "0xd000400000000863"), (0, "0x8410400000000833"), (0, "0x8408400000000833")]
    assert got == [("mce", "corrected", f"cpu 1 bank {bank}", "xen", 1, bank, status)
                   for bank, status in banks]  # fmt: skip
    first = events("xen-3.0.3-opteron-polled.log")[0]
    assert first.host_id == "h1" and first.source.endswith(":11-12")
    assert first.detail["reported_as"] == "polled" and first.detail["exception"] is False


def test_linux_2_5_polled_status_without_val_takes_the_heads_word() -> None:
    got = [summary(e, "source", "status", "valid") for e in events("linux-2.5-nonfatal-polled.log")]
    assert got == [
        ("mce", "corrected", "cpu 0 bank 0", "kernel", "0x1000000000000000", False),
        # UC and PCC set but VAL clear: the bits mean nothing, the head says "correctable"
        ("mce", "corrected", "cpu 0 bank 4", "kernel", "0x2200000000000011", False),
    ]


def test_linux_2_4_exception_with_a_level_marked_bank_line() -> None:
    (event,) = events("linux-2.4-p4-exception.log")
    assert summary(event, "exception", "mcg_status", "status", "pcc") == (
        "mce", "fatal", "cpu 3 bank 0", True, "0x4", "0xb20000001040080f", True)


def test_linux_2_6_x86_64_one_line_record_with_rip_and_address() -> None:
    (event,) = events("linux-2.6-x86_64-exception.log")
    assert summary(event, "mcg_status", "status", "addr", "tsc", "rip", "rip_symbol") == (
        "mce", "uncorrected", "cpu 0 bank 3", "0x7", "0xb40000000000083b", "0xfdfc000cfe",
        "0x189fe311d3f", "10:0xffffffff802c04ee", "pci_conf1_read+0xbe/0x110")
    assert event.uptime_seconds == pytest.approx(847.745921)


def test_skx_edac_machine_check_print_and_its_dimm() -> None:
    got = events("linux-5.14-skx-edac-ghes-uc.log")
    skx = [summary(e, "bank", "status", "addr", "misc", "socket", "cpuid")
           for e in got if e.detail.get("source") == "skx_edac"]  # fmt: skip
    assert skx == [
        ("mce", "uncorrected", "cpu 0 bank 25", 25, "0xac00000200a00090", "0x7e025e400",
         "0x9000201d809c086", 0, "0x606a6"),
        ("mce", "uncorrected", "cpu 0 bank 255", 255, "0xb40000000000009f", "0x7e025e400", "0x0",
         0, "0x606a6"),
    ]
    edac = [summary(e, "socket", "imc", "channel", "dimm", "physical_address")
            for e in got if e.kind.value == "edac_ue" and e.detail.get("source") != "ghes"]
    assert edac == [("edac_ue", "uncorrected", "CPU_SrcID#0_MC#3_Chan#0_DIMM#0", 0, 3, 0, 0,
                     "0x7e025e400")] * 2
    # the GHES record of the same error (physical address 0x7e025e400, 15 lines
    # before the first EDAC line) is folded into it: one error, one event
    assert not [e for e in got if e.detail.get("source") == "ghes"]
    assert [e.kind.value for e in got].count("edac_ue") == 2
    ghes = list(parse_telemetry([x for x in (WILD / "linux-5.14-skx-edac-ghes-uc.log")
                                 .read_text().splitlines() if "{1}[Hardware Error]" in x]))
    assert [(e.kind.value, e.component) for e in ghes] == [("edac_ue", "NODE 3 CPU0_DIMM_G1")]


def test_a_ghes_record_folded_into_an_edac_line_keeps_its_dimm_location() -> None:
    # the GHES record names the board's slot ("DIMM location: NODE 3 CPU0_DIMM_G1"), the
    # EDAC line skx_edac's label: folded, the slot was lost with the record
    got = events("linux-5.14-skx-edac-ghes-uc.log")
    assert [e.kind.value for e in got] == ["edac_ue", "mce", "sigbus_mce", "edac_ue", "mce"]
    first, second = [e for e in got if e.kind.value == "edac_ue"]
    assert first.summary == ("1 uncorrected memory error on CPU_SrcID#0_MC#3_Chan#0_DIMM#0 "
                             "(EDAC MC3): memory read error; also named NODE 3 CPU0_DIMM_G1 "
                             "(APEI)")
    assert first.detail["also_dimm"] == ["NODE 3 CPU0_DIMM_G1"]
    assert first.component == "CPU_SrcID#0_MC#3_Chan#0_DIMM#0"
    assert "also_dimm" not in second.detail  # the second error had no GHES record


def test_an_edac_line_folded_into_a_ghes_record_gives_it_the_label() -> None:
    # the other order: the GHES record closes (a line of another kind, more than a record's
    # gap later) before the EDAC line of the same address comes; the record is kept and
    # takes the EDAC label; "DIMM location: not present." names nothing to add
    lines = (WILD / "linux-5.14-skx-edac-ghes-uc.log").read_text().splitlines()
    record = [x for x in lines if "{1}[Hardware Error]" in x]
    edac = next(x for x in lines if "EDAC MC3: 1 UE" in x)
    poisoned = "[   77.575445] Memory failure: 0x7e025e: already hardware poisoned"
    (event,) = parse_telemetry([*record, *[poisoned] * 9, edac])
    assert (event.detail["source"], event.component) == ("ghes", "NODE 3 CPU0_DIMM_G1")
    assert event.summary.endswith("; also named CPU_SrcID#0_MC#3_Chan#0_DIMM#0 (EDAC)")
    (chipkill,) = events("linux-5.16-ghes-edac-chipkill.log")
    assert "also_dimm" not in chipkill.detail and "also named" not in chipkill.summary


def test_ghes_edac_spaced_location_and_no_dimm_label() -> None:
    # ghes_edac's EDAC line and the GHES record it came from: one error, one event
    (edac,) = events("linux-5.16-ghes-edac-chipkill.log")
    assert summary(edac, "socket", "node", "card", "module", "rank", "bank", "row",
                   "physical_address", "dimm_label") == (
        "edac_ce", "corrected", "MC0 node 0 card 0 module 0", 0, 0, 0, 0, 0, 513, 4887,
        "0x898b86020", None)
    # "DIMM location: not present." names no DIMM: node/card/module do
    (ghes,) = parse_telemetry([x for x in (WILD / "linux-5.16-ghes-edac-chipkill.log")
                               .read_text().splitlines() if "{2}[Hardware Error]" in x])
    assert (ghes.kind.value, ghes.severity, ghes.component) == (
        "edac_ce", "corrected", "node 0 card 0 module 0")


def test_ghes_and_edac_of_two_addresses_stay_two_errors() -> None:
    # the real lines, the EDAC line's page moved: two errors, two events; and
    # the same error again (each first print takes one echo) counts again
    lines = (WILD / "linux-5.16-ghes-edac-chipkill.log").read_text().splitlines()
    moved = [lines[0].replace("page:0x898b86 ", "page:0x898b87 "), *lines[1:]]
    got = list(parse_telemetry(moved))
    assert [(e.kind.value, e.detail["source"]) for e in got] == [
        ("edac_ce", "kernel"), ("edac_ce", "ghes")]
    twice = list(parse_telemetry(lines + lines))
    assert [e.detail["source"] for e in twice] == ["kernel", "kernel"]


def test_old_k8_edac_line_and_driver_chatter() -> None:
    (event,) = events("linux-2.6-k8-edac-old-format.log")  # the "EDAC k8 MC1:" lines are not events
    assert summary(event, "page", "offset", "grain", "syndrome", "row", "dimm_label") == (
        "edac_ce", "corrected", "MC1 channel 1", 0xcc9db, 0xd38, 8, 0x80, 0, None)


@pytest.mark.parametrize("name, count", [("rasdaemon-0.8-amd-zen-umc-errors.txt", 3),
                                         ("rasdaemon-telegraf-amd-umc-mca-text.txt", 2)])
def test_ras_mc_ctl_amd_smca_records(name: str, count: int) -> None:
    got = events(name)
    assert len(got) == count
    for event in got:
        assert summary(event, "cpu", "bank", "bank_name", "cpu_vendor", "memory_channel",
                       "flags") == (
            "mce", "corrected", "cpu 2 bank 17", 2, 17, "Unified Memory Controller", "AMD", 0,
            ["CECC"])
        assert "error_class" not in event.detail  # Intel's MCA code classes do not apply to AMD
    assert [e.detail["csrow"] for e in got] == ([1] * 3 if count == 3 else [2, 2])
    assert got[0].ts is not None and got[0].ts.isoformat() == (
        "2024-12-19T03:52:38+00:00" if count == 3 else "2026-08-24T01:41:13+00:00")


def test_rasdaemon_syslog_mce_records() -> None:
    got = events("rasdaemon-syslog-mce-record.log")
    assert [summary(e, "source", "cpu", "bank", "status", "addr", "socket", "apic") for e in got] == [
        ("mce", "corrected", "cpu 1 bank 2", "rasdaemon-syslog", 1, 2, "0x9400000000000000",
         "0x1234", 1, 0x20),
        ("mce", "corrected", "cpu 0 bank 1", "rasdaemon-syslog", 0, 1, "0x9400000000000000",
         "0xabcd", 0, 0),
    ]
    assert [e.ts.isoformat() for e in got if e.ts] == ["2024-05-16T17:21:24+00:00",
                                                       "2024-05-16T22:23:24+00:00"]


def test_capability_banners_are_not_events() -> None:
    lines = [
        "(XEN) mce_intel.c:780: MCA Capability: firstbank 0, extended MCE MSR 0, BCAST, SER, CMCI",
        "(XEN) CMCI: threshold 0x2 too large for CPU0 bank 17, using 0x1",
        "(XEN) CPU0: Intel machine check reporting enabled",
        "(XEN) Machine check exception polling timer started.",
        "EDAC skx MC3: HANDLING MCE MEMORY ERROR",
    ]
    assert list(parse_telemetry(lines)) == []


_XID_119 = ("NVRM: Xid (PCI:0000:9b:00): 119, pid=2024380, name=nvidia-smi, Timeout after 6s of waiting for RPC "
            "response from GPU4 GSP! Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4).")


@pytest.mark.parametrize("line", [
    # the real line (tests/data/vendored/host-telemetry-gpud, dmesg -T) in each collector's shape
    f"[Sun Feb 23 16:24:18 2025] {_XID_119}",
    f"[ 8105.206520] {_XID_119}",
    f"<3>[ 8105.206520] {_XID_119}",
    f"3,1187,8105206520,-;{_XID_119}",
    f"Feb 23 16:24:18 gpu-node-1 kernel: [ 8105.206520] {_XID_119}",
    # the word "Fatal" in free text (the message, a process name) is not the driver's verdict
    f"[ 8105.206520] {_XID_119.replace('(0x2081 0x4).', '(0x2081 0x4). Fatal error.')}",
    f"[ 8105.206520] {_XID_119.replace('name=nvidia-smi', 'name=Fatal')}",
])
def test_xid_119_gets_one_severity_whatever_its_shape(line: str) -> None:
    """A GSP RPC timeout is the catalog's "error", not hardware-indicative,
    in every shape; before, "Fatal" anywhere in the message made it fatal."""
    (event,) = parse_telemetry(line)
    assert (event.detail["code"], event.severity, event.hardware_indicative) == (119, "error", False)
    assert "severity_from" not in event.detail and event.component == "GPU 0000:9b:00"


def test_nvlink5_xid_severity_is_read_where_the_driver_writes_it() -> None:
    """NVLink5 Xids (144-150) name their unit, then Fatal / Nonfatal
    (leptonai/gpud pull request 1160, Apache-2.0)."""
    fatal, nonfatal = parse_telemetry([
        "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 "
        "0x00000000 0x00000000 0x00000000)",
        "NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 "
        "0x00000000 0x00000000 0x00000000)",
    ])
    assert (fatal.severity, fatal.detail["severity_from"]) == ("fatal", "line")
    assert (nonfatal.severity, nonfatal.detail["severity_from"]) == ("non-fatal", "line")


def test_rasdaemon_mc_event_lines_are_memory_errors() -> None:
    """rasdaemon's mc_event lines (ras-mc-handler.c) are the EDAC events the
    kernel's own "EDAC MC0: 1 CE …" line would be; the memory_failure_event
    line after them is not a hardware error of its own."""
    got = events("rasdaemon-mc-event-lines.log")
    assert [summary(e, "source", "count", "message", "controller", "layers", "address", "grain") for e in got] == [
        ("edac_ce", "corrected", "BANK 0 DIMM 1", "rasdaemon-syslog", 1, "Single-bit ECC", "MC0", [1], "0x80000000",
         "12"),
        ("edac_ue", "uncorrected", "MC0", "rasdaemon-syslog", 1, "multi-bit ECC", "MC0", [], "0xe53218400", "0"),
    ]
    ce, ue = got
    assert [e.ts.isoformat() for e in got if e.ts] == ["2023-11-21T07:48:29+00:00", "2025-03-28T05:28:48+00:00"]
    assert (ce.detail["fields"]["row"], ce.detail["fields"]["bit_pos"]) == (8192, 5)
    assert ue.detail["dimm_labels"] == [] and ue.detail["fields"]["row"] == 25906
    assert ue.hardware_indicative and ce.hardware_indicative


def test_machine_check_notice_folds_into_its_record() -> None:
    """skx_edac prints each machine check it decodes; the kernel's "Machine
    check events logged" notice of the same machine check (17 and 3 lines
    before the prints, GHES and memory-failure lines between) is folded into
    it: 2 machine checks, 2 mce events (before: 4, the notices counted beside)."""
    got = events("linux-5.14-skx-edac-ghes-uc.log")
    mces = [e for e in got if e.kind.value == "mce"]
    assert [(e.detail.get("source"), e.component) for e in mces] == [
        ("skx_edac", "cpu 0 bank 25"), ("skx_edac", "cpu 0 bank 255")]
    assert not any("notice" in e.detail for e in got)


def test_lone_notices_stay_events_and_a_record_before_a_notice_folds_it() -> None:
    # andikleen/mcelog issue #116 (donghuaz, 2023-06-13): the notices alone, the records went to rasdaemon
    lone = [
        "[202072.518835] mce: [Hardware Error]: Machine check events logged",
        "[202137.695915] mce: [Hardware Error]: Machine check events logged",
        "[202160.831562] mce: [Hardware Error]: Machine check events logged",
    ]
    assert [e.detail.get("notice") for e in parse_telemetry(lone)] == ["Machine check events logged"] * 3
    # mchehab/rasdaemon issue #155 (Sinzunza, 2024-04-08): the kernel's record, here printed before its notice
    record = [
        "[ 1366.830251] mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 9: 0000000000000000",
        "[ 1366.838823] mce: [Hardware Error]: TSC 2ac997e3063c3 ",
        "[ 1366.844468] mce: [Hardware Error]: PROCESSOR 0:50663 TIME 947185249 SOCKET 0 APIC 0 microcode 7000019",
        "[ 1366.850000] mce: [Hardware Error]: Machine check events logged",
    ]
    (event,) = parse_telemetry(record)
    assert event.component == "cpu 0 bank 9" and "notice" not in event.detail


# The skx_edac file's EDAC line (real), as a syslog line.
_EDAC_UE = ("Aug 12 08:07:13 h kernel: EDAC MC3: 1 UE memory read error on CPU_SrcID#0_MC#3_Chan#0_DIMM#0 (channel:0 "
            "slot:0 page:0x7e025e offset:0x400 grain:32 -  err_code:0x00a0:0x0090  SystemAddress:0x7e025e400)")
# What rasdaemon prints for that error (constructed by ras-mc-handler.c's format from the line above).
_ECHO = ("Aug 12 08:07:13 h rasdaemon[812]: <...>-1 [000] 0.0: mc_event: 2021-08-12 08:07:13 -0700 1 Uncorrected "
         "error: memory read error on CPU_SrcID#0_MC#3_Chan#0_DIMM#0 (mc: 3 location: 0:0:-1 address: 0x7e025e400 "
         "grain: 5 err_code:0x00a0:0x0090 SystemAddress:0x7e025e400)")


@pytest.mark.parametrize("lines", [
    [_EDAC_UE, _ECHO, _EDAC_UE],  # the kernel's line, rasdaemon's echo of it, then a second error
    [_ECHO, _EDAC_UE, _EDAC_UE],  # the echo logged first
    [_EDAC_UE, _EDAC_UE, _ECHO, _ECHO],  # two errors, two echoes
])
def test_rasdaemon_echo_of_an_edac_line_counts_once(lines: list[str]) -> None:
    """rasdaemon prints the ras:mc_event tracepoint the EDAC core's line
    came with: in a syslog holding both, each error counts once."""
    errors = 2
    got = list(parse_telemetry(lines))
    assert len(got) == errors and all(e.kind.value == "edac_ue" for e in got)
    assert all(e.component == "CPU_SrcID#0_MC#3_Chan#0_DIMM#0" for e in got)


def test_repeated_errors_of_one_printer_all_count() -> None:
    assert len(list(parse_telemetry([_EDAC_UE] * 3))) == 3
    assert len(list(parse_telemetry([_ECHO] * 3))) == 3
