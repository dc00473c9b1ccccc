"""Hardware telemetry parsers (coreepi.parse.telemetry.logs*).

Ground truth: ``tests/data/vendored/host-telemetry-gpud/`` (real kernel logs
from leptonai/gpud's test data): the expected values below are read off the
lines by hand. Formats the ground truth lacks (kernel MCE records, AMD's MCE
decoder, EDAC CE/UE, AER, mcelog, rasdaemon, APEI/GHES, memory-failure) are
tested with realistic lines whose format is cited at each sample. Plus
property-based mutation tests (never raises) and bounded-memory tests.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import tracemalloc
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testdata import vendored

from coreepi.model.events import EventKind, TelemetryEvent
from coreepi.model.report import AnalysisInfo, CrashReport, ProcessInfo, SignalInfo, Source
from coreepi.parse.kernel.prefixes import split_prefix
from coreepi.parse.open_input import DecompressionError
from coreepi.parse.telemetry.logs import (
    event_from_crash,
    looks_like_telemetry,
    parse_telemetry,
    xid_info,
    xid_table,
)

TESTDATA = vendored("host-telemetry-gpud")
XID_119 = "components_accelerator_nvidia_xid_testdata_dmesg-with-xid-119.log"
XID_ISO = "components_memory_testdata_dmesg.decode.iso.log"
KMSG = "pkg_kmsg_testdata_kmsg.1.log"
PSTORE = "pkg_pstore_testdata_7530486857247_dmesg.txt"


def events_of(text: str, **kw: object) -> list[TelemetryEvent]:
    return list(parse_telemetry(text, **kw))  # type: ignore[arg-type]


def kinds(events: list[TelemetryEvent]) -> Counter[str]:
    return Counter(e.kind.value for e in events)


# --------------------------------------------------------------------------- ground truth


def test_xid_119_gsp_timeouts() -> None:
    events = list(parse_telemetry(TESTDATA / XID_119, host_id="gpu-node-1"))
    assert kinds(events) == {"xid": 5}
    # (line, time, pid, process, expected RPC function) read off the file
    expected = [
        (3, "16:24:18", 2024380, "nvidia-smi", "Expected function 103 (GSP_RM_ALLOC) (0x2081 0x4)."),
        (38, "16:24:24", 2024380, "nvidia-smi", "Expected function 10 (FREE) (0xa55a0210 0x0)."),
        (40, "16:24:30", 2024380, "nvidia-smi", "Expected function 10 (FREE) (0xa55a0090 0x0)."),
        (42, "16:27:12", 1263500, "cache_mgr_main", "Expected function 76 (GSP_RM_CONTROL) (0x20801813 0x4c)."),
        (43, "16:30:13", 1240590, "gpud", "Expected function 76 (GSP_RM_CONTROL) (0x20803032 0x58c)."),
    ]
    for event, (line, clock, pid, process, tail) in zip(events, expected, strict=True):
        assert event.kind is EventKind.XID
        assert event.host_id == "gpu-node-1"
        assert event.source is not None and event.source.endswith(f":{line}")
        assert event.ts == datetime.fromisoformat(f"2025-02-23T{clock}+00:00")
        assert event.uptime_seconds is None
        assert event.component == "GPU 0000:9b:00"
        d = event.detail
        assert d["code"] == 119 and d["pci_address"] == "0000:9b:00"
        assert d["pid"] == pid and d["process"] == process
        assert d["message"].startswith("Timeout after 6s of waiting for RPC response from GPU4 GSP!")
        assert d["message"].endswith(tail)
        # from the "NVRM: GPU at PCI:0000:9b:00: GPU-…" and serial lines before the first Xid
        assert d["gpu_uuid"] == "GPU-509665ad-b600-ac93-3616-d754b23d636d"
        assert d["board_serial"] == "1650124014249"
        assert d["known"] is True and d["name"] == "GSP RPC Timeout" and d["mnemonic"] == "GSP_RPC_TIMEOUT"
        assert event.hardware_indicative is False  # GSP timeouts: firmware / driver first
        assert event.raw is not None and "NVRM: Xid (PCI:0000:9b:00): 119" in event.raw
    assert len({e.event_id for e in events}) == 5


def test_xid_13_and_43_iso_timestamps() -> None:
    events = list(parse_telemetry(TESTDATA / XID_ISO))
    codes = Counter(e.detail["code"] for e in events)
    assert kinds(events) == {"xid": 17}  # the OOM-killer lines are not hardware events
    assert codes == {13: 16, 43: 1}
    first = events[0]
    assert first.ts == datetime(2025, 1, 21, 4, 41, 44, 283302, tzinfo=UTC)
    assert first.detail["pci_address"] == "0000:38:00"
    assert first.detail["pid"] is None and first.detail["process"] is None  # pid='<unknown>', name=<unknown>
    assert first.detail["message"] == "Graphics SM Global Exception on (GPC 8, TPC 5, SM 1): Multiple Warp Errors"
    assert first.detail["name"] == "Graphics Engine Exception"
    assert first.hardware_indicative is False
    last = events[-1]
    assert last.detail["code"] == 43
    assert (last.detail["pid"], last.detail["process"]) == (2924364, "pt_main_thread")
    assert last.detail["message"] == "Ch 00000008"
    assert last.ts == datetime(2025, 1, 21, 4, 41, 44, 287197, tzinfo=UTC)
    assert all(e.component == "GPU 0000:38:00" for e in events)


def test_kmsg_log_has_no_hardware_events() -> None:
    assert list(parse_telemetry(TESTDATA / KMSG)) == []
    first = (TESTDATA / KMSG).read_text().splitlines()[0]
    line = split_prefix(1, first)  # /dev/kmsg record: level,seq,usec,flags;message
    assert line.uptime == pytest.approx(206.764307)
    assert line.message == "nvidia-nvswitch2: open (major=510)"


def test_pstore_boot_log_banners_are_not_events() -> None:
    path = TESTDATA / PSTORE
    assert list(parse_telemetry(path)) == []
    lines = path.read_text().splitlines()
    banners = [ln for ln in lines if "EDAC" in ln or "MCE" in ln or "mce" in ln]
    # "MCE: In-kernel MCE decoding enabled.", "EDAC MC0: Giving out device to module amd64_edac …",
    # "EDAC amd64: MC: 0: 16384MB 1: 16384MB", "AMD64 EDAC driver v3.5.0" …
    assert len(banners) >= 40
    for banner in banners:
        assert list(parse_telemetry([banner])) == [], banner
    assert split_prefix(1, "<6>[   13.868252] EDAC MC0: Giving out device").uptime == pytest.approx(13.868252)


def test_banner_lines_yield_no_event() -> None:
    text = "\n".join([  # noqa: FLY002
        "[    0.824000] mce: CPU supports 22 MCE banks",
        "[    1.000000] EDAC MC: Ver: 3.0.0",
        "[    2.000000] EDAC sbridge: Seeking for: PCI ID 8086:2fa0",
        "[    2.100000] EDAC MC0: Giving out device to module sb_edac controller Haswell SrcID#0_Ha#0: DEV 0000:7f:12.0 (INTERRUPT)",
        "[    2.200000] EDAC skx: ECC is disabled on imc 0",
        "[    2.300000] pcieport 0000:00:01.0: AER: enabled with IRQ 26",
        "[    2.400000] NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.144.03",
        "[    2.500000] mce: [Hardware Error]: Run the above through 'mcelog --ascii'",
    ])
    assert events_of(text) == []


def test_sniffing_real_files() -> None:
    assert looks_like_telemetry((TESTDATA / XID_119).read_bytes())
    assert looks_like_telemetry((TESTDATA / XID_ISO).read_bytes())
    assert not looks_like_telemetry((TESTDATA / KMSG).read_bytes())


def test_sniffing_never_raises() -> None:
    assert not looks_like_telemetry(b"")
    assert not looks_like_telemetry(b"\x7fELF\x00\x00" + b"AER: " * 10)
    assert looks_like_telemetry(b"[ 1.0] EDAC MC0: 1 CE memory read error on DIMM_A1 (channel:0)\n")
    assert not looks_like_telemetry(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- kernel MCE

# arch/x86/kernel/cpu/mce/core.c, __print_mce(): "CPU %d: Machine Check%s: %Lx Bank %d: %016Lx",
# "TSC %llx ADDR %llx MISC %llx", "PROCESSOR %u:%x TIME %llu SOCKET %u APIC %x microcode %x";
# print_mce(): "Run the above through 'mcelog --ascii'"; mce_panic(): "Machine check: %s".
INTEL_MCE = """\
[ 5123.456700] mce: [Hardware Error]: Machine check events logged
[ 5123.456800] mce: [Hardware Error]: CPU 2: Machine Check: 0 Bank 7: cc0000f000010090
[ 5123.456801] mce: [Hardware Error]: TSC 0 ADDR 1f7fffbfc0 MISC 90840400400028c
[ 5123.456802] mce: [Hardware Error]: PROCESSOR 0:306f2 TIME 1431360573 SOCKET 0 APIC 2 microcode 2a
[ 5123.456803] mce: [Hardware Error]: Run the above through 'mcelog --ascii'
[ 9000.000000] mce: [Hardware Error]: CPU 5: Machine Check Exception: 5 Bank 1: bd80000000100134
[ 9000.000001] mce: [Hardware Error]: RIP 10:<ffffffff8104e3a1> {native_safe_halt+0x1/0x10}
[ 9000.000002] mce: [Hardware Error]: TSC 2b9a1c87f4c ADDR 3f5d2f000 MISC 86
[ 9000.000003] mce: [Hardware Error]: PROCESSOR 0:50654 TIME 1700000000 SOCKET 1 APIC 22 microcode 2006e05
[ 9000.000004] mce: [Hardware Error]: Machine check: Data load in unrecoverable area of kernel
[ 9000.000005] Kernel panic - not syncing: Fatal machine check
"""


def test_kernel_mce_records() -> None:
    events = events_of(INTEL_MCE, host_id="h")
    assert kinds(events) == {"mce": 2}  # the "events logged" notice folds into the record
    first, second = events
    assert first.component == "cpu 2 bank 7" and first.severity == "corrected"
    d = first.detail
    assert (d["cpu"], d["bank"], d["socket"], d["apic"]) == (2, 7, 0, 2)
    assert d["status"] == "0xcc0000f000010090" and d["addr"] == "0x1f7fffbfc0" and d["misc"] == "0x90840400400028c"
    assert d["microcode"] == "0x2a" and d["cpuid"] == "0x306f2" and d["cpu_vendor"] == "Intel"
    assert d["error_class"] == "memory controller" and d["mc_transaction"] == "read" and d["mc_channel"] == 0
    assert d["overflow"] is True and d["uncorrected"] is False and d["addr_valid"] is True
    assert first.uptime_seconds == pytest.approx(5123.4568)
    assert first.ts == datetime.fromtimestamp(1431360573, UTC)  # the record's TIME
    assert second.severity == "fatal" and second.component == "cpu 5 bank 1"
    assert second.detail["exception"] is True and second.detail["action_required"] is True  # SRAR, fatal by panic
    assert second.detail["panic"] == "Data load in unrecoverable area of kernel"
    assert second.detail["rip"] == "10:0xffffffff8104e3a1" and second.detail["rip_symbol"] == "native_safe_halt+0x1/0x10"
    assert second.detail["error_class"] == "cache" and second.detail["socket"] == 1
    assert all(e.hardware_indicative for e in events)


def test_lone_mce_notice_is_an_event() -> None:
    events = events_of("Nov  9 19:14:59 yoda kernel: [  299.821999] mce: [Hardware Error]: Machine check events logged\n")
    assert len(events) == 1 and events[0].kind is EventKind.MCE
    assert events[0].detail["notice"] == "Machine check events logged"
    assert events[0].uptime_seconds == pytest.approx(299.821999)
    assert events[0].detail["syslog_time"] == "Nov  9 19:14:59"


# drivers/edac/mce_amd.c, decode_smca_error() / amd_decode_mce(): "%s" severity line,
# "CPU:%d (%x:%x:%x) MC%d_STATUS[%s|%s|…]: 0x%016llx", "Error Addr: 0x%016llx",
# "IPID: 0x%016llx, Syndrome: 0x%016llx", then the bank's decoded error.
AMD_MCE = """\
[  100.100000] [Hardware Error]: Corrected error, no action required.
[  100.100001] [Hardware Error]: CPU:2 (17:71:0) MC22_STATUS[Over|CE|MiscV|AddrV|-|-|SyndV|CECC|-|-|-]: 0xdc2041000000011b
[  100.100002] [Hardware Error]: Error Addr: 0x0000000450f3b7c0
[  100.100003] [Hardware Error]: IPID: 0x0000009600350f00, Syndrome: 0x0000ccd10a800200
[  100.100004] [Hardware Error]: Unified Memory Controller Ext. Error Code: 0, DRAM ECC error.
[  100.100005] [Hardware Error]: cache level: L3/GEN, tx: GEN, mem-tx: RD
"""


def test_amd_decoded_mce() -> None:
    (event,) = events_of(AMD_MCE)
    assert event.kind is EventKind.MCE and event.severity == "corrected"
    assert event.component == "cpu 2 bank 22"
    d = event.detail
    assert d["cpu_vendor"] == "AMD" and d["family"] == 0x17 and d["model"] == 0x71
    assert d["addr"] == "0x450f3b7c0" and d["ipid"] == "0x9600350f00" and d["synd"] == "0xccd10a800200"
    assert "Unified Memory Controller Ext. Error Code: 0, DRAM ECC error." in d["decoded"]
    assert d["amd_status_flags"] == ["Over", "CE", "MiscV", "AddrV", "SyndV", "CECC"]
    assert "error_class" not in d  # Intel SDM encodings are not applied to AMD banks


# drivers/firmware/efi/cper.c (cper_print_mem, printed by ghes.c with the "{N}" prefix).
GHES = """\
[  200.000000] {1}[Hardware Error]: Hardware error from APEI Generic Hardware Error Source: 1
[  200.000000] {1}[Hardware Error]: It has been corrected by h/w and requires no further action
[  200.000000] {1}[Hardware Error]: event severity: corrected
[  200.000000] {1}[Hardware Error]:  Error 0, type: corrected
[  200.000000] {1}[Hardware Error]:   section_type: memory error
[  200.000000] {1}[Hardware Error]:   physical_address: 0x0000002f6a1c9000
[  200.000000] {1}[Hardware Error]:   node: 0 card: 5 module: 0 rank: 1 bank: 3 device: 0 row: 9344 column: 760
[  200.000000] {1}[Hardware Error]:   DIMM location: CPU 1 DIMM 21
"""


def test_ghes_memory_error() -> None:
    (event,) = events_of(GHES)
    assert event.kind is EventKind.EDAC_CE and event.severity == "corrected"
    assert event.component == "CPU 1 DIMM 21"
    assert event.detail["physical_address"] == "0x0000002f6a1c9000"
    assert (event.detail["node"], event.detail["card"], event.detail["rank"]) == ("0", "5", "1")


# --------------------------------------------------------------------------- EDAC

# drivers/edac/edac_mc.c, edac_ce_error() / edac_ue_error():
# "%d CE %s%son %s (%s page:0x%lx offset:0x%lx grain:%ld syndrome:0x%lx%s%s)" after "EDAC MC%d: ";
# the " - area:DRAM err_code:… socket:… ha:… channel_mask:… rank:…" detail is sb_edac's.
EDAC = """\
[ 5123.500000] EDAC MC0: 1 CE memory read error on CPU_SrcID#0_Ha#0_Chan#1_DIMM#0 (channel:1 slot:0 page:0x1f7fffb offset:0xfc0 grain:32 syndrome:0x0 - area:DRAM err_code:0001:0091 socket:0 ha:0 channel_mask:2 rank:0)
[ 6000.000000] EDAC MC1: 1 UE memory scrubbing error on DIMM_B2 (channel:0 slot:1 page:0x4a2 offset:0x0 grain:32 - err_code:0001:00c0)
[ 6001.000000] EDAC MC0: 3 CE on mc#0csrow#2channel#1 (csrow:2 channel:1 page:0x1234 offset:0x40 grain:64 syndrome:0xbeef)
[ 6002.000000] EDAC MC2: 65535 CE memory read error on CPU_SrcID#1_MC#0_Chan#2_DIMM#0 or CPU_SrcID#1_MC#0_Chan#2_DIMM#1 (channel:2 page:0x0 offset:0x0 grain:32 syndrome:0x0
[ 6003.000000] EDAC MC0: CE page 0x2c8e7, offset 0x640, grain 8, syndrome 0x47d4, row 1, channel 0, label "DIMM_B1": i5000 CE
"""


def test_edac_ce_and_ue() -> None:
    events = events_of(EDAC)
    assert kinds(events) == {"edac_ce": 4, "edac_ue": 1}
    ce, ue, amd, overflow, old = events
    assert ce.severity == "corrected" and ce.component == "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0"
    d = ce.detail
    assert (d["controller"], d["count"], d["error_type"], d["corrected"]) == ("MC0", 1, "CE", True)
    assert d["dimm_label"] == "CPU_SrcID#0_Ha#0_Chan#1_DIMM#0" and d["message"] == "memory read error"
    assert (d["socket"], d["ha"], d["channel"], d["dimm"], d["slot"], d["rank"]) == (0, 0, 1, 0, 0, 0)
    assert d["physical_address"] == "0x1f7fffbfc0" and d["grain"] == 32 and d["err_code"] == "0001:0091"
    assert ue.kind is EventKind.EDAC_UE and ue.severity == "uncorrected" and ue.component == "DIMM_B2"
    assert ue.detail["controller"] == "MC1" and ue.detail["message"] == "memory scrubbing error"
    assert amd.detail["count"] == 3 and amd.detail["csrow"] == 2 and amd.detail["channel"] == 1
    assert amd.detail["message"] is None and amd.detail["syndrome"] == 0xBEEF
    assert overflow.detail["count"] == 65535 and overflow.detail["truncated"] is True
    assert overflow.detail["dimm_labels"] == ["CPU_SrcID#1_MC#0_Chan#2_DIMM#0", "CPU_SrcID#1_MC#0_Chan#2_DIMM#1"]
    assert overflow.detail["imc"] == 0 and overflow.detail["socket"] == 1
    assert old.component == "DIMM_B1" and old.detail["row"] == 1 and old.detail["page"] == 0x2C8E7


# --------------------------------------------------------------------------- AER

# drivers/pci/pcie/aer.c: aer_print_port_info() "%s%s error received: %s",
# aer_print_error() "PCIe Bus Error: severity=%s, type=%s, (%s)",
# "  device [%04x:%04x] error status/mask=%08x/%08x", __aer_print_error() "   [%2d] %-22s%s",
# "  TLP Header: %08x %08x %08x %08x"; err.c / pcie_do_recovery() "device recovery failed".
AER = """\
[ 7000.100000] pcieport 0000:00:1c.5: AER: Corrected error received: 0000:03:00.0
[ 7000.100010] r8169 0000:03:00.0: AER: PCIe Bus Error: severity=Corrected, type=Physical Layer, (Receiver ID)
[ 7000.100020] r8169 0000:03:00.0: AER:   device [10ec:8168] error status/mask=00000001/00002000
[ 7000.100030] r8169 0000:03:00.0: AER:    [ 0] RxErr                  (First)
[ 7500.000000] pcieport 0000:00:01.0: AER: Uncorrected (Fatal) error received: 0000:01:00.0
[ 7500.000001] nvme 0000:01:00.0: AER: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)
[ 7500.000002] nvme 0000:01:00.0: AER:   device [144d:a808] error status/mask=00004000/00000000
[ 7500.000003] nvme 0000:01:00.0: AER:    [14] CmpltTO                (First)
[ 7500.000004] nvme 0000:01:00.0: AER:   TLP Header: 40000001 0000000f 9a9f0000 00000000
[ 7500.100000] pcieport 0000:00:01.0: AER: device recovery failed
[ 7600.000000] pcieport 0000:00:03.0: AER: Multiple Correctable error message received from 0000:00:03.0
"""
# Linux 3.x (aer_print_error with "id=%04x", device named "aer 0000:00:03.0:pcie02").
AER_OLD = """\
[  12.000000] pcieport 0000:00:03.0: AER: Corrected error received: id=0018
[  12.000001] aer 0000:00:03.0:pcie02: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=0018(Receiver ID)
[  12.000002] aer 0000:00:03.0:pcie02:   device [8086:3c08] error status/mask=00000001/00002000
[  12.000003] aer 0000:00:03.0:pcie02:    [ 0] Receiver Error         (First)
"""


def test_aer_blocks() -> None:
    events = events_of(AER)
    assert kinds(events) == {"aer": 3}
    corrected, fatal, lone = events
    assert corrected.severity == "corrected" and corrected.component == "PCIe 0000:03:00.0"
    d = corrected.detail
    assert (d["root_port"], d["driver"], d["type"], d["agent"]) == ("0000:00:1c.5", "r8169", "Physical Layer", "Receiver ID")
    assert (d["vendor_id"], d["device_id"], d["status"], d["mask"]) == ("10ec", "8168", "0x00000001", "0x00002000")
    assert d["errors"] == [{"bit": 0, "name": "RxErr", "first": True}] and d["first_error"] == "RxErr"
    assert corrected.source == "line 1-4"
    assert fatal.severity == "fatal" and fatal.detail["first_error"] == "CmpltTO"
    assert fatal.detail["tlp_header"] == "40000001 0000000f 9a9f0000 00000000"
    assert fatal.detail["recovery"] == "device recovery failed"
    assert lone.severity == "corrected" and lone.detail["multiple"] is True  # no block followed it


def test_aer_old_kernel_format() -> None:
    (event,) = events_of(AER_OLD)
    assert event.severity == "corrected" and event.component == "PCIe 0000:00:03.0"
    assert event.detail["errors"][0]["name"] == "Receiver Error" and event.detail["source_id"] == "0018"


# --------------------------------------------------------------------------- tool outputs

# mcelog's dump_mce() output (mcelog.c / p4.c), as printed by `mcelog --ascii`; record
# values from a public forum post (an SRAR data-cache error on a Haswell desktop).
MCELOG = """\
mcelog: failed to prefill DIMM database from DMI data
Hardware event. This is not a software error.
MCE 0
CPU 3 BANK 1
MISC 86 ADDR 1424bd400
TIME 1415556598 Sun Nov  9 19:09:58 2014
MCG status:
MCi status:
Uncorrected error
Error enabled
MCi_MISC register valid
MCi_ADDR register valid
Processor context corrupt
SRAR
MCA: Data CACHE Level-0 Write Error
STATUS bf80000000000124 MCGSTATUS 0
MCGCAP c09 APICID 6 SOCKETID 0
CPUID Vendor Intel Family 6 Model 60

Hardware event. This is not a software error.
MCE 1
CPU 0 BANK 8 TSC 1aeaee7d3e8a [at 2394 Mhz 0 days 0:48:18 uptime (unreliable)]
MISC 7428880000801086 ADDR 1f3b23f00
TIME 1497347212 Tue Jun 13 10:46:52 2017
MCG status:
MCi status:
Corrected error
MCi_MISC register valid
MCi_ADDR register valid
MCA: MEMORY CONTROLLER RD_CHANNEL2_ERR
Transaction: Memory read error
STATUS 8c00004000010092 MCGSTATUS 0
MCGCAP 1000c14 APICID 0 SOCKETID 0
CPUID Vendor Intel Family 6 Model 63
"""


def test_mcelog_records() -> None:
    events = events_of(MCELOG)
    assert kinds(events) == {"mce": 2}
    srar, ce = events
    assert srar.severity == "fatal" and srar.component == "cpu 3 bank 1"
    assert srar.ts == datetime.fromtimestamp(1415556598, UTC)
    d = srar.detail
    assert (d["source"], d["status"], d["addr"], d["misc"], d["socket"], d["apic"]) == (
        "mcelog", "0xbf80000000000124", "0x1424bd400", "0x86", 0, 6)
    assert d["decoded"] == ["MCA: Data CACHE Level-0 Write Error"]
    assert "SRAR" in d["flags"] and d["action_required"] is True and d["error_class"] == "cache"
    assert (d["cpu_vendor"], d["family"], d["model"]) == ("Intel", 6, 60)
    assert ce.severity == "corrected" and ce.component == "cpu 0 bank 8"
    assert ce.detail["tsc"] == "0x1aeaee7d3e8a" and ce.detail["mc_channel"] == 2
    assert ce.detail["decoded"] == ["MCA: MEMORY CONTROLLER RD_CHANNEL2_ERR", "Transaction: Memory read error"]


def test_mcelog_through_syslog() -> None:
    text = "".join(f"Jun 13 10:46:52 node3 mcelog[665]: {line}\n" for line in MCELOG.splitlines()[19:])
    (event,) = events_of(text)
    assert event.component == "cpu 0 bank 8" and event.detail["source"] == "mcelog"


# rasdaemon util/ras-mc-ctl.in, sub errors: "$id $time $count $type error(s): $msg at $label
# location: $mc:$top:$mid:$low, addr $addr, grain $grain, syndrome $syndrome $detail",
# "$id $time $devname $type error: $msg", "$id $time error: $msg, CPU $cpuvendor, bank $bank_name,
# mcg $mcgstatus_msg, mci $mcistatus_msg, …, status=0x%08x, addr=0x%08x, … apicid=0x%08x".
RAS_MC_CTL = """\
Memory controller events:
1 2024-02-17 00:47:01 -0500 1 Corrected error(s): memory read error at CPU_SrcID#0_Ha#0_Chan#0_DIMM#0 location: 0:0:0:-1, addr 65928, grain 7, syndrome 0  area:DRAM err_code:0001:0090 socket:0 ha:0 channel_mask:1 rank:0
2 2024-02-18 03:00:00 +0000 1 Uncorrected error(s): memory scrubbing error at DIMM_A2 location: 1:0:1:-1, addr 0x7f000, grain 32, syndrome 0

PCIe AER events:
1 2024-02-17 00:48:00 -0500 0000:00:1c.5 Corrected error: Receiver Error, Bad TLP

No ARM processor errors.

MCE events:
1 2024-02-17 00:47:37 -0500 error: MEMORY CONTROLLER RD_CHANNEL0_ERR Transaction: Memory read error, CPU Intel Xeon v3 (Haswell) EP/EX, bank Memory Controller, mci Corrected_error, mcgstatus=0x00000000, status=0x8c00004000010090, addr=0x00012345, apicid=0x00000002, bank=0x00000007, cpu=0x00000004
"""


def test_ras_mc_ctl_errors() -> None:
    events = events_of(RAS_MC_CTL)
    assert kinds(events) == {"edac_ce": 1, "edac_ue": 1, "aer": 1, "mce": 1}
    ce, ue, aer, mce = events
    assert ce.ts == datetime(2024, 2, 17, 5, 47, 1, tzinfo=UTC)
    assert ce.component == "CPU_SrcID#0_Ha#0_Chan#0_DIMM#0" and ce.detail["controller"] == "MC0"
    assert ce.detail["layers"] == [0, 0, 0, -1] and ce.detail["fields"]["err_code"] == "0001:0090"
    assert ue.severity == "uncorrected" and ue.component == "DIMM_A2" and ue.detail["controller"] == "MC1"
    assert aer.component == "PCIe 0000:00:1c.5" and aer.detail["errors"] == ["Receiver Error", "Bad TLP"]
    assert mce.component == "cpu 4 bank 7" and mce.severity == "corrected" and mce.detail["apic"] == 2
    assert mce.detail["bank_name"] == "Memory Controller" and mce.detail["addr"] == "0x12345"


# mm/memory-failure.c, kill_proc(): "%#lx: Sending SIGBUS to %s:%d due to hardware memory corruption"
# (pr_fmt "Memory failure: ").
def test_memory_failure_sigbus_line() -> None:
    line = "2024-03-19T10:40:00.123456+01:00 node7 kernel: Memory failure: 0x1f7fffb: Sending SIGBUS to my:app:4567 due to hardware memory corruption"
    (event,) = events_of(line)
    assert event.kind is EventKind.SIGBUS_MCE
    assert event.ts == datetime(2024, 3, 19, 9, 40, 0, 123456, tzinfo=UTC)
    assert (event.detail["pid"], event.detail["process"], event.detail["pfn"]) == (4567, "my:app", "0x1f7fffb")


# --------------------------------------------------------------------------- Xid variants


def test_xid_variants() -> None:
    text = "\n".join([  # noqa: FLY002
        # NVIDIA/open-gpu-kernel-modules issue 1151 (journal): Xid 79 with no pid
        "May 18 19:02:39 host kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
        # NVIDIA's Xid document, "Viewing Xid messages": the pre-"PCI:" format
        "[  269.517039] NVRM: Xid (0000:03:00): 14, Channel 00000001",
        # stas00/ml-engineering debug.md: row remapping
        "[  300.000000] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, reset gpu to activate.",
        "[  301.000000] NVRM: Xid (PCI:0000:65:00): 119, pid='N/A', Timeout waiting for RPC from GSP",
        "[  302.000000] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)",
        "[  303.000000] NVRM: Xid (PCI:0000:3b:00): 48, pid=777, name=python3, An uncorrectable double bit error (DBE) has been detected on GPU",
    ])
    fell, old, remap, gsp, sxid, dbe = events_of(text)
    assert fell.detail["code"] == 79 and fell.severity == "fatal" and fell.hardware_indicative
    assert fell.detail["message"] == "GPU has fallen off the bus." and fell.detail["pid"] is None
    assert fell.detail["syslog_time"] == "May 18 19:02:39"
    assert old.detail["code"] == 14 and old.detail["pci_address"] == "0000:03:00" and old.detail["known"] is False
    assert old.hardware_indicative is False
    assert remap.detail["pid"] == 1896 and remap.detail["process"] is None and remap.hardware_indicative
    assert gsp.detail["pid"] is None and gsp.detail["message"] == "Timeout waiting for RPC from GSP"
    assert sxid.detail["switch"] is True and sxid.component == "NVSwitch 0000:05:00.0" and sxid.severity == "non-fatal"
    assert (dbe.detail["pid"], dbe.detail["process"], dbe.severity) == (777, "python3", "uncorrected")


def test_xid_own_severity_and_fall_off_the_bus_without_xid() -> None:
    text = "\n".join([  # noqa: FLY002
        # leptonai/gpud pull request 1160 (Apache-2.0): NVLink5 Xids state their own severity,
        # the catalog says only "error" for 144-150
        "NVRM: Xid (PCI:0000:01:00): 144, SAW_MVB Nonfatal XC0 i0 Link 0 (0x00000001 0x00000008 0x00000000 "
        "0x00000000 0x00000000 0x00000000)",
        "NVRM: Xid (PCI:0000:00:00): 149, NETIR_LINK_EVT Fatal XC0 i0 Link 00 (0x026001c6 0x00000000 0x00000000 "
        "0x00000000 0x00000000 0x00000000)",
        # NVIDIA/NVSentinel issue 155: a GPU that fell off the bus while the driver probed it, no Xid line
        "[ 1843.308145] NVRM: The NVIDIA GPU 0000:b3:00.0",
        "               NVRM: (PCI ID: 10de:26b5) installed in this system has",
        "               NVRM: fallen off the bus and is not responding to commands.",
        "[ 1843.439662] NVRM: The NVIDIA probe routine failed for 1 device(s).",
        # the one-line form the driver prints ("NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",
        # quoted in Ubuntu questions), then an Xid 79 for the same GPU (constructed): one fall, one event
        "[ 2000.000000] NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",
        "[ 2000.000100] NVRM: Xid (PCI:0000:01:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
    ])
    saw, netir, probe, short = events_of(text)
    assert (saw.detail["code"], saw.severity, saw.detail["severity_from"]) == (144, "non-fatal", "line")
    assert (netir.detail["code"], netir.severity) == (149, "fatal")
    assert probe.detail["code"] == 79 and probe.detail["xid_line"] is False and probe.severity == "fatal"
    assert probe.component == "GPU 0000:b3:00" and probe.hardware_indicative
    assert probe.detail["message"] == ("The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:26b5) installed in this system "
                                       "has fallen off the bus and is not responding to commands.")
    assert short.detail["code"] == 79 and short.component == "GPU 0000:01:00" and short.detail["xid_line"] is False


def test_xid_table_from_nvidia_docs() -> None:
    table = xid_table()
    for code in (13, 31, 43, 45, 48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120):
        assert code in table and table[code].name and table[code].meaning and table[code].cause
    for code in (48, 63, 64, 74, 79, 92, 94, 95):
        assert table[code].hardware_indicative, code
    for code in (13, 31, 43, 45):
        assert not table[code].hardware_indicative, code
    info = xid_info(79)
    assert info is not None and info.name == "GPU has fallen off the bus"
    assert info.mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert xid_info(99999) is None


# --------------------------------------------------------------------------- prefixes, ids


@pytest.mark.parametrize(
    ("raw", "message", "ts", "uptime"),
    [
        ("[Sun Feb 23 16:24:18 2025] NVRM: x", "NVRM: x", datetime(2025, 2, 23, 16, 24, 18, tzinfo=UTC), None),
        ("kern  :warn  : 2025-01-21T04:41:44,283302+00:00 NVRM: x", "NVRM: x",
         datetime(2025, 1, 21, 4, 41, 44, 283302, tzinfo=UTC), None),
        ("2024-03-19T10:40:00+02:00 node kernel: EDAC MC0: x", "EDAC MC0: x", datetime(2024, 3, 19, 8, 40, tzinfo=UTC), None),
        ("2024-03-19 10:40:00 EDAC MC0: 1 CE x", "EDAC MC0: 1 CE x", datetime(2024, 3, 19, 10, 40, tzinfo=UTC), None),
        ("Mar 19 10:32:12 host kernel: [ 12.5] mce: y", "mce: y", None, 12.5),
        ("[  123.456789] host kernel: AER: z", "AER: z", None, 123.456789),
        ("[  123.456789][ T1234] EDAC MC0: z", "EDAC MC0: z", None, 123.456789),
        ("<4>[    2.608284] mlx5_core 0000:41:00.1: q", "mlx5_core 0000:41:00.1: q", None, 2.608284),
        ("6,4004,9184121699,-;perf: w", "perf: w", None, 9184.121699),
        ("plain text", "plain text", None, None),
    ],
)
def test_prefixes(raw: str, message: str, ts: datetime | None, uptime: float | None) -> None:
    line = split_prefix(7, raw)
    assert line.message == message and line.ts == ts
    assert line.uptime == (pytest.approx(uptime) if uptime is not None else None)


def test_event_ids_are_stable() -> None:
    text = INTEL_MCE + EDAC + AER
    first = [e.event_id for e in events_of(text, host_id="h", name="a.log")]
    again = [e.event_id for e in events_of(text, host_id="h", name="a.log")]
    assert first == again and len(set(first)) == len(first)
    # the same kernel messages (precise times) in a renamed, longer file collide …
    moved = [e.event_id for e in events_of("noise\n" + text, host_id="h", name="a.log.1")]
    assert moved == first
    # … but not on another host
    assert set(first).isdisjoint(e.event_id for e in events_of(text, host_id="other", name="a.log"))


def test_event_ids_without_precise_time_use_the_line() -> None:
    a = [e.event_id for e in parse_telemetry(TESTDATA / XID_119, host_id="h", name="x")]
    b = [e.event_id for e in parse_telemetry(TESTDATA / XID_119, host_id="h", name="x")]
    assert a == b and len(set(a)) == 5


# --------------------------------------------------------------------------- SIGBUS crash


def _crash(signal: SignalInfo | None) -> CrashReport:
    return CrashReport(
        crash_id="c0ffee", host_id="db-7", captured_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        source=Source.ELF_CORE, process=ProcessInfo(pid=4242, comm="postgres", exe="/usr/bin/postgres"),
        signal=signal, analysis=AnalysisInfo(analyzer_version="test"),
    )


def test_event_from_sigbus_mceerr_crash() -> None:
    report = _crash(SignalInfo(number=7, name="SIGBUS", si_code=4, si_code_name="BUS_MCEERR_AR",
                               fault_address=0x7F12_3456_7000))
    event = event_from_crash(report)
    assert event is not None and event.kind is EventKind.SIGBUS_MCE
    assert (event.host_id, event.ts, event.severity) == ("db-7", report.captured_at, "uncorrected")
    assert event.detail["si_code_name"] == "BUS_MCEERR_AR" and event.detail["action_required"] is True
    assert event.detail["fault_address"] == "0x7f1234567000" and event.detail["crash_id"] == "c0ffee"
    assert event.component == "memory at 0x7f1234567000" and "postgres (pid 4242)" in event.summary
    assert event_from_crash(report) == event  # stable id
    ao = event_from_crash(_crash(SignalInfo(number=7, name="SIGBUS", si_code=5)))
    assert ao is not None and ao.detail["si_code_name"] == "BUS_MCEERR_AO" and ao.detail["action_required"] is False


def test_other_crashes_are_not_events() -> None:
    assert event_from_crash(_crash(None)) is None
    assert event_from_crash(_crash(SignalInfo(number=11, name="SIGSEGV", si_code=1, si_code_name="SEGV_MAPERR"))) is None
    assert event_from_crash(_crash(SignalInfo(number=7, name="SIGBUS", si_code=2, si_code_name="BUS_ADRERR"))) is None
    assert event_from_crash(_crash(SignalInfo(number=11, name="SIGSEGV", si_code=4))) is None


# --------------------------------------------------------------------------- bad input


def _samples() -> list[str]:
    samples = [INTEL_MCE, AMD_MCE, GHES, EDAC, AER, AER_OLD, MCELOG, RAS_MC_CTL]
    samples += [p.read_text("utf-8", "replace")[:20000] for p in sorted(TESTDATA.iterdir())]
    return samples


SAMPLES = _samples()


def _mutate(text: str, seed: int, ops: int) -> str:
    rng = random.Random(seed)
    data = list(text)
    for _ in range(ops):
        if not data:
            break
        op, at = rng.randrange(6), rng.randrange(len(data))
        if op == 0:
            del data[at: at + rng.randrange(1, 200)]
        elif op == 1:
            data[at:at] = rng.choice(["\n", "\x00", "\ufffd", "(", ")", ":", "0x", "[", "]", "{1}", " - ", "=", ","])
        elif op == 2:
            data[at] = chr(rng.randrange(0x20, 0x250))
        elif op == 3:
            start = rng.randrange(len(data))
            data[at:at] = data[start: start + rng.randrange(1, 400)]
        elif op == 4:
            data[at:at] = list("9" * rng.randrange(1, 60))
        else:
            del data[at:]
    return "".join(data)


def _check(events: list[TelemetryEvent]) -> None:
    for event in events:
        TelemetryEvent.model_validate_json(event.model_dump_json())
        assert event.raw is None or len(event.raw) <= 4096


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sample=st.sampled_from(range(len(SAMPLES))), seed=st.integers(0, 2**32), ops=st.integers(1, 40))
def test_mutated_lines_never_raise(sample: int, seed: int, ops: int) -> None:
    _check(list(parse_telemetry(_mutate(SAMPLES[sample], seed, ops))))  # type: ignore[arg-type]


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=4096))
def test_arbitrary_bytes_never_raise(data: bytes) -> None:
    _check(list(parse_telemetry(data)))  # type: ignore[arg-type]


ALPHABET = list("EDAC MC0: 1 CE UE on (channel:1) Xid (PCI:0000:9b:00): 79, pid=[Hardware Error]: Bank AER\n{}0x-")


@settings(max_examples=150, deadline=None)
@given(lines=st.lists(st.text(alphabet=st.sampled_from(ALPHABET), max_size=300), max_size=40))
def test_telemetry_flavoured_lines_never_raise(lines: list[str]) -> None:
    _check(list(parse_telemetry(lines)))


def _huge_log(lines: int) -> Iterator[str]:
    """A generated log, never held in memory: noise, an event of every
    family every few hundred lines, unterminated multi-line records, long lines."""
    records = [INTEL_MCE, AMD_MCE, GHES, EDAC, AER, MCELOG]
    for i in range(lines):
        if i % 500 == 0:
            yield from records[(i // 500) % len(records)].splitlines()
        elif i % 997 == 0:
            yield "[ 1.0] mce: [Hardware Error]: CPU 1: Machine Check: 0 Bank 3: 9" + "0" * 15  # never closed by data
        elif i % 7919 == 0:
            yield "[ 1.0] EDAC MC0: 1 CE x on " + "Z" * 50_000
        else:
            yield f"[{i}.000000] systemd[1]: Started session {i} of user root."


def test_streaming_large_log_is_bounded() -> None:
    tracemalloc.start()
    try:
        counts: Counter[str] = Counter()
        for event in parse_telemetry(_huge_log(200_000), host_id="h"):
            counts[event.kind.value] += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert counts["xid"] == 0 and counts["edac_ce"] > 300 and counts["mce"] > 300 and counts["aer"] > 100
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


def test_one_giant_line_file_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "giant.log"
    with path.open("wb") as handle:
        handle.write(b"[ 1.0] NVRM: Xid (PCI:0000:9b:00): 79, GPU has fallen off the bus.\n")
        handle.write(b"[ 2.0] EDAC MC0: 1 CE on DIMM_A1 (")
        chunk = b"channel:1 " * (1 << 17)
        for _ in range(48):  # a ~60 MiB line with no newline
            handle.write(chunk)
    tracemalloc.start()
    try:
        events = list(parse_telemetry(path))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kinds(events) == {"xid": 1, "edac_ce": 1}
    assert events[1].detail["truncated"] is True and len(events[1].raw or "") <= 4096
    assert peak < 16 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"


def test_compressed_and_missing_files(tmp_path: Path) -> None:
    import gzip

    path = tmp_path / "kern.log.gz"
    path.write_bytes(gzip.compress(EDAC.encode()))
    assert kinds(list(parse_telemetry(path))) == {"edac_ce": 4, "edac_ue": 1}
    corrupt = tmp_path / "cut.log.gz"
    corrupt.write_bytes(gzip.compress(EDAC.encode())[:-40])
    with pytest.raises(DecompressionError) as stopped:  # a cut stream says so, after its events
        list(parse_telemetry(corrupt))
    assert stopped.value.source == str(corrupt) and stopped.value.line >= 1
    with pytest.raises(OSError):
        list(parse_telemetry(tmp_path / "missing.log"))


# --------------------------------------------------------------------------- CLI


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coreepi", *args], capture_output=True, text=True, timeout=120,
                          check=False)


def test_cli_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "dmesg.txt"
    path.write_text(EDAC + AER)
    result = run("telemetry", str(path), "--host", "node-3", "--json")
    assert result.returncode == 0, result.stderr
    events = [TelemetryEvent.model_validate(json.loads(line)) for line in result.stdout.splitlines()]
    assert kinds(events) == {"edac_ce": 4, "edac_ue": 1, "aer": 3}
    assert {e.host_id for e in events} == {"node-3"}


def test_cli_table_and_errors(tmp_path: Path) -> None:
    path = tmp_path / "mcelog.txt"
    path.write_text(MCELOG)
    result = run("telemetry", str(path))
    assert result.returncode == 0 and "cpu 3 bank 1" in result.stdout and "fatal" in result.stdout
    empty = tmp_path / "empty.log"
    empty.write_text("nothing here\n")
    result = run("telemetry", str(empty))
    assert result.returncode == 0 and "no hardware events found" in result.stderr
    result = run("telemetry", str(tmp_path / "nope.log"))
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "no such file" in result.stderr
