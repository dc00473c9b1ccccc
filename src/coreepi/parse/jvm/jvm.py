"""What an hs_err log says about the JVM and the host: version, vendor,
architecture, time of the crash, OS, kernel, CPU, memory, container.

Pure functions over :class:`~coreepi.parse.jvm.scan.HsErrFacts`. The
vendor is inferred from explicit evidence only (vendor strings in the
version lines, the bug-report URL, the build user in ``vm_info``, an RPM
install path); when none is there, the vendor stays unknown rather than
guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Final

from coreepi.model.report import HostFacts
from coreepi.model.trusted import trusted
from coreepi.parse.jvm.facts import HsErrFacts

__all__ = ["JvmFacts", "crash_time", "host_facts", "jvm_facts"]


@dataclass
class JvmFacts:
    """The JVM that crashed. ``version``: the full build string
    (``1.8.0_262-b10``, ``11.0.9+11-LTS``); ``major``: 8, 11, 17 …;
    ``vendor_evidence``: why ``vendor`` was chosen."""

    version: str | None = None
    major: int | None = None
    vendor: str | None = None
    vendor_evidence: str | None = None
    runtime_name: str | None = None
    vm_name: str | None = None
    vm_version: str | None = None
    platform: str | None = None
    arch: str | None = None
    builder: str | None = None
    build_date: str | None = None
    build_compiler: str | None = None
    gc: str | None = None
    extra: dict[str, str] = field(default_factory=dict)


_JRE_TAIL: Final = re.compile(r"\((?P<release>[^()]*)\)\s*\(build (?P<build>[^()]*)\)\s*$")
_BARE_RELEASE: Final = re.compile(r"^(?P<release>\d+(?:\.\d+)*(?:[._+-]\S*)?)$")
_VM_INFO: Final = re.compile(
    r"^(?P<vm>.*?) for (?P<platform>\S+) JRE (?P<jre>(?:\([^()]*\)\s*)+),?\s*built on (?P<date>.+?)"
    r"(?: by \"(?P<builder>[^\"]*)\")?(?: with (?P<compiler>.*))?$"
)
_PARENS: Final = re.compile(r"\(([^()]*)\)")
# a VM's details are its last parenthesised group; "(TM)" is part of its name
_VM_DETAILS: Final = re.compile(r"\s*\(([^()]*)\)\s*$")
_PLATFORM: Final = re.compile(r"\b(linux|windows|solaris|bsd|macosx|darwin|aix)-([a-z0-9_]+)\b")
_GC_TOKEN: Final = re.compile(
    r"\b(g1|parallel|serial|z|shenandoah|epsilon|concurrent mark sweep) gc\b"
)
_GC_FLAGS: Final = (
    ("UseG1GC", "g1"), ("UseZGC", "z"), ("UseShenandoahGC", "shenandoah"),
    ("UseConcMarkSweepGC", "cms"), ("UseParallelOldGC", "parallel"), ("UseParallelGC", "parallel"),
    ("UseSerialGC", "serial"), ("UseEpsilonGC", "epsilon"), ("UseParNewGC", "cms"),
)  # fmt: skip
_ARCH: Final = {
    "amd64": "x86_64", "x86_64": "x86_64", "x64": "x86_64", "x86": "x86", "i386": "x86",
    "i486": "x86", "i586": "x86", "i686": "x86", "aarch64": "aarch64", "arm64": "aarch64",
    "arm": "arm", "ppc64le": "ppc64le", "ppc64": "ppc64", "ppc": "ppc", "s390x": "s390x",
    "sparc": "sparcv9", "sparcv9": "sparcv9", "riscv64": "riscv64", "loongarch64": "loongarch64",
    "sun4v": "sparcv9", "sun4u": "sparcv9", "i86pc": "x86_64", "ia64": "ia64",
}  # fmt: skip
_MACHINE: Final = re.compile(
    r"\b(x86_64|amd64|aarch64|arm64|ppc64le|ppc64|s390x|riscv64|loongarch64|i[3-6]86"
    r"|sun4v|sun4u|i86pc)\b"
)

# Vendor evidence, strongest first. Vendor strings printed in the version
# lines (JDK 11+ "vendor version", Zulu's and Corretto's build names) …
_VENDOR_TOKENS: Final = (
    ("Zulu", "Azul"), ("Temurin", "Eclipse Adoptium"), ("AdoptOpenJDK", "AdoptOpenJDK"),
    ("Corretto", "Amazon"), ("Microsoft", "Microsoft"), ("SapMachine", "SAP"),
    ("JBR", "JetBrains"), ("JetBrains", "JetBrains"), ("Red_Hat", "Red Hat"),
    ("Red Hat", "Red Hat"), ("BellSoft", "BellSoft"), ("Liberica", "BellSoft"),
    ("Dragonwell", "Alibaba"), ("Kona", "Tencent"), ("Bisheng", "Huawei"), ("Semeru", "IBM"),
    ("IBM", "IBM"), ("Oracle GraalVM", "Oracle"), ("GraalVM CE", "GraalVM Community"),
    ("GraalVM", "Oracle"), ("Mandrel", "Red Hat"), ("Homebrew", "Homebrew"), ("Ubuntu", "Ubuntu"),
    ("Debian", "Debian"), ("Java(TM) SE", "Oracle"), ("HotSpot(TM)", "Oracle"),
)  # fmt: skip
# … the bug-report URL HotSpot prints (OpenJDK's default, bugreport.java.com, says nothing) …
_VENDOR_URLS: Final = (
    ("redhat.com", "Red Hat"), ("azul", "Azul"), ("adoptium", "Eclipse Adoptium"),
    ("adoptopenjdk", "AdoptOpenJDK"), ("amazon", "Amazon"), ("aws", "Amazon"),
    ("microsoft", "Microsoft"), ("sap.com", "SAP"), ("sapmachine", "SAP"), ("bell-sw", "BellSoft"),
    ("jetbrains", "JetBrains"), ("launchpad.net", "Ubuntu"), ("bugs.debian.org", "Debian"),
    ("graalvm", "Oracle"),
)  # fmt: skip
# … the build user of vm_info (the vendors' build farms) …
_VENDOR_BUILDERS: Final = {
    "mockbuild": "Red Hat", "java_re": "Oracle", "mach5one": "Oracle", "zulu_re": "Azul",
}  # fmt: skip
# … and last, a Red Hat RPM install path (java-11-openjdk-11.0.9.11-0.el8_2.x86_64).
_RPM_PATH: Final = re.compile(
    r"java-(?:1\.\d\.0|\d+)-openjdk-[0-9][\w.+-]*?\.(?:el\d*|fc\d+)[\w.+-]*"
)


def _release_to_version(release: str) -> str:
    """``8.0_262-b10`` (the JRE line's release) -> ``1.8.0_262-b10`` (the build
    string JDK 8 and older print everywhere else)."""
    match = re.match(r"^([1-8])\.0(.*)$", release)
    return f"1.{match[1]}.0{match[2]}" if match else release


def _major(version: str | None) -> int | None:
    match = re.match(r"^(?:1\.)?(\d+)", version or "")
    return int(match[1]) if match else None


def _vendor(facts: HsErrFacts, jvm: JvmFacts, texts: list[str]) -> tuple[str | None, str | None]:
    for text in texts:
        for token, vendor in _VENDOR_TOKENS:
            if token in text:
                return vendor, f"version string {text!r}"
    if facts.bug_url:
        url = facts.bug_url.lower()
        for token, vendor in _VENDOR_URLS:
            if token in url:
                return vendor, f"bug-report URL {facts.bug_url}"
    if jvm.builder and jvm.builder in _VENDOR_BUILDERS:
        return _VENDOR_BUILDERS[jvm.builder], f'vm_info build user "{jvm.builder}"'
    # AdoptOpenJDK built JDK 8 for Linux on CentOS 6 with devtoolset-2, under Jenkins.
    if jvm.builder == "jenkins" and "(Red Hat 4.8.2-15)" in (jvm.build_compiler or ""):
        return "AdoptOpenJDK", 'vm_info build user "jenkins" with devtoolset-2 gcc 4.8.2'
    for mapping in facts.mappings:
        path = mapping[4]
        in_jdk = path and (
            path.endswith(("libjvm.so", "jvm.dll")) or "/jre/lib/" in path or "/lib/" in path
        )
        if in_jdk and (match := _RPM_PATH.search(path or "")):
            return "Red Hat", f"RPM install path {match[0]}"
    return None, None


def _vm_name(text: str) -> tuple[str | None, str]:
    """(VM name, the text of its trailing parenthesised details or '') of
    ``Java HotSpot(TM) 64-Bit Server VM (25.281-b09 mixed mode …)``."""
    match = _VM_DETAILS.search(text)
    name = text[: match.start()] if match else text
    return name.strip() or None, match[1].strip() if match else ""


def jvm_facts(facts: HsErrFacts) -> JvmFacts:
    """Version, vendor, VM and build of the crashed JVM."""
    jvm = JvmFacts()
    vendor_texts: list[str] = []
    release = build = None
    if facts.jre_version:
        if match := _JRE_TAIL.search(facts.jre_version):
            release, build = match["release"].strip(), match["build"].strip()
            jvm.runtime_name = facts.jre_version[: match.start()].strip() or None
        elif match := _BARE_RELEASE.match(facts.jre_version.strip()):
            release = match["release"]
        if jvm.runtime_name:
            vendor_texts.append(jvm.runtime_name)
    if facts.java_vm:
        jvm.vm_name, details = _vm_name(facts.java_vm)
        if details:
            jvm.vm_version = details.replace(",", " ").split()[0]
        if platform := _PLATFORM.search(facts.java_vm):
            jvm.platform = platform[0]
        if gc := _GC_TOKEN.search(facts.java_vm):
            jvm.gc = {"concurrent mark sweep": "cms"}.get(gc[1], gc[1])
        vendor_texts.append(facts.java_vm)
    vm_info_version = None
    if facts.vm_info and (match := _VM_INFO.match(facts.vm_info)):
        groups = _PARENS.findall(match["jre"])
        vm_info_version = groups[-1].strip() if groups else None
        vendor_texts.extend(g for g in groups[:-1])
        jvm.platform = jvm.platform or match["platform"]
        jvm.builder = match["builder"] or None
        jvm.build_date = " ".join(match["date"].split())
        jvm.build_compiler = match["compiler"]
        if not jvm.vm_name:
            jvm.vm_name = _vm_name(match["vm"])[0]
        vendor_texts.append(match["vm"])
    jvm.version = build or vm_info_version or (_release_to_version(release) if release else None)
    jvm.major = _major(jvm.version)
    jvm.vendor, jvm.vendor_evidence = _vendor(facts, jvm, vendor_texts)
    if jvm.gc is None:
        flags = " ".join(filter(None, [facts.jvm_args, facts.command_line, " ".join(facts.flags)]))
        jvm.gc = next(
            (gc for flag, gc in _GC_FLAGS if f"+{flag}" in flags or f"{flag}=true" in flags), None
        )
    jvm.arch = _arch(jvm.platform, facts.uname)
    return jvm


def _arch(platform: str | None, uname: str | None) -> str | None:
    machine = _MACHINE.search(uname or "")
    uname_arch = _ARCH.get(machine[1]) if machine else None
    if platform:
        arch = _ARCH.get(platform.split("-", 1)[-1])
        # JDK 8 on little-endian POWER calls itself linux-ppc64; uname knows better.
        if arch == "ppc64" and uname_arch == "ppc64le":
            return uname_arch
        if arch:
            return arch
    return uname_arch


# --- time of the crash ---------------------------------------------------------------

# Unambiguous zone abbreviations only: CST, IST, AST … name several zones,
# and a crash placed hours off would land in the wrong bucket of an epidemic curve.
_TZ_HOURS: Final = {
    "UTC": 0, "GMT": 0, "UCT": 0, "Z": 0, "WET": 0, "WEST": 1, "BST": 1, "CET": 1, "MET": 1,
    "CEST": 2, "MEST": 2, "EET": 2, "EEST": 3, "SAST": 2, "MSK": 3, "EAT": 3, "PKT": 5,
    "ICT": 7, "WIB": 7, "SGT": 8, "HKT": 8, "AWST": 8, "JST": 9, "KST": 9, "ACST": 9.5,
    "ACDT": 10.5, "AEST": 10, "AEDT": 11, "NZST": 12, "NZDT": 13, "HST": -10, "AKST": -9,
    "AKDT": -8, "PST": -8, "PDT": -7, "MST": -7, "MDT": -6, "CDT": -5, "EST": -5, "EDT": -4,
    "NST": -3.5, "NDT": -2.5, "BRT": -3, "ART": -3,
}  # fmt: skip
_NUMERIC_TZ: Final = re.compile(r"^([+-])(\d{2}):?(\d{2})?$")


def _zone(name: str | None) -> timezone | None:
    if not name:
        return None
    name = name.strip()
    if name in _TZ_HOURS:
        return timezone(timedelta(hours=_TZ_HOURS[name]))
    if match := _NUMERIC_TZ.match(name):
        minutes = int(match[2]) * 60 + int(match[3] or 0)
        return timezone(timedelta(minutes=-minutes if match[1] == "-" else minutes))
    return None


def crash_time(facts: HsErrFacts) -> tuple[datetime | None, str | None, str | None]:
    """``(captured_at in UTC, local time as printed, why it is None)``, from
    JDK 11+'s ``Time: … TZ elapsed time: …`` or JDK 6–8's ``time:`` plus
    ``timezone:``. HotSpot prints ctime()'s C-locale format."""
    zone_name = facts.timezone
    local = facts.time
    if facts.summary_time:
        local = facts.summary_time.split(" elapsed time:")[0].strip()
        parts = local.split()
        if len(parts) == 6 and not parts[-1].isdigit():
            zone_name, local = parts[-1], " ".join(parts[:-1])
    if not local:
        return None, None, None
    text = " ".join(local.split())
    try:
        naive = datetime.strptime(text, "%a %b %d %H:%M:%S %Y")
    except ValueError:
        return None, text, f"crash time {text!r} not in ctime format"
    printed = f"{text} {zone_name}" if zone_name else text
    zone = _zone(zone_name)
    if zone is None:
        reason = (
            f"time zone {zone_name!r} is ambiguous or unknown"
            if zone_name
            else "no time zone printed"
        )
        return None, printed, f"captured_at left unset: {reason}"
    return naive.replace(tzinfo=zone).astimezone(UTC), printed, None


# --- the host --------------------------------------------------------------------------

_CPU_FMS: Final = re.compile(
    r"family (\d+) model (\d+) stepping (\d+)(?: microcode (0x[0-9a-fA-F]+))?"
)
_HOST_LINE: Final = re.compile(
    r"^(?P<pre>.*?),\s*(?P<cores>\d+) cores,\s*(?P<mem>\d+)G,\s*(?P<os>.*)$"
)
_PHYSICAL: Final = re.compile(r"physical (\d+)([kKmMgG])")
_HYPERVISORS: Final = (
    ("VMWare", "vmware"), ("VMware", "vmware"), ("KVM", "kvm"), ("Xen", "xen"),
    ("Hyper-V", "hyper-v"), ("HyperV", "hyper-v"), ("PowerVM", "powervm"), ("zVM", "zvm"),
    ("VirtualBox", "virtualbox"), ("LDOM", "ldom"),
)  # fmt: skip
_UNIT: Final = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _microcode(value: str | None) -> str | None:
    """Microcode revision as lower-case hex (old kernels print it in decimal)."""
    if not value:
        return None
    value = value.strip().lower()
    try:
        return f"0x{int(value, 16 if value.startswith('0x') else 10):x}"
    except ValueError:
        return value


def _os_name(lines: list[str]) -> str | None:
    for line in lines:
        for key in ("DISTRIB_DESCRIPTION=", "PRETTY_NAME="):
            if line.startswith(key):
                return line[len(key) :].strip().strip('"') or None
    return next((line for line in lines if line), None)


def host_facts(facts: HsErrFacts) -> HostFacts:
    """HostFacts from the SYSTEM and SUMMARY sections. ``extra`` keeps the
    lines the model has no field for (see docs/parsers/hs_err.md). Built
    with ``trusted()`` (see :mod:`coreepi.model.trusted`): ints from digit
    runs, strings from the log."""
    host: dict[str, Any] = {}
    extra: dict[str, str] = {}
    summary = _HOST_LINE.match(facts.host_line) if facts.host_line else None
    host["os"] = _os_name(facts.os_lines) or (summary["os"].strip() if summary else None)
    if facts.uname:
        extra["uname"] = facts.uname
        words = facts.uname.split()
        host["kernel"] = words[1] if len(words) > 1 else None
    elif host["os"] and (build := re.search(r"Build \d+ \((\d+\.\d+\.\d+\.\d+)\)", host["os"])):
        host["kernel"] = build[1]  # Windows: the NT build is the kernel version
    cpuinfo = facts.cpuinfo
    host["cpu_model"] = cpuinfo.get("model name") or cpuinfo.get("cpu") or None
    if summary:
        cpu = summary["pre"].strip()
        if ", " in cpu:  # debug builds print the host name first
            host["hostname"], cpu = cpu.split(", ", 1)
        host["cpu_model"] = host["cpu_model"] or cpu or None
        extra["host_summary"] = facts.host_line or ""
    fms = _CPU_FMS.search(facts.cpu_total or "")
    if fms:
        host["cpu_family"], host["cpu_model_number"], host["cpu_stepping"] = (
            int(g) for g in fms.groups()[:3]
        )
    else:
        for key, attr in (
            ("cpu family", "cpu_family"),
            ("model", "cpu_model_number"),
            ("stepping", "cpu_stepping"),
        ):
            if cpuinfo.get(key, "").isdigit():
                host[attr] = int(cpuinfo[key])
    host["microcode"] = _microcode(fms[4] if fms and fms[4] else cpuinfo.get("microcode"))
    if facts.cpu_total:
        extra["cpu"] = facts.cpu_total[:1000]
        if count := re.match(r"total (\d+)", facts.cpu_total):
            extra["cpu_count"] = count[1]
    if facts.virtualization:
        extra["virtualization"] = facts.virtualization
        host["hypervisor"] = next((h for key, h in _HYPERVISORS if key in facts.virtualization), None)
    if facts.memory:
        extra["memory"] = facts.memory
        if physical := _PHYSICAL.search(facts.memory):
            extra["memory_physical_bytes"] = str(int(physical[1]) * _UNIT[physical[2].lower()])
    for key, value in facts.system.items():
        extra[key] = value
    for key, value in list(facts.container.items())[:64]:
        extra[f"container.{key}"] = value
    for key, value in facts.cpuinfo.items():
        if key not in ("model name", "cpu family", "model", "stepping", "microcode", "#done"):
            extra[f"cpuinfo.{key}"] = value
    return trusted(HostFacts, **host, extra=extra)
