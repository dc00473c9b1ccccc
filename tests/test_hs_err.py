"""hs_err parser: ground truth read by hand off 60 real logs, JDK format
variants, signatures, and robustness (mutated logs, huge streamed input)."""

from __future__ import annotations

import gzip
import io
import re
import tomllib
import tracemalloc
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from testdata import vendored

from coreepi.analyze import analyze
from coreepi.analyze.signature.jvm import normalize_cpp
from coreepi.model.report import CrashReport, Source
from coreepi.parse.jvm.hs_err import HsErrLimits, looks_like_hs_err, parse_hs_err

ROOT = Path(__file__).resolve().parents[1]
DATA = vendored("jvm-hs_err-krashpad")
EXPECTED: dict[str, dict[str, Any]] = tomllib.loads(
    (ROOT / "tests" / "data" / "hs_err_expected.toml").read_text(encoding="utf-8")
)


def hs_err_report(source: Any, **kwargs: Any) -> CrashReport | None:
    """parse_hs_err, then the one analyze() every artifact goes through
    (phenotypes and signature are analysis, not parsing)."""
    report = parse_hs_err(source, **kwargs)
    return None if report is None else analyze(report)


def _basename(path: str | None) -> str | None:
    return None if path is None else re.split(r"[/\\]", path)[-1]


def _parse_dataset(name: str) -> CrashReport:
    report = hs_err_report(DATA / f"{name}.txt")
    assert report is not None, f"{name}: no crash found"
    return report


def _error_kind(report: CrashReport) -> str | None:
    names = {p.name for p in report.phenotypes}
    if "jvm-native-oom" in names:
        return "native-oom"
    if "jvm-internal-error" in names:
        return "internal-error"
    return report.signal.name if report.signal else None


def _phenotype(report: CrashReport, name: str) -> dict[str, Any] | None:
    return next((p.evidence for p in report.phenotypes if p.name == name), None)


def _check(problems: list[str], field: str, got: object, want: object) -> None:
    if got != want:
        problems.append(f"{field}: got {got!r}, want {want!r}")


# --- ground truth: the 60 real logs ------------------------------------------------------


@pytest.mark.parametrize(
    "name", sorted(EXPECTED, key=lambda n: int(str(n).removeprefix("dataset")))
)
def test_real_log_matches_hand_read_values(name: str) -> None:
    want = EXPECTED[name]
    report = _parse_dataset(name)
    problems: list[str] = []
    assert report.source is Source.HS_ERR
    assert report.runtime.kind == "jvm"
    _check(problems, "jdk_version", report.runtime.version, want.get("jdk_version"))
    _check(problems, "vendor", report.runtime.vendor, want.get("vendor"))
    _check(problems, "error", _error_kind(report), want.get("error"))
    _check(problems, "pid", report.process.pid, want.get("pid"))
    _check(problems, "arch", report.arch, want.get("arch"))
    _check(problems, "os", report.host.os, want.get("os"))
    _check(problems, "kernel", report.host.kernel, want.get("kernel"))
    _check(problems, "cpu_model", report.host.cpu_model, want.get("cpu_model"))
    fms = [report.host.cpu_family, report.host.cpu_model_number, report.host.cpu_stepping]
    _check(problems, "cpu", fms if any(v is not None for v in fms) else None, want.get("cpu"))
    _check(problems, "microcode", report.host.microcode, want.get("microcode"))
    signal = report.signal
    _check(problems, "si_code", signal.si_code_name if signal else None, want.get("si_code"))
    _check(
        problems,
        "fault_address",
        signal.fault_address if signal else None,
        want.get("fault_address"),
    )
    captured = report.captured_at.isoformat() if report.captured_at else None
    _check(problems, "captured_at", captured, want.get("captured_at"))

    top = want.get("top")
    runtime_top = report.runtime.frames[0] if report.runtime.frames else None
    got_top = (
        None
        if runtime_top is None
        else {
            k: v
            for k, v in (
                ("kind", runtime_top.kind),
                ("function", runtime_top.function),
                ("file", runtime_top.file),
            )
            if v is not None
        }
    )
    _check(problems, "top", got_top, top)

    problematic = want.get("problematic")
    thread = report.crashed_thread
    # Only logs that show nothing of the crashing thread (an OOM header alone, two
    # fragments) have none; no thread is made up.
    assert (thread is None) == (name in ("dataset21", "dataset25", "dataset53"))
    if problematic is not None:
        assert thread is not None
        frame = thread.frames[0]
        kind = problematic["kind"]
        assert runtime_top is not None and runtime_top.kind == kind
        if "pc" in problematic:
            _check(problems, "problematic.pc", frame.pc, problematic["pc"])
        if "module" in problematic:
            _check(problems, "problematic.module", _basename(frame.module), problematic["module"])
            _check(problems, "problematic.offset", frame.module_offset, problematic["offset"])
        _check(problems, "problematic.function", frame.function, problematic.get("function"))
        if kind in "CV":
            _check(
                problems,
                "problematic.function_offset",
                frame.function_offset,
                problematic.get("function_offset"),
            )
        assert frame.trust.value == "context", (
            "frame 0 of a signal crash comes from the crash context"
        )
        # The frame kind drives the JVM phenotypes.
        native = _phenotype(report, "jvm-crash-in-native-library")
        if kind == "C" and "module" in problematic:
            assert native is not None and native["library"] == problematic["module"]
        else:
            assert native is None
        jit = _phenotype(report, "jvm-crash-in-jit-code")
        assert (jit is not None) == (kind in "Jv")
    if "internal_location" in want:
        _check(
            problems,
            "internal_location",
            _phenotype(report, "jvm-internal-error")["location"],  # type: ignore[index]
            want["internal_location"],
        )
    if "oom_size" in want:
        _check(
            problems,
            "oom_size",
            _phenotype(report, "jvm-native-oom")["size_bytes"],
            want["oom_size"],
        )  # type: ignore[index]
    partial = any(w.startswith("partial report: the log ends") for w in report.analysis.warnings)
    _check(
        problems, "complete", not partial and not report.core.truncated, want.get("complete", False)
    )
    assert not problems, f"{name}: " + "; ".join(problems)


def test_every_real_log_gives_a_report_with_a_stable_id() -> None:
    ids: dict[str, list[str]] = {}
    for path in sorted(DATA.glob("dataset*.txt")):
        report = hs_err_report(path)
        assert report is not None, path.name
        assert report == CrashReport.model_validate_json(report.model_dump_json())
        again = hs_err_report(path.read_text(encoding="utf-8"), name=str(path))
        assert again is not None and again.crash_id == report.crash_id, "same log, same id"
        ids.setdefault(report.crash_id, []).append(path.name)
        text = path.read_text(encoding="utf-8")
        if "jvm.error_line" in report.host.extra and "\n-----" in text:
            body = text.index("\n-----")  # the header identifies the crash; cut after it
            cut = hs_err_report(text[: body + (len(text) - body) // 2], name=str(path))
            assert cut is not None and cut.crash_id == report.crash_id, "truncated copy, same crash"
    # Distinct crashes get distinct ids; krashpad's set holds a few copies of one
    # crash (e.g. 35/37, 27/28, 44/51 share pid, time and error line).
    assert len(ids) >= 45


def test_signatures_of_real_logs() -> None:
    names = ("dataset2", "dataset3", "dataset4", "dataset5", "dataset23", "dataset27", "dataset35")
    signatures = {
        name: _parse_dataset(name).signature for name in (*names, "dataset39", "dataset42")
    }
    sig = {name: s.signature if s else None for name, s in signatures.items()}
    assert sig["dataset5"] == (
        "memcpy | FT_Stream_EnterFrame | sun.font.FreetypeFontScaler.getGlyphImageNative"
        " | sun.font.FreetypeFontScaler.getGlyphImage"
    )
    assert sig["dataset23"] == (
        "memcpy | ZIP_GetEntry2 | Java_java_util_zip_ZipFile_getEntry"
        " | java.util.zip.ZipFile.getEntry"
    )
    assert sig["dataset35"] == "sun.reflect.GeneratedMethodAccessor<N>.invoke"
    assert sig["dataset42"] == "OOM | JNIHandleBlock::allocate_block"
    assert sig["dataset3"].startswith("Internal Error (ciEnv.hpp:172) | ciField::ciField | ")
    assert (
        sig["dataset27"]
        == "OOM | mmap | PSVirtualSpace::expand_by | PSOldGen::expand_by | PSOldGen::expand"
    )
    assert sig["dataset2"] == "@0x0"
    assert sig["dataset39"] == "libjvm.so+0xa41ea4 | libjvm.so+0xa47cb7 | libjvm.so+0xa553c8"
    assert sig["dataset4"] == (
        "org.apache.activemq.artemis.nativo.jlibaio.LibaioContext.done"
        " | Java_org_apache_activemq_artemis_nativo_jlibaio_LibaioContext_blockedPoll"
    )
    signature = signatures["dataset3"]
    assert signature is not None
    trail = signature.trail
    assert trail[0].rule == "error-kind"
    assert any(
        step.rule == "skip-irrelevant-frame" and "report_and_die" in step.before for step in trail
    )


def test_oracle_vm_name_keeps_its_trademark() -> None:
    """Every Oracle log (``# Java VM: Java HotSpot(TM) 64-Bit Server VM
    (25.281-b09 mixed mode …)``): the VM's name runs to its details, the
    version is their first word (the "(TM)" once ended the name and was
    taken for the version)."""
    oracle = [p for p in sorted(DATA.glob("*.txt")) if b"# Java VM: Java HotSpot(TM)" in p.read_bytes()]
    assert len(oracle) == 12
    for path in oracle:
        extra = parse_hs_err(path).host.extra  # type: ignore[union-attr]
        assert extra["jvm.vm_name"] == "Java HotSpot(TM) 64-Bit Server VM", path.name
        assert re.fullmatch(r"25\.[0-9]+-b[0-9]{2}", extra["jvm.vm_version"]), path.name
        assert f"Server VM ({extra['jvm.vm_version']} mixed mode" in extra["jvm.vm"], path.name
    extra = parse_hs_err(DATA / "dataset59.txt").host.extra  # type: ignore[union-attr]
    assert (extra["jvm.vm_name"], extra["jvm.vm_version"]) == ("Java HotSpot(TM) 64-Bit Server VM", "25.281-b09")
    openjdk = parse_hs_err(DATA / "dataset45.txt").host.extra  # type: ignore[union-attr]
    assert openjdk["jvm.vm_name"].startswith("OpenJDK 64-Bit Server VM")


def test_real_log_details() -> None:
    report = _parse_dataset("dataset45")
    thread = report.crashed_thread
    assert thread is not None and thread.tid == 127576 and thread.name == "I/O dispatcher 30248931"
    assert thread.registers["rip"] == 0x7FD57E24AD0D and thread.registers["r8"] == 0
    libjvm = next(m for m in report.modules if m.path.endswith("libjvm.so"))
    assert libjvm.base == 0x7FD57D654000
    assert thread.frames[1].pc == libjvm.base + 0xA1279B  # rebuilt from Dynamic libraries
    assert report.host.extra["jvm.gc"] == "g1"
    assert "UseG1GC=true" in report.host.extra["jvm.flags"]
    assert report.process.cmdline[:2] == [
        "-D[Standalone]",
        "-Xlog:gc*:file=/path/to/gc.log:time,uptimemillis:filecount=5,filesize=3M",
    ]
    assert report.host.hypervisor == "vmware"
    listed = next(t for t in report.threads if t.tid == 1989)
    assert listed.name == "C1 CompilerThread0" and not listed.crashed and len(report.threads) == 33
    oom = _phenotype(_parse_dataset("dataset21"), "jvm-native-oom")
    assert oom is not None and (oom["allocator"], oom["size_bytes"], oom["purpose"]) == (
        "mmap",
        754974720,
        "committing reserved memory",
    )
    crash = _phenotype(_parse_dataset("dataset5"), "jvm-crash-in-native-library")
    assert (
        crash is not None
        and crash["library"] == "libc.so.6"
        and crash["culprit_library"] == "libfreetype.so.6"
    )
    gc = _parse_dataset("dataset31")  # GC thread crash: the Java frames are another thread's
    walked = next(t for t in gc.threads if t.tid == 76044)
    assert walked.frames[0].function == "java.lang.Thread.sleep(J)V"
    assert all(f.kind in "CV" for f in gc.runtime.frames)
    assert "jvm.compile_task" in _parse_dataset("dataset3").host.extra


# --- formats the sample set lacks (JDK 6/7, 17, 21; Windows; aarch64) ---------------------

JDK17 = """\
#
# A fatal error has been detected by the Java Runtime Environment:
#
#  SIGSEGV (0xb) at pc=0x00007f3b1c8a9f2e, pid=1, tid=23
#
# JRE version: OpenJDK Runtime Environment Temurin-17.0.8+7 (17.0.8+7) (build 17.0.8+7)
# Java VM: OpenJDK 64-Bit Server VM Temurin-17.0.8+7 (17.0.8+7, mixed mode, sharing, tiered, compressed oops, compressed class ptrs, g1 gc, linux-amd64)
# Problematic frame:
# C  [libc.so.6+0x1a0f2e]  __memmove_avx_unaligned_erms+0x6e
#
# Core dump will be written. Default location: Core dumps may be processed with "/usr/share/apport/apport -p%p -s%s -c%c -d%d -P%P -u%u -g%g -- %E" (or dumping to /app/core.1)
#
# If you would like to submit a bug report, please visit:
#   https://github.com/adoptium/adoptium-support/issues
# The crash happened outside the Java Virtual Machine in native code.
# See problematic frame for where to report the bug.
#

---------------  S U M M A R Y ------------

Command Line: -Xmx2g -XX:+UseG1GC -jar /app/service.jar --port 8080

Host: AMD EPYC 7R13 Processor, 4 cores, 7G, Ubuntu 22.04.2 LTS
Time: Tue Jul 25 10:00:00 2023 UTC elapsed time: 12.345678 seconds (0d 0h 0m 12s)

---------------  T H R E A D  ---------------

Current thread (0x00007f3b14027e40):  JavaThread "worker-1" [_thread_in_native, id=23, stack(0x00007f3b0c1f4000,0x00007f3b0c2f5000)]

Stack: [0x00007f3b0c1f4000,0x00007f3b0c2f5000],  sp=0x00007f3b0c2f2d48,  free space=1019k
Native frames: (J=compiled Java code, j=interpreted, Vv=VM code, C=native code)
C  [libc.so.6+0x1a0f2e]  __memmove_avx_unaligned_erms+0x6e
C  [libsnappyjava-1.1.8-2e3a4b5c-1234-5678-9abc-def012345678.so+0x5d11]  snappy::RawUncompress(char const*, unsigned long, char*)+0x31  (snappy.cc:1234)
j  org.xerial.snappy.SnappyNative.rawUncompress(JJJ)J+0
J 1234 c2 org.xerial.snappy.Snappy.uncompress([B)[B (33 bytes) @ 0x00007f3b0d5a1b2c [0x00007f3b0d5a1a80+0x00000000000000ac]
J 99% c1 com.example.Cache$$Lambda$123/0x0000000800c0b840.apply(Ljava/lang/Object;)Ljava/lang/Object; java.base@17.0.8 (16 bytes) @ 0x00007f3b0d5a2000 [0x00007f3b0d5a1f80+0x0000000000000080]
j  java.lang.Thread.run()V+11 java.base@17.0.8
v  ~StubRoutines::call_stub 0x00007f3b0d1a1cc6
V  [libjvm.so+0x8a3f45]  JavaCalls::call_helper(JavaValue*, methodHandle const&, JavaCallArguments*, JavaThread*)+0x315

siginfo: si_signo: 11 (SIGSEGV), si_code: 1 (SEGV_MAPERR), si_addr: 0x00007f3a00000000

Registers:
RAX=0x00007f3a00000000, RBX=0x0000000000000040, RCX=0x0000000000000040, RDX=0x0000000000000040
RSP=0x00007f3b0c2f2d48, RBP=0x00007f3b0c2f2d90, RSI=0x00007f3a00000000, RDI=0x00007f3b10000000
R8 =0x0000000000000000, R9 =0x0000000000000000, R10=0x0000000000000000, R11=0x0000000000000246
R12=0x0000000000000000, R13=0x0000000000000000, R14=0x0000000000000000, R15=0x00007f3b14027e40
RIP=0x00007f3b1c8a9f2e, EFLAGS=0x0000000000010287, CSGSFS=0x002b000000000033, ERR=0x0000000000000004
  TRAPNO=0x000000000000000e

XMM[0]=0x0000000000000000 0x0000000000000000
MXCSR=0x00001fa0

---------------  P R O C E S S  ---------------

Dynamic libraries:
7f3b1c709000-7f3b1c731000 r--p 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6
7f3b1c731000-7f3b1c8c6000 r-xp 00028000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6
7f3b1c8c6000-7f3b1c91e000 r--p 001bd000 08:01 1234 /usr/lib/x86_64-linux-gnu/libc.so.6

---------------  S Y S T E M  ---------------

OS:
PRETTY_NAME="Ubuntu 22.04.2 LTS"
NAME="Ubuntu"
uname: Linux 5.15.0-1034-aws #38-Ubuntu SMP Mon Mar 20 15:41:27 UTC 2023 x86_64
OS uptime: 12 days 3:04 hours
libc: glibc 2.35 NPTL 2.35

container (cgroup) information:
container_type: cgroupv2
memory_limit_in_bytes: 2147483648

KVM virtualization detected
CPU: total 4 (initial active 4) (2 cores per cpu, 2 threads per core) family 25 model 1 stepping 1 microcode 0xa0011d1, cx8, cmov, fxsr, ht, mmx
CPU Model and flags from /proc/cpuinfo:
model name	: AMD EPYC 7R13 Processor
flags		: fpu vme de pse

Memory: 4k page, physical 7947672k(5216328k free), swap 0k(0k free)

vm_info: OpenJDK 64-Bit Server VM (17.0.8+7) for linux-amd64 JRE (17.0.8+7), built on Jul 18 2023 00:00:00 by "temurin" with gcc 10.3.0

END.
"""


def test_jdk17_temurin_log() -> None:
    report = hs_err_report(JDK17)
    assert report is not None
    assert (report.runtime.version, report.runtime.vendor) == ("17.0.8+7", "Eclipse Adoptium")
    assert (
        report.signal is not None
        and report.signal.name == "SIGSEGV"
        and report.signal.si_code_name == "SEGV_MAPERR"
    )
    assert report.process.tid == 23 and report.process.cmdline[0] == "-Xmx2g"
    assert report.host.cpu_model == "AMD EPYC 7R13 Processor"
    assert (report.host.cpu_family, report.host.cpu_model_number, report.host.microcode) == (
        25,
        1,
        "0xa0011d1",
    )
    assert report.host.os == "Ubuntu 22.04.2 LTS" and report.host.kernel == "5.15.0-1034-aws"
    assert (
        report.host.hypervisor == "kvm"
        and report.host.extra["container.memory_limit_in_bytes"] == "2147483648"
    )
    assert report.captured_at == datetime.fromisoformat("2023-07-25T10:00:00+00:00")
    thread = report.crashed_thread
    assert thread is not None
    assert "xmm" not in " ".join(thread.registers) and thread.registers["trapno"] == 0xE
    libc = next(m for m in report.modules if m.path.endswith("libc.so.6"))
    assert libc.base == 0x7F3B1C709000 and thread.frames[0].module == libc.path
    assert thread.frames[1].file == "snappy.cc" and thread.frames[1].line == 1234
    compiled = report.runtime.frames[4]
    assert compiled.kind == "J" and compiled.function.startswith("com.example.Cache$$Lambda$123/0x")
    assert report.signature is not None
    assert report.signature.signature == (
        "memmove | snappy::RawUncompress | org.xerial.snappy.SnappyNative.rawUncompress"
        " | org.xerial.snappy.Snappy.uncompress"
    )
    native = _phenotype(report, "jvm-crash-in-native-library")
    assert (
        native is not None
        and native["system_library"]
        and native["culprit_library"].startswith("libsnappyjava")
    )
    assert not any(w.startswith("partial report") for w in report.analysis.warnings)


def test_the_process_is_named_as_the_jvm_core_names_it() -> None:
    # the defect: `coreepi inspect hs_err_pid10600.log` said "[hs_err] ? pid 10600";
    # the JVM's core of the same crash says "java pid 10600"
    from rich.console import Console

    from coreepi.reporting.crash_text import render_report

    exe = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java"
    mapped = JDK17.replace(
        "Dynamic libraries:\n",
        f"Dynamic libraries:\n5651fd947000-5651fd948000 r--p 00000000 fe:00 327901 {exe}\n"
        f"5651fd948000-5651fd949000 r-xp 00001000 fe:00 327901 {exe}\n")
    report = hs_err_report(mapped)
    assert report is not None
    assert (report.process.comm, report.process.exe, report.process.pid) == ("java", exe, 1)
    console = Console(width=120, record=True, file=io.StringIO())
    render_report(report, console)
    assert console.export_text().startswith("[hs_err] java pid 1 kernel 5.15.0-1034-aws killed by")
    # a trimmed log without the mapping: the standard launcher still says `java`
    launched = JDK17.replace("\n---------------  S Y S T E M", "\nVM Arguments:\n"
                             "java_command: /app/service.jar\nLauncher Type: SUN_STANDARD\n"
                             "\n---------------  S Y S T E M")
    report = hs_err_report(launched)
    assert report is not None and (report.process.comm, report.process.exe) == ("java", None)
    # a custom launcher embedding the JVM (or no word of it): not guessed
    custom = launched.replace("SUN_STANDARD", "generic")
    report = hs_err_report(custom)
    assert report is not None and (report.process.comm, report.process.exe) == (None, None)
    # Windows: the image name, as Task Manager shows it
    windows = hs_err_report(vendored("jvm-hs_err-krashpad-windows") / "dataset82.txt")
    assert windows is not None and windows.process.comm == "java.exe"
    assert windows.process.exe == r"D:\path\java\java-11-openjdk-11.0.8.10-2\bin\java.exe"


def test_jit_addresses_and_generated_names_do_not_make_new_signatures() -> None:
    other = (
        JDK17.replace(
            "0x00007f3b0d5a1b2c [0x00007f3b0d5a1a80+0x00000000000000ac]",
            "0x00007f99aa000010 [0x00007f99aa000000+0x0000000000000010]",
        )
        .replace("J 1234 c2", "J 98765 c1")
        .replace("(33 bytes)", "(31 bytes)")
        .replace("pid=1,", "pid=7,")
    )
    first, second = hs_err_report(JDK17), hs_err_report(other)
    assert first is not None and second is not None
    assert first.signature is not None and second.signature is not None
    assert first.signature.signature == second.signature.signature
    assert first.signature.frames_used == second.signature.frames_used
    assert first.crash_id != second.crash_id
    lambda_frame = JDK17.replace(
        "j  org.xerial.snappy.SnappyNative.rawUncompress(JJJ)J+0\n", ""
    ).replace(
        "J 1234 c2 org.xerial.snappy.Snappy.uncompress([B)[B (33 bytes) @ 0x00007f3b0d5a1b2c "
        "[0x00007f3b0d5a1a80+0x00000000000000ac]\n",
        "",
    )
    report = hs_err_report(lambda_frame)
    assert report is not None and report.signature is not None
    assert "com.example.Cache$$Lambda$<N>.apply" in report.signature.signature


JDK6 = """\
#
# A fatal error has been detected by the Java Runtime Environment:
#
#  SIGSEGV (0xb) at pc=0x00002b1d4f6e3b5a, pid=31337, tid=1098373440
#
# JRE version: 6.0_45-b06
# Java VM: Java HotSpot(TM) 64-Bit Server VM (20.45-b01 mixed mode linux-amd64 compressed oops)
# Problematic frame:
# V  [libjvm.so+0x6b3b5a]  PhaseIdealLoop::build_loop_late_post(Node*)+0x13a
#
# An error report file with more information is saved as:
# /tmp/hs_err_pid31337.log
#

---------------  T H R E A D  ---------------

Current thread (0x000000004a5cb800):  JavaThread "C2 CompilerThread1" daemon [_thread_in_native, id=31351, stack(0x0000000041795000,0x0000000041896000)]

siginfo:si_signo=SIGSEGV: si_errno=0, si_code=1 (SEGV_MAPERR), si_addr=0x0000000000000010
"""


def test_jdk6_log() -> None:
    report = hs_err_report(JDK6)
    assert report is not None
    assert (report.runtime.version, report.runtime.vendor) == ("1.6.0_45-b06", "Oracle")
    assert (
        report.signal is not None
        and report.signal.fault_address == 0x10
        and report.signal.si_code == 1
    )
    assert report.process.tid == 31351
    assert _phenotype(report, "null-deref") == {
        "fault_address": "0x10",
        "si_code": "SEGV_MAPERR",
        "offset_from_null": 16,
    }
    assert (
        report.signature is not None
        and report.signature.signature == "PhaseIdealLoop::build_loop_late_post"
    )
    assert any(w.startswith("partial report: the log ends") for w in report.analysis.warnings)


WINDOWS = """\
#
# A fatal error has been detected by the Java Runtime Environment:
#
#  EXCEPTION_ACCESS_VIOLATION (0xc0000005) at pc=0x00007ffb3c1e2a10, pid=4242, tid=9876
#
# JRE version: OpenJDK Runtime Environment Microsoft-8035246 (17.0.9+8) (build 17.0.9+8-LTS)
# Java VM: OpenJDK 64-Bit Server VM Microsoft-8035246 (17.0.9+8-LTS, mixed mode, tiered, compressed oops, compressed class ptrs, g1 gc, windows-amd64)
# Problematic frame:
# C  [nvoglv64.dll+0x2a10]
#

---------------  T H R E A D  ---------------

siginfo: EXCEPTION_ACCESS_VIOLATION (0xc0000005), writing address 0x0000000000000018
"""


def test_windows_exception() -> None:
    report = hs_err_report(WINDOWS)
    assert report is not None and report.signal is not None
    # NTSTATUS 0xC0000005 as the signed 32-bit value Windows reports it as (-1073741819)
    assert (report.signal.number, report.signal.name) == (-0x3FFFFFFB, "EXCEPTION_ACCESS_VIOLATION")
    assert (report.signal.si_code_name, report.signal.fault_address) == (
        "EXCEPTION_WRITE_FAULT",
        0x18,
    )
    assert report.runtime.vendor == "Microsoft" and report.process.tid == 9876
    assert {p.name for p in report.phenotypes} >= {"null-deref", "jvm-crash-in-native-library"}
    assert report.signature is not None and report.signature.signature == "nvoglv64.dll+0x2a10"



def test_real_windows_log_is_stored(tmp_path: Path) -> None:
    """A real Windows log (krashpad's dataset82, tests/data/NOTICE): its
    exception code 0xC0000005 overflowed the store's INT32 signal_number and
    the crash was never stored. It is kept named, its number in range."""
    from typer.testing import CliRunner

    from coreepi.cli.main import app
    from coreepi.store import DuckDBStore

    crashes = tmp_path / "crashes"
    crashes.mkdir()
    log = crashes / "hs_err_pid2804.log"
    log.write_bytes((vendored("jvm-hs_err-krashpad-windows") / "dataset82.txt").read_bytes())
    (crashes / "hs_err_pid2804.log.json").write_text(
        '{"host_id": "win1", "captured_at": "2022-09-28T03:06:07Z"}')
    data = tmp_path / "store"
    result = CliRunner().invoke(app, ["ingest", "--data-dir", str(data), str(crashes)])
    assert result.exit_code == 0, result.output
    with DuckDBStore(data) as store:
        rows = store._query(
            "SELECT host_id, source, signal, signal_number FROM crashes").fetchall()
    assert rows == [("win1", "hs_err", "EXCEPTION_ACCESS_VIOLATION", -1073741819)]
    report = hs_err_report(log)
    assert report is not None and report.signal is not None
    assert (report.signal.si_code_name, report.signal.fault_address) == (
        "EXCEPTION_READ_FAULT", 0xFFFFFFFFFFFFFFFF)
    assert report.process.pid == 2804
    assert report.runtime.version == "11.0.8+10-LTS" and report.arch == "x86_64"
    assert report.signature is not None and report.signature.signature.startswith("jvm.dll")

INTERNAL_JDK21 = """\
#
# A fatal error has been detected by the Java Runtime Environment:
#
#  Internal Error (/builddir/build/BUILD/java-21-openjdk/src/hotspot/share/gc/g1/g1ConcurrentMark.cpp:1234), pid=77, tid=91
#  assert(_finger >= _region_limit) failed: finger 0x0000000712345678 region limit
#  0x0000000712000000
#
# JRE version: OpenJDK Runtime Environment (Red_Hat-21.0.1.0.12-2) (21.0.1+12) (build 21.0.1+12-LTS)
# Java VM: OpenJDK 64-Bit Server VM (Red_Hat-21.0.1.0.12-2) (21.0.1+12-LTS, mixed mode, sharing, tiered, compressed oops, compressed class ptrs, g1 gc, linux-aarch64)

---------------  T H R E A D  ---------------

Current thread (0x0000ffff8c01a000):  WorkerThread "G1 Conc#0"       [id=91, stack(0x0000ffff70e00000,0x0000ffff71000000) (2048K)]

Stack: [0x0000ffff70e00000,0x0000ffff71000000],  sp=0x0000ffff70ffe3b0,  free space=2040k
Native frames: (J=compiled Java code, j=interpreted, Vv=VM code, C=native code)
V  [libjvm.so+0xa1b2c4]  VMError::report_and_die(Thread*, unsigned int, unsigned char*, void*, void*, char const*, ...)+0x1a4  (vmError.cpp:1234)
V  [libjvm.so+0x5c0e10]  report_vm_error(char const*, int, char const*, char const*, ...)+0x10c  (debug.cpp:191)
V  [libjvm.so+0x6d11f0]  G1CMTask::do_marking_step(double, bool, bool)+0x6a0  (g1ConcurrentMark.cpp:1234)
V  [libjvm.so+0x6d22a8]  G1CMConcurrentMarkingTask::work(unsigned int)+0x128  (g1ConcurrentMark.cpp:567)

Registers:
R0=0x0000000000000000
R1=0x0000ffff8c01a000
"""


def test_internal_error_jdk21_aarch64() -> None:
    report = hs_err_report(INTERNAL_JDK21)
    assert report is not None
    assert (report.runtime.version, report.runtime.vendor, report.arch) == (
        "21.0.1+12-LTS",
        "Red Hat",
        "aarch64",
    )
    internal = _phenotype(report, "jvm-internal-error")
    assert internal is not None
    assert (
        internal["file"].endswith("g1ConcurrentMark.cpp"),
        internal["line"],
        internal["assertion"],
    ) == (True, 1234, "assert")
    assert internal["message"].startswith("assert(_finger >= _region_limit) failed")
    assert report.signature is not None
    assert report.signature.signature == (
        "Internal Error (g1ConcurrentMark.cpp:1234) | G1CMTask::do_marking_step"
        " | G1CMConcurrentMarkingTask::work"
    )
    thread = report.crashed_thread
    assert thread is not None and thread.tid == 91 and thread.name == "G1 Conc#0"
    assert thread.registers == {"x0": 0, "x1": 0xFFFF8C01A000}
    assert thread.frames[2].file == "g1ConcurrentMark.cpp"
    assert any(w.startswith("frame pcs unknown for 4 of 4") for w in report.analysis.warnings)


def test_native_oom_jdk21_error_detail() -> None:
    text = (
        "#\n# There is insufficient memory for the Java Runtime Environment to continue.\n"
        "# Native memory allocation (mmap) failed to map 65536 bytes. Error detail: committing reserved memory.\n"
        "#  Out of Memory Error (os_linux.cpp:2774), pid=8, tid=9\n"
    )
    report = hs_err_report(text)
    assert report is not None and report.signature is not None
    oom = _phenotype(report, "jvm-native-oom")
    assert oom is not None and (oom["allocator"], oom["size_bytes"], oom["purpose"]) == (
        "mmap",
        65536,
        "committing reserved memory",
    )
    assert report.signature.signature == "OOM | mmap"


def test_second_log_in_one_file_is_not_mixed_in() -> None:
    text = JDK6 + "\n---------------  S Y S T E M  ---------------\n\nOS:A\n" + JDK17
    report = hs_err_report(text)
    assert report is not None and report.process.pid == 31337 and report.host.os == "A"
    assert any("second crash log" in w for w in report.analysis.warnings)


# --- normalization --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("symbol", "normalized"),
    [
        (
            "void ShenandoahConcurrentMark::mark_loop_work<ShenandoahMarkRefsClosure, true>(ShenandoahMarkRefsClosure*)",
            "ShenandoahConcurrentMark::mark_loop_work<T>",
        ),
        (
            "JNIHandleBlock*JNIHandleBlock::allocate_block(Thread*)",
            "JNIHandleBlock::allocate_block",
        ),
        (
            "jni_invoke_nonstatic(JNIEnv_*, JavaValue*) [clone .constprop.109]",
            "jni_invoke_nonstatic",
        ),
        ("Thread::print_on(outputStream*, bool) const", "Thread::print_on"),
        (
            "MetadataOnStackMark::~MetadataOnStackMark()",
            "MetadataOnStackMark::~MetadataOnStackMark",
        ),
        ("operator new(unsigned long)", "operator new"),
        ("(anonymous namespace)::Foo::bar(int)", "(anonymous namespace)::Foo::bar"),
        (
            "std::vector<int>::_M_realloc_insert(int&&) [clone .isra.0]",
            "std::vector<T>::_M_realloc_insert",
        ),
        ("foo::bar[abi:cxx11]() const", "foo::bar"),
        ("baz.constprop.0", "baz"),
        ("cairo_region_num_rectangles", "cairo_region_num_rectangles"),
    ],
)
def test_normalize_cpp(symbol: str, normalized: str) -> None:
    assert normalize_cpp(symbol) == normalized


def test_a_crash_whose_report_cannot_be_built_is_still_counted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from coreepi.parse.jvm import hs_err

    def broken(*args: object, **kwargs: object) -> CrashReport:
        raise ValueError("boom")

    monkeypatch.setattr(hs_err, "build_report", broken)
    report = parse_hs_err(JDK6)
    assert report is not None and report.source is Source.HS_ERR
    assert report.analysis.warnings == ["partial report: parser error ValueError: boom"]


def test_unreadable_path_raises_oserror(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        parse_hs_err(tmp_path / "missing.log")


# --- no crash found, sniffing -----------------------------------------------------------------

# The head of an OpenJ9 javacore (the tagged sections of OpenJ9's "Java dump"
# format, as its documentation shows them): a JVM crash report, but not
# HotSpot's; this parser must refuse it, not read it as a fragment.
_JAVACORE = """\
0SECTION       TITLE subcomponent dump routine
NULL           ===============================
1TICHARSET     UTF-8
1TISIGINFO     Dump Event "gpf" (00002000) received
1TIDATETIMEUTC Date: 2021/03/16 at 13:34:56:123 (UTC)
1TIFILENAME    Javacore filename:    /tmp/javacore.20210316.143456.1234.0002.txt
1TIEVENT       Detected a gpf
NULL           ------------------------------------------------------------------------
0SECTION       GPINFO subcomponent dump routine
NULL           ================================
2XHOSLEVEL     OS Level         : Linux 4.18.0-240.el8.x86_64
3XHCPUARCH       Architecture   : amd64
1XHEXCPCODE    Signal_Number: 0000000B
1XHEXCPMODULE  Module: /opt/java/openjdk/lib/default/libj9vm29.so
0SECTION       ENVINFO subcomponent dump routine
1CIJAVAVERSION JRE 11 Linux amd64-64 (build 11.0.10+9)
1CIVMVERSION   20210120_899
3XMTHREADINFO      "main" J9VMThread:0x0000000000021B00, state:R, prio=5
4XESTACKTRACE                at java/lang/Thread.sleep(Native Method)
"""



@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "hello world\n",
        "OS: Linux\nuname: Linux 5.4 x86_64\n",
        "# just a comment\n",
        'Traceback (most recent call last):\n  File "x.py", line 1\n',
        "\x00\x01\x02" * 1000,
        _JAVACORE,
    ],
)
def test_not_an_hs_err_log_is_no_crash(text: str) -> None:
    assert hs_err_report(text) is None
    assert not looks_like_hs_err(text.encode())


def test_sniffing_and_compressed_paths(tmp_path: Path) -> None:
    for path in sorted(DATA.glob("dataset*.txt")):
        assert looks_like_hs_err(path.read_bytes()[:4096]), path.name
    packed = tmp_path / "hs_err_pid26950.log.gz"
    packed.write_bytes(gzip.compress((DATA / "dataset11.txt").read_bytes()))
    report = hs_err_report(packed)
    assert report is not None and report.process.pid == 26950 and report.core.sha256 is not None
    with open(DATA / "dataset11.txt", "rb") as handle:  # binary and text file objects too
        from_binary = hs_err_report(handle)
    with open(DATA / "dataset11.txt", encoding="utf-8") as text:
        from_text = hs_err_report(text)
    assert from_binary is not None and from_text is not None
    assert from_binary.crash_id == from_text.crash_id == report.crash_id
    assert looks_like_hs_err(JDK17.encode()) and looks_like_hs_err(b"\xff\xfe" + JDK6.encode())


KERNEL_LOGS = vendored("kernel-oops-syzkaller")


def test_kernel_logs_are_not_hs_err_logs() -> None:
    """747 real kernel crash logs: no false hs_err sniff, no false crash."""
    for path in sorted(KERNEL_LOGS.iterdir()):
        data = path.read_bytes()
        assert not looks_like_hs_err(data), path.name
        assert hs_err_report(data) is None, path.name


# --- robustness: mutated real logs -----------------------------------------------------------

_SAMPLES = sorted(DATA.glob("dataset*.txt"))
_TEXTS = [p.read_bytes() for p in _SAMPLES] + [
    JDK17.encode(),
    JDK6.encode(),
    INTERNAL_JDK21.encode(),
]


@st.composite
def mutated_logs(draw: st.DrawFn) -> bytes:
    data = bytearray(draw(st.sampled_from(_TEXTS)))
    for _ in range(draw(st.integers(1, 6))):
        op = draw(st.sampled_from(["truncate", "delete", "duplicate", "flip", "garbage", "swap"]))
        size = len(data)
        at = draw(st.integers(0, max(size - 1, 0)))
        if op == "truncate":
            del data[at:]
        elif op == "delete":
            del data[at : at + draw(st.integers(1, 2000))]
        elif op == "duplicate":
            chunk = data[at : at + draw(st.integers(1, 3000))]
            data[at:at] = chunk * draw(st.integers(1, 3))
        elif op == "flip" and size:
            for _ in range(draw(st.integers(1, 20))):
                pos = draw(st.integers(0, size - 1))
                data[pos] ^= 1 << draw(st.integers(0, 7))
        elif op == "garbage":
            data[at:at] = draw(st.binary(max_size=300) | st.text(max_size=300).map(str.encode))
        elif op == "swap":
            lines = bytes(data).split(b"\n")
            i, j = draw(st.integers(0, len(lines) - 1)), draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
            data = bytearray(b"\n".join(lines))
    return bytes(data)


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(mutated_logs())
def test_mutated_logs_never_raise(data: bytes) -> None:
    for source in (data, data.decode("utf-8", "replace"), io.BytesIO(data)):
        report = hs_err_report(source)
        assert report is None or isinstance(report, CrashReport)
        if report is not None:
            assert len(report.crash_id) == 32
            assert not any("parser error" in w for w in report.analysis.warnings), (
                "no fallback needed"
            )
            assert CrashReport.model_validate_json(report.model_dump_json()) == report


_HOSTILE_LINES = (
    "#  SIGSEGV (0xb) at pc=0x0, pid=1, tid=2", "# Problematic frame:", "# C  [a+0x1]  f+0x2",
    "# V  [libjvm.so+0xffffffffffffffff]  f+0x1", "Registers:", "RAX=0xffffffffffffffffff",
    "Native frames:", "J 1 C2 a.b()V (1 bytes) @ 0x1 [0x0+0x1]", "C  [libjvm.so+0xfffffffffffffff0]",
    "OS:", "CPU:total 1", "Dynamic libraries:", "0-1 r-xp 0 0:0 0 /x",
    "ffffffffffffff00-ffffffffffffffff r-xp 00000000 0:0 0 /libjvm.so",
    "siginfo: si_signo: 99999999999999999999 (SIGX)", "siginfo: si_addr: 0x123456789012345678",
    "Stack: [0xffffffffffffffff,0x0],  sp=0x1", "vm_info: x", "time: Mon Feb 30 99:99:99 2020",
    "timezone: +99", "Host: a, b, 1 cores, 1G, c", "", "[Global flags]",
    "container (cgroup) information:", "x: y", "/proc/cpuinfo:", "microcode : zz", "END.",
    "Current thread (0x0):  JavaThread \"\" [id=99999999999999999999999]", "Java Threads:",
    "=>0x1 JavaThread \"x\" [_thread_in_vm, id=-1, stack(0x2,0x1)]",
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_HOSTILE_LINES), max_size=40), st.text(max_size=50))
def test_shuffled_section_lines_never_raise(lines: list[str], noise: str) -> None:
    report = hs_err_report([*lines, noise])
    assert report is None or isinstance(report, CrashReport)
    if report is not None:
        assert not any("parser error" in w for w in report.analysis.warnings), "no fallback needed"


# --- streaming: bounded memory whatever the size ---------------------------------------------


def _huge_log(events: int, mappings: int) -> Iterator[str]:
    yield from JDK17.split("\n---------------  P R O C E S S")[0].splitlines()
    yield "---------------  P R O C E S S  ---------------"
    yield f"Events ({events} events):"
    for i in range(events):
        yield f"Event: {i}.{i % 1000:03d} Thread 0x00007f3b14027e40 DEOPT PACKING pc=0x{i:016x} sp=0x00007f3b0c2f2d48"
    yield ""
    yield "Dynamic libraries:"
    for i in range(mappings):
        yield f"{0x10000000 + i * 0x2000:x}-{0x10001000 + i * 0x2000:x} r-xp 00000000 08:01 {i} /opt/lib/lib{i}.so"
    yield ""
    yield from JDK17.split("---------------  S Y S T E M  ---------------")[1].splitlines()


def test_huge_input_is_streamed_in_bounded_memory() -> None:
    limits = HsErrLimits(max_mappings=2000)
    tracemalloc.start()
    try:
        report = parse_hs_err(_huge_log(events=150_000, mappings=40_000), limits=limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # ~20 MB of log text went through (tracemalloc makes more slow); only the capped facts stay.
    assert peak < 12 * 2**20, f"peak {peak / 2**20:.1f} MiB"  # measured: ~4 MiB at any size
    assert report is not None and report.host.os == "Ubuntu 22.04.2 LTS"
    assert len(report.memory_map) == 2000
    assert any(
        "38000 'Dynamic libraries' lines beyond the cap" in w for w in report.analysis.warnings
    )


class _EndlessLine(io.RawIOBase):
    """A binary stream of ``size`` bytes with no newline after the header."""

    def __init__(self, size: int) -> None:
        self.head = JDK6.encode()
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.head:
            n = min(len(buffer), len(self.head))
            buffer[:n], self.head = self.head[:n], self.head[n:]
            return n
        n = min(len(buffer), self.left)
        buffer[:n] = b"A" * n
        self.left -= n
        return n


def test_one_giant_line_costs_one_line_of_memory() -> None:
    tracemalloc.start()
    try:
        report = parse_hs_err(io.BufferedReader(_EndlessLine(64 * 2**20)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * 2**20, f"peak {peak / 2**20:.1f} MiB"
    assert report is not None and report.process.pid == 31337
    assert report.core.size_bytes == len(JDK6.encode()) + 64 * 2**20


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.mark.slow
def test_two_gigabyte_log() -> None:
    """The issue's worst case: a 2 GB log, streamed; resident memory must not grow with it."""
    if not Path("/proc/self/status").exists():
        pytest.skip("needs /proc to read resident memory")
    samples: list[int] = []
    line = (
        "Event: 1.000 Thread 0x00007f3b14027e40 Exception <a 'java/lang/NullPointerException'> thrown "
        + "x" * 100
    )

    def lines() -> Iterator[str]:
        yield from JDK6.splitlines()
        for i in range(2 * 2**30 // (len(line) + 1)):
            if i % 2_000_000 == 0:
                samples.append(_rss())
            yield line

    report = parse_hs_err(lines())
    assert report is not None and report.process.pid == 31337
    assert max(samples) - samples[0] < 64 * 2**20
