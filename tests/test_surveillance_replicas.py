"""Two evaluators on one PostgreSQL store (two ``coreepi serve`` replicas
with alert rules): each transition reaches each receiver once."""

from __future__ import annotations

import threading
from pathlib import Path

import pandas as pd
from webhook import WebhookReceiver

from coreepi.simulate.timeline import BadHost, TimelineFleet, make_timeline, write_timeline
from coreepi.store import DirectoryBlobStore, PostgresStore
from coreepi.surveil import evaluate, rules_from
from coreepi.surveil.evaluate import Evaluation


def test_two_evaluators_on_one_database_deliver_once(pg_url: str, tmp_path: Path) -> None:
    # the breaker's deployment: replicas A and B evaluate the same rules at the
    # same instant; without one evaluation at a time both fired and both delivered
    f = TimelineFleet(hosts=40, days=40, groups=3, rate_range=(1, 1),
                      bad_hosts=(BadHost(host=9, day=25, rate=0.8),))
    now = (pd.Timestamp(f.start, tz="UTC") + pd.Timedelta(days=40)).to_pydatetime()
    hook = WebhookReceiver()
    rules = rules_from({"evaluation": {"kinds": ["hardware-suspect-host"]},
                        "receiver": [{"name": "hook", "format": "json", "url": hook.url}]})
    blobs = DirectoryBlobStore(tmp_path / "blobs")
    a, b = PostgresStore(pg_url, blobs), PostgresStore(pg_url, blobs)  # two replicas' pools
    try:
        write_timeline(a, make_timeline(f, seed=4))
        start = threading.Barrier(2)
        got: list[Evaluation] = []

        def replica(store: PostgresStore) -> None:
            start.wait()
            got.append(evaluate(store, rules, now))

        threads = [threading.Thread(target=replica, args=(s,)) for s in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert len(got) == 2
        assert sorted(len(ev.delivered) for ev in got) == [0, 1]
        skipped = next(ev for ev in got if not ev.delivered)
        assert skipped.transitions == [] and "another evaluator" in skipped.notes[0]
        assert [body["alert"]["labels"]["host_id"] for body in hook.bodies] == ["h00009"]
        (log,) = a.deliveries()
        assert (log.receiver, log.state, log.ok) == ("hook", "firing", True)
        # the lock is released after each: the next round (either replica) evaluates,
        # finds the alert firing already and sends nothing new
        later = evaluate(b, rules, now)
        assert later.notes == [] and later.transitions == [] and later.delivered == []
        assert len(hook.bodies) == 1
    finally:
        hook.close()
        a.close()
        b.close()
