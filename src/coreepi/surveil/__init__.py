"""Surveillance on the store: rules, alerts, silences, delivery, the drain loop.

Sits on top of the flow (imports ``store``, ``epi``, ``reporting``); the
detectors themselves are pure functions in :mod:`coreepi.epi.surveillance`.
``coreepi watch``, ``coreepi alerts`` and ``coreepi serve`` call
:func:`evaluate`.
"""

from coreepi.surveil.alerts import Transition, labels_of, reconcile
from coreepi.surveil.delivery import deliver, payload
from coreepi.surveil.evaluate import Evaluation, evaluate, sample_alert, send_test
from coreepi.surveil.rules import FORMATS, Delivery, Receiver, Rules, load_rules, rules_from

__all__ = [
    "FORMATS", "Delivery", "Evaluation", "Receiver", "Rules", "Transition", "deliver", "evaluate",
    "labels_of", "load_rules", "payload", "reconcile", "rules_from", "sample_alert", "send_test",
]  # fmt: skip
