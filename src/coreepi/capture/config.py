"""The node's capture configuration: one TOML file read by ``collect`` and ``agent``.

Default location ``/etc/coreepi/capture.toml`` (``--config`` overrides it; the
kernel starts ``collect`` with an almost empty environment, so the path is a
command-line argument, not an environment variable). Every key is optional::

    spool_dir = "/var/spool/coreepi"        # spool of crash entries and state
    server_url = "https://crashes.example.com"
    token_file = "/etc/coreepi/token"       # bearer token (ingest scope), one line
    host_id = ""                            # default: /etc/machine-id

    [collect]
    zstd_level = 3                          # 1..19
    zstd_threads = -1                       # -1: one worker per CPU, at most 8
    max_core_bytes = 4294967296             # cores are cut here (core.truncated)
    hash_core = false                       # sha256 of the core at the edge (CPU-heavy)
    respect_rlimit_core = false             # true: %c == 0 means "no core" (report only)
    include_signals = []                    # names or numbers; empty: all
    exclude_signals = []
    include_executables = []               # fnmatch globs on the exe path; empty: all
    exclude_executables = []
    max_frames_per_thread = 64
    cores_per_signature_per_day = 5         # reports are always kept
    edge_analysis_seconds = 30              # 0: no edge analysis
    edge_analysis_memory_mb = 2048
    edge_analysis_detach = true             # analyse after the kernel is released
    edge_analysis_slots = 1                 # detached analyses at once
    debug_dirs = ["/usr/lib/debug"]
    environ_allowlist = ["LANG", "TZ", "HOSTNAME", "APP_VERSION", ...]

    [rate_limit]                            # token buckets; a dropped core keeps its report
    executable_burst = 5
    executable_per_hour = 20
    host_burst = 20
    host_per_hour = 120

    [spool]
    max_bytes = 10737418240                 # disk quota of the spool (entries)
    keep_shipped = false                    # true: move shipped entries to shipped/

    [agent]
    heartbeat_seconds = 300
    poll_seconds = 5
    backoff_initial_seconds = 1
    backoff_max_seconds = 300
    request_timeout_seconds = 60
    ca_file = ""                            # extra CA bundle for HTTPS

    [host]                                  # labels the node cannot discover itself
    cloud_instance_type = ""
    cloud_zone = ""
    k8s_node = ""
    [host.labels]
    rack = "r12"

Unknown keys are errors (a typo must not silently disable a limit).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, is_dataclass
from pathlib import Path
from typing import Any

from coreepi.errors import InputError

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "AgentConfig",
    "CaptureConfig",
    "CollectConfig",
    "HostConfig",
    "RateLimitConfig",
    "SpoolConfig",
    "load_config",
]

DEFAULT_CONFIG_PATH = Path("/etc/coreepi/capture.toml")

DEFAULT_ENVIRON_ALLOWLIST = (
    "LANG", "LC_ALL", "TZ", "HOSTNAME", "container", "KUBERNETES_SERVICE_HOST",
    "APP_VERSION", "APP_NAME", "DEPLOYMENT", "GIT_COMMIT", "MALLOC_CONF", "MALLOC_ARENA_MAX",
    "GLIBC_TUNABLES", "LD_PRELOAD", "LD_LIBRARY_PATH", "JAVA_HOME", "PYTHONHASHSEED",
    "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES",
)  # fmt: skip


@dataclass
class CollectConfig:
    zstd_level: int = 3
    zstd_threads: int = -1
    max_core_bytes: int = 4 << 30
    hash_core: bool = False
    respect_rlimit_core: bool = False
    include_signals: list[str | int] = field(default_factory=list)
    exclude_signals: list[str | int] = field(default_factory=list)
    include_executables: list[str] = field(default_factory=list)
    exclude_executables: list[str] = field(default_factory=list)
    max_frames_per_thread: int = 64
    cores_per_signature_per_day: int = 5
    edge_analysis_seconds: float = 30.0
    edge_analysis_memory_mb: int = 2048
    edge_analysis_detach: bool = True
    edge_analysis_slots: int = 1
    debug_dirs: list[str] = field(default_factory=lambda: ["/usr/lib/debug"])
    environ_allowlist: list[str] = field(default_factory=lambda: list(DEFAULT_ENVIRON_ALLOWLIST))


@dataclass
class RateLimitConfig:
    """Token buckets: ``burst`` tokens at most, refilled at ``per_hour`` per hour."""

    executable_burst: float = 5
    executable_per_hour: float = 20
    host_burst: float = 20
    host_per_hour: float = 120


@dataclass
class SpoolConfig:
    max_bytes: int = 10 << 30
    keep_shipped: bool = False


@dataclass
class AgentConfig:
    heartbeat_seconds: float = 300.0
    poll_seconds: float = 5.0
    backoff_initial_seconds: float = 1.0
    backoff_max_seconds: float = 300.0
    request_timeout_seconds: float = 60.0
    ca_file: str = ""


@dataclass
class HostConfig:
    cloud_instance_type: str = ""
    cloud_zone: str = ""
    k8s_node: str = ""
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class CaptureConfig:
    spool_dir: Path = Path("/var/spool/coreepi")
    server_url: str = ""
    token_file: str = "/etc/coreepi/token"
    host_id: str = ""
    collect: CollectConfig = field(default_factory=CollectConfig)
    rate_limit: RateLimitConfig = field(default_factory=RateLimitConfig)
    spool: SpoolConfig = field(default_factory=SpoolConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    host: HostConfig = field(default_factory=HostConfig)
    source: Path | None = None  # the file this was read from, if any

    def token(self) -> str | None:
        """The bearer token from ``token_file`` (its first line); None when
        ``token_file = ""`` (a server without tokens). Raises InputError when
        the file is missing, unreadable or empty: a config error, not an outage."""
        if not self.token_file:
            return None
        where = f"token_file {self.token_file}"
        try:
            text = Path(self.token_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InputError(where, exc.strerror or str(exc)) from None
        except UnicodeDecodeError:
            raise InputError(where, "not a text file (expected the token on its first line)"
                             ) from None
        if not text:
            raise InputError(where, "empty (expected the token on its first line)")
        return text.splitlines()[0].strip()


def _fill(obj: Any, table: dict[str, Any], where: str) -> None:
    known = {f.name: f for f in fields(obj) if f.name != "source"}
    for key, value in table.items():
        if key not in known:
            raise InputError(where, f"unknown key {key!r}")
        current = getattr(obj, key)
        if is_dataclass(current):
            if not isinstance(value, dict):
                raise InputError(where, f"[{key}] must be a table")
            _fill(current, value, f"{where} [{key}]")
        elif isinstance(current, (Path, str)):
            if not isinstance(value, str):
                raise InputError(where, f"{key} must be text (a quoted string), not "
                                 f"{type(value).__name__} {value!r}")
            setattr(obj, key, Path(value) if isinstance(current, Path) else value)
        elif isinstance(current, bool):
            if not isinstance(value, bool):
                raise InputError(where, f"{key} must be true or false")
            setattr(obj, key, value)
        elif isinstance(current, (int, float)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InputError(where, f"{key} must be a number")
            setattr(obj, key, type(current)(value) if isinstance(current, float) else value)
        elif isinstance(current, (list, dict)):
            if not isinstance(value, type(current)):
                raise InputError(where, f"{key} must be a {type(current).__name__}")
            setattr(obj, key, value)
        else:  # no field of another type: a new one must get its own branch
            raise AssertionError(f"{where}: {key} has no reader for {type(current).__name__}")


def load_config(path: str | Path | None = None) -> CaptureConfig:
    """Read the capture configuration. ``path`` None: the default file if it
    exists, else all defaults. Raises :class:`InputError` on a bad file."""
    config = CaptureConfig()
    explicit = path is not None
    file = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        data = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if explicit:
            raise InputError(str(file), "no such file") from None
        return config
    except OSError as exc:
        raise InputError(str(file), f"cannot read: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(str(file), f"not valid TOML: {exc}") from None
    _fill(config, data, str(file))
    config.source = file
    if not 1 <= config.collect.zstd_level <= 22:
        raise InputError(str(file), "collect.zstd_level must be within 1..22")
    return config
