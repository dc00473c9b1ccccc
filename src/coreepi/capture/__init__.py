"""capture: on each node, turn crashes into spooled reports and ship them.

``collect`` (the core_pattern pipe handler and the systemd-coredump importer)
writes entries into the spool; ``agent`` ships them to ``coreepi serve`` and
sends exposure heartbeats. See ``docs/capture.md``.

Modules: :mod:`~coreepi.capture.config` (the TOML config),
:mod:`~coreepi.capture.spool` (atomic entries), :mod:`~coreepi.capture.stream`
(pipe → zstd), :mod:`~coreepi.capture.procinfo` (/proc/<pid>),
:mod:`~coreepi.capture.hostfacts`, :mod:`~coreepi.capture.ratelimit`,
:mod:`~coreepi.capture.policy`, :mod:`~coreepi.capture.edge` (edge analysis),
:mod:`~coreepi.capture.collect`, :mod:`~coreepi.capture.coredump_import`,
:mod:`~coreepi.capture.heartbeat`, :mod:`~coreepi.capture.agent`,
:mod:`~coreepi.capture.install`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coreepi.capture.config import CaptureConfig, load_config
    from coreepi.capture.spool import Spool

__all__ = ["CaptureConfig", "Spool", "load_config"]


def __getattr__(name: str) -> Any:
    # lazy: the CLI registers `collect`/`agent` (coreepi.capture.commands) at
    # start-up, and must not pay for the config models and the spool then
    if name in ("CaptureConfig", "load_config"):
        from coreepi.capture import config

        return getattr(config, name)
    if name == "Spool":
        from coreepi.capture.spool import Spool

        return Spool
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
