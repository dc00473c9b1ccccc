"""Evaluate the alert rules on a schedule in a background thread (``coreepi serve``).

Several replicas on one PostgreSQL store may each run one: the alerts table
is keyed by dedup key, so they write the same rows, and one evaluation at a
time takes the store (an advisory lock: a replica whose turn overlaps
another's skips it), so a receiver gets each transition once.
"""

from __future__ import annotations

import logging
import threading

from coreepi.errors import CoreepiError
from coreepi.store.base import Store
from coreepi.surveil.evaluate import Evaluation, evaluate
from coreepi.surveil.rules import Rules

__all__ = ["AlertScheduler"]

log = logging.getLogger("coreepi.surveil")


class AlertScheduler:
    """Calls :func:`~coreepi.surveil.evaluate` every ``rules.interval_seconds``
    (the first right after :meth:`start`) until :meth:`close`. A failed
    evaluation is logged and retried at the next tick; ``last`` is the
    latest successful one, ``last_error`` the latest failure's message."""

    def __init__(self, store: Store, rules: Rules) -> None:
        self.store = store
        self.rules = rules
        self.last: Evaluation | None = None
        self.last_error = ""
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="alerts")

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.last = evaluate(self.store, self.rules)
                self.last_error = ""
            except (CoreepiError, OSError, ValueError) as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("alert evaluation failed: %s", self.last_error)
            self._stop.wait(self.rules.interval_seconds)
