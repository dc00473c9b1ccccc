"""The CrashReport: the contract between every stage of coreepi.

One crash, structured. Every stage reads and writes this model (see
``shared/DESIGN.md``, "CrashReport"): ``parse`` builds it from an artifact,
``analyze`` adds phenotypes and a signature, ``store`` persists it, ``epi``
counts it.

Conventions
-----------
* Addresses and register values are unsigned 64-bit integers in Python and
  lower-case ``0x…`` hex strings in JSON (JavaScript numbers lose precision
  above 2**53, and hex is what every debugger prints).
* Times are timezone-aware UTC datetimes; durations are seconds; sizes are
  bytes.
* ``schema_version`` follows semver: a minor bump adds optional fields, a
  major bump changes or removes one. Readers accept any report whose major
  version they know.

The JSON Schema of this model is exported to ``docs/crash-report.schema.json``
(``coreepi schema`` writes it; a test checks it is current).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    field_validator,
)

__all__ = [
    "SCHEMA_VERSION",
    "Address",
    "AnalysisInfo",
    "ArtifactInfo",
    "CoreInfo",
    "CrashReport",
    "Frame",
    "FrameTrust",
    "HostFacts",
    "JvmErrorInfo",
    "KernelReportInfo",
    "Mapping",
    "Module",
    "Phenotype",
    "ProcessInfo",
    "Runtime",
    "RuntimeFrame",
    "Signature",
    "SignatureStep",
    "SignalInfo",
    "Source",
    "Thread",
    "stable_crash_id",
]

SCHEMA_VERSION = "1.4.0"

_U64_MAX = (1 << 64) - 1


def _parse_address(value: Any) -> Any:
    """Accept an int or a ``0x…``/decimal string; leave anything else to pydantic."""
    if isinstance(value, bool):
        raise ValueError("an address is not a boolean")
    if isinstance(value, str):
        text = value.strip().lower()
        try:
            value = int(text, 16) if text.startswith("0x") else int(text, 10)
        except ValueError:
            raise ValueError(f"not an address: {value!r}") from None
    if isinstance(value, int) and not 0 <= value <= _U64_MAX:
        raise ValueError(f"address out of the unsigned 64-bit range: {value}")
    return value


Address = Annotated[
    int,
    BeforeValidator(_parse_address),
    PlainSerializer(lambda v: f"0x{v:x}", return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "pattern": "^0x[0-9a-f]{1,16}$"}),
]
"""An unsigned 64-bit address or register value; ``0x…`` hex in JSON."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Source(StrEnum):
    """Which kind of artifact a report came from."""

    ELF_CORE = "elf-core"
    SYSTEMD_COREDUMP = "systemd-coredump"
    HS_ERR = "hs_err"
    KERNEL_OOPS = "kernel-oops"
    MINIDUMP = "minidump"


class FrameTrust(StrEnum):
    """How a frame's pc was recovered, most to least trustworthy.

    ``context``: from the thread's saved registers (frame 0, or a signal
    frame's saved context). ``cfi``: unwound with DWARF call-frame
    information (``.eh_frame`` / ``.debug_frame``). ``frame-pointer``: from
    the saved frame pointer chain (rbp / x29), used when the callee had no
    CFI. ``scan``: a stack word that happens to point into code (stack
    scanning), the weakest evidence. ``log``: read back from a kernel log's
    text as the kernel's own unwinder printed it (its call trace); no
    unwinding of ours vouches for it, so it stands outside this order
    (schema 1.4.0; before it those frames said ``cfi``). A kernel log's
    frame 0 from its ``RIP``/``pc`` line stays ``context``: the register
    dump's pc.
    """

    CONTEXT = "context"
    CFI = "cfi"
    FRAME_POINTER = "frame-pointer"
    SCAN = "scan"
    LOG = "log"


class Frame(_Model):
    """One stack frame. Inlined functions get frames of their own that share
    ``pc`` and ``sp`` with the physical frame they were inlined into."""

    index: int = Field(ge=0, description="0 is the innermost frame")
    pc: Address | None = Field(
        description="program counter (for callers: the return address); None when the "
        "artifact names the function only (kernel logs without addresses, Java frames)"
    )
    sp: Address | None = Field(default=None, description="stack pointer of this frame")
    module: str | None = Field(default=None, description="path of the module holding pc")
    build_id: str | None = Field(default=None, description="module build-id, lower-case hex")
    module_offset: Address | None = Field(
        default=None,
        description="pc minus the module's base (its lowest mapped address), in bytes: "
        "Breakpad's and Socorro's convention, the same whether or not the module's file "
        "is at hand",
    )
    function: str | None = Field(default=None, description="demangled function name")
    function_offset: Address | None = Field(
        default=None, description="pc minus the function's start address, in bytes"
    )
    file: str | None = None
    line: int | None = Field(default=None, ge=0)
    column: int | None = Field(default=None, ge=0)
    inlined: bool = False
    trust: FrameTrust


class Thread(_Model):
    """One thread of the crashed process."""

    tid: int
    name: str | None = None
    crashed: bool = False
    registers: dict[str, Address] = Field(
        default_factory=dict,
        description="general-purpose registers by their kernel/gdb names (rip, x0, pc, …)",
    )
    frames: list[Frame] = Field(default_factory=list)
    unwind_error: str | None = Field(
        default=None, description="why unwinding stopped early, if it did"
    )


class ProcessInfo(_Model):
    pid: int | None = None
    ppid: int | None = None
    tid: int | None = Field(default=None, description="tid of the crashing thread")
    exe: str | None = Field(default=None, description="executable path (AT_EXECFN, NT_FILE)")
    comm: str | None = Field(default=None, description="kernel comm, at most 15 bytes")
    cmdline: list[str] = Field(default_factory=list, description="argv as far as known")
    cmdline_truncated: bool = Field(
        default=False, description="NT_PRPSINFO keeps only the first 80 bytes of the argv"
    )
    uid: int | None = None
    gid: int | None = None
    cgroup: str | None = None
    container_id: str | None = None
    pod: str | None = None
    auxv: dict[str, Address] = Field(
        default_factory=dict, description="auxiliary vector, AT_* names without the prefix"
    )


class SignalInfo(_Model):
    """The fatal signal, from NT_SIGINFO (see sigaction(2) for si_code values)."""

    number: int
    name: str | None = Field(default=None, description="SIGSEGV, SIGABRT, …")
    si_code: int | None = None
    si_code_name: str | None = Field(
        default=None, description="SEGV_MAPERR, BUS_MCEERR_AR, SI_TKILL, …"
    )
    fault_address: Address | None = Field(
        default=None, description="si_addr, for SIGSEGV/SIGBUS/SIGILL/SIGFPE/SIGTRAP"
    )
    errno: int | None = None
    sender_pid: int | None = Field(default=None, description="si_pid for signals sent by kill")
    sender_uid: int | None = None


class Module(_Model):
    """A loaded ELF object (executable, shared library, vDSO)."""

    path: str
    build_id: str | None = Field(default=None, description="lower-case hex, as readelf -n prints")
    base: Address = Field(description="lowest mapped address of the module")
    end: Address = Field(description="one past the highest mapped address")
    load_bias: Address | None = Field(
        default=None, description="difference between run-time and link-time addresses"
    )
    version: str | None = None
    package: str | None = None
    debug_file: str | None = Field(default=None, description="where symbols were read from")

    @property
    def size(self) -> int:
        """Mapped size in bytes."""
        return self.end - self.base


class Mapping(_Model):
    """One region of the process's address space."""

    start: Address
    end: Address
    perms: str = Field(
        description="r/w/x as in /proc/PID/maps without the p/s column, e.g. 'r-x' "
        "(cores do not record private vs shared); '?' where nothing recorded a permission"
    )
    offset: Address = Field(default=0, description="file offset in bytes")
    path: str | None = None
    in_core: bool = Field(description="the core holds this region's contents")


class RuntimeFrame(_Model):
    """A frame of a managed runtime (Java method, Python function …).

    The fields after ``kind`` are what the runtime's own log printed of the
    frame (HotSpot's hs_err frame lines); None where it printed nothing.
    Analysis reads them (JVM signatures, ``jvm-crash-in-jit-code``). Python
    frames of a CPython core (pystack) have ``function``, ``file``, ``line``,
    ``kind="python"`` and ``thread_id``, innermost first within each thread.
    """

    function: str
    file: str | None = None
    line: int | None = None
    kind: str | None = Field(default=None, description="runtime's own frame kind, e.g. J, j, V")
    text: str | None = Field(default=None, description="the frame's line as printed, ≤500 chars")
    module: str | None = Field(default=None, description="native frame: module name as printed")
    module_offset: Address | None = Field(
        default=None, description="native frame: offset in bytes into the module, as printed"
    )
    symbol: str | None = Field(default=None, description="native frame: symbol as printed")
    symbol_offset: Address | None = Field(
        default=None, description="native frame: offset in bytes into the symbol"
    )
    pc: Address | None = Field(default=None, description="absolute pc, where the line prints one")
    method: str | None = Field(default=None, description="Java frame: class, name, descriptor")
    compiler: str | None = Field(default=None, description="compiled Java frame: c1, c2, jvmci")
    compile_id: int | None = Field(default=None, description="compiled Java frame: JIT task id")
    osr: bool = Field(default=False, description="compiled Java frame: on-stack replacement")
    stub: str | None = Field(default=None, description="VM-generated stub frame: its name")
    thread_id: int | None = Field(
        default=None,
        description="the thread whose stack holds the frame, where the runtime gives every "
        "thread's stack (Python frames from a CPython core); None: the crashing thread",
    )


class Runtime(_Model):
    kind: Literal["native", "jvm", "python", "go", "rust"] = "native"
    version: str | None = None
    vendor: str | None = None
    frames: list[RuntimeFrame] = Field(default_factory=list)


class Phenotype(_Model):
    """A case definition that fired, with the evidence that made it fire."""

    name: str
    hardware_indicative: bool = False
    confidence: float | None = Field(default=None, ge=0.0, le=1.0)
    evidence: dict[str, Any] = Field(default_factory=dict)


class SignatureStep(_Model):
    """One change made while building a signature (Socorro-style trail)."""

    rule: str
    before: str
    after: str


class Signature(_Model):
    signature: str
    frames_used: list[int] = Field(default_factory=list, description="frame indexes used")
    trail: list[SignatureStep] = Field(default_factory=list)


class KernelReportInfo(_Model):
    """What a kernel log says of one crash report, beyond the thread and
    host facts (``source = kernel-oops``)."""

    raw_title: str = Field(description="the title before ADDR/NUM/LINE normalization")
    syzbot_title: str = Field(
        default="", description="syzbot's own title (its placeholders kept), for agreement tests"
    )
    title_rule: str = Field(description="how the title was read: the header and its format")
    first_line: str = Field(description="first line of the report's window, ≤500 chars")
    crash_type: str = Field(description="KASAN, BUG, WARNING, panic, hung task, lockup, MCE …")
    guilty_frame: str | None = Field(default=None, description="function the title names")
    taint: str = Field(default="", description="taint letters ('' when not tainted)")
    tainted: bool | None = Field(
        default=None, description="None: the report has no 'Tainted:' / 'Not tainted' line"
    )
    corrupted_reason: str | None = Field(
        default=None, description="why the report is damaged (truncated, interleaved …)"
    )
    truncated: bool = Field(default=False, description="window cut at the scanner's size limit")
    cpu: int | None = None
    fault_address: Address | None = None
    uptime_seconds: float | None = Field(default=None, description="the oops line's timestamp")
    modules_linked_in: list[str] = Field(default_factory=list)
    out_of_tree_modules: list[str] = Field(
        default_factory=list, description="linked-in modules flagged P, O or E"
    )


class JvmErrorInfo(_Model):
    """What an hs_err log says of the fatal error itself (``source = hs_err``)."""

    error_kind: Literal["signal", "internal", "oom"] | None = Field(
        default=None, description="None: a fragment without its error line"
    )
    error_line: str | None = Field(default=None, description="the header's error line, ≤500")
    location: str | None = Field(
        default=None,
        description="'file.cpp:123' of the error line, or the name of HotSpot's pseudo-signal "
        "where it printed one instead (OOM_MMAP_ERROR for 0xe0000002)",
    )
    message: str | None = Field(
        default=None, description="the out-of-memory message, or an internal error's text"
    )
    pc: Address | None = Field(default=None, description="pc of a signal crash")
    sp: Address | None = Field(default=None, description="sp of the crashing thread")
    stack_low: Address | None = Field(default=None, description="the thread's stack bounds")
    stack_high: Address | None = None
    instruction_bytes: str | None = Field(
        default=None, description="up to 16 bytes at pc from 'Instructions:', lower-case hex"
    )
    memory: str | None = Field(default=None, description="the 'Memory:' line as printed")
    container_memory_limit_bytes: int | None = Field(default=None, gt=0)
    thread_state: str | None = Field(default=None, description="_thread_in_native …")
    home: str | None = Field(default=None, description="JVM home directory (from libjvm's path)")


class ArtifactInfo(_Model):
    """Where in its artifact a crash was read, and what only that kind of
    artifact tells. Set by the log parsers (None for a core); read by
    ``coreepi.analyze`` and by ingest."""

    line: int | None = Field(
        default=None, ge=1, description="1-based line of the log where the report starts"
    )
    text: str | None = Field(default=None, description="that line, ≤500 chars")
    title: str | None = Field(
        default=None,
        description="kernel: the report's title in syzkaller's style (the header when the "
        "report could not be read)",
    )
    kernel: KernelReportInfo | None = Field(
        default=None, description="kernel report facts; None when the report could not be read"
    )
    jvm: JvmErrorInfo | None = None


class HostFacts(_Model):
    """Snapshot of the host the crash happened on. Unknown stays None."""

    hostname: str | None = None
    kernel: str | None = None
    os: str | None = None
    cpu_model: str | None = None
    cpu_family: int | None = None
    cpu_model_number: int | None = None
    cpu_stepping: int | None = None
    microcode: str | None = None
    bios_vendor: str | None = None
    bios_version: str | None = None
    board: str | None = None
    hypervisor: str | None = None
    cloud_instance_type: str | None = None
    cloud_zone: str | None = None
    gpus: list[dict[str, str]] = Field(default_factory=list)
    k8s_node: str | None = None
    k8s_labels: dict[str, str] = Field(default_factory=dict)
    edac_ce_count: int | None = None
    edac_ue_count: int | None = None
    extra: dict[str, str] = Field(default_factory=dict)


class CoreInfo(_Model):
    """What happened to the artifact itself."""

    stored: bool = False
    size_bytes: int | None = Field(default=None, ge=0)
    compressed_size_bytes: int | None = Field(default=None, ge=0)
    sha256: str | None = None
    truncated: bool = False
    blob_key: str | None = None
    dropped_reason: str | None = Field(
        default=None, description="why the core was not kept (rate limit, quota, too big)"
    )


class AnalysisInfo(_Model):
    analyzer_version: str
    duration_seconds: float | None = Field(default=None, ge=0.0)
    warnings: list[str] = Field(default_factory=list)


class CrashReport(_Model):
    """One crash, as every stage of coreepi sees it.

    Built by ``coreepi.parse`` (e.g. :func:`coreepi.parse.parse_core`),
    enriched by ``coreepi.analyze``. Serialize with ``model_dump_json()``;
    read back with ``CrashReport.model_validate_json()``.
    """

    schema_version: str = SCHEMA_VERSION
    crash_id: str = Field(description="stable id: re-uploading the same crash gives the same id")
    captured_at: datetime | None = Field(default=None, description="UTC")
    host_id: str | None = None
    boot_id: str | None = None
    source: Source
    arch: str | None = Field(default=None, description="x86_64, aarch64, …")
    process: ProcessInfo = Field(default_factory=ProcessInfo)
    signal: SignalInfo | None = None
    threads: list[Thread] = Field(default_factory=list)
    modules: list[Module] = Field(default_factory=list)
    memory_map: list[Mapping] = Field(default_factory=list)
    runtime: Runtime = Field(default_factory=Runtime)
    artifact: ArtifactInfo | None = Field(
        default=None, description="where in a log the crash was read, and the log's own facts"
    )
    phenotypes: list[Phenotype] = Field(default_factory=list)
    signature: Signature | None = None
    host: HostFacts = Field(default_factory=HostFacts)
    attributes: dict[str, str | int | float | bool] = Field(
        default_factory=dict,
        description="attributes of the crash's context that the epidemiology can stratify by "
        "(app_version, deployment, workload flags …), from the capture sidecar or the agent",
    )
    core: CoreInfo = Field(default_factory=CoreInfo)
    analysis: AnalysisInfo

    @field_validator("captured_at")
    @classmethod
    def _captured_at_utc(cls, value: datetime | None) -> datetime | None:
        # UTC as documented; a time that is not a UTC date (0001-01-01T00:00+01:00) is
        # refused here, or the store would hold a year-0 timestamp it cannot read back
        if value is None or value.tzinfo is None:
            return value if value is None else value.replace(tzinfo=UTC)
        try:
            return value.astimezone(UTC)
        except OverflowError:
            raise ValueError("captured_at out of range in UTC") from None

    @property
    def crashed_thread(self) -> Thread | None:
        """The thread that took the fatal signal, if known."""
        return next((t for t in self.threads if t.crashed), None)

    def module_for(self, address: int) -> Module | None:
        """The module whose mapped range holds ``address``, if any."""
        return next((m for m in self.modules if m.base <= address < m.end), None)


def stable_crash_id(*parts: object) -> str:
    """A crash id derived from identifying facts, so re-uploads collide.

    Parts are joined by NUL; None becomes the empty string. Returns 32 hex
    characters (128 bits of SHA-256).
    """
    text = "\0".join("" if p is None else str(p) for p in parts)
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()[:32]
