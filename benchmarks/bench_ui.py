#!/usr/bin/env python3
"""Benchmark the web UI: server time per page with a warm findings cache,
the cost of a findings refresh, and page weight.

1. Makes a synthetic fleet with ``epi_fleet.py`` (the epi benchmark's
   generator; defaults here: 5,000 hosts × 200 days ≈ 100,000 crashes with
   known diseases), and gives a few crashes a full-size CrashReport (20
   threads × 30 frames, 60 modules, 400 mappings) for the crash page.
2. Times ``FindingsCache.refresh_now()`` (``--refreshes`` runs; the first
   one, cold, is reported apart).
3. With the cache warm, requests each page ``--requests`` times through the
   app in-process (FastAPI TestClient: no socket, so the time is the
   server's: routing, store reads, view, Jinja2) and prints p50/p95 in ms and
   the HTML size in KB (the stylesheet, cached by the browser, apart).

Not a test. Run by hand::

    .venv/bin/python benchmarks/bench_ui.py [--hosts 5000] [--days 200] [--requests 40]
        [--workdir DIR] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from epi_fleet import FleetSize, generate  # noqa: E402

from coreepi.model.report import (  # noqa: E402
    AnalysisInfo,
    CrashReport,
    Frame,
    FrameTrust,
    Mapping,
    Module,
    Phenotype,
    SignalInfo,
    Signature,
    Source,
    Thread,
)
from coreepi.store import CoreStatus, CrashRecord, DuckDBStore  # noqa: E402

GOAL_MS = 300.0


def full_report(crash_id: str, host_id: str, signature: str) -> CrashReport:
    """A CrashReport the size of a real multi-threaded service's."""
    modules = [Module(path=f"/usr/lib/libm{i}.so", build_id=f"{i:040x}", base=0x7F0000000000
                      + i * 0x200000, end=0x7F0000000000 + i * 0x200000 + 0x100000)
               for i in range(60)]
    threads = [Thread(tid=1000 + t, name=f"worker-{t}", crashed=t == 0,
                      registers={r: 0x7FFF0000 + t for r in ("rip", "rsp", "rbp", "rax", "rbx",
                                                             "rcx", "rdx", "rsi", "rdi", "r8")},
                      frames=[Frame(index=i, pc=0x7F0000001000 + i * 16, module=modules[i].path,
                                    build_id=modules[i].build_id, function=f"ns::fn{i}",
                                    trust=FrameTrust.CFI if i else FrameTrust.CONTEXT)
                              for i in range(30)])
               for t in range(20)]
    return CrashReport(
        crash_id=crash_id, host_id=host_id, source=Source.ELF_CORE,
        signal=SignalInfo(number=11, name="SIGSEGV", si_code=1, si_code_name="SEGV_MAPERR",
                          fault_address=8),
        threads=threads, modules=modules,
        memory_map=[Mapping(start=0x10000 * i, end=0x10000 * i + 0x1000, perms="r-xp",
                            path=f"/usr/lib/libm{i % 60}.so", in_core=True) for i in range(400)],
        phenotypes=[Phenotype(name="null-deref", evidence={"fault_address": "0x8"})],
        signature=Signature(signature=signature), analysis=AnalysisInfo(analyzer_version="bench"))


def make_store(root: Path, size: FleetSize) -> tuple[Path, dict[str, int]]:
    data = root / "ui-fleet"
    with DuckDBStore(data) as store:
        if store.count_crashes():
            return data, store.counts()
        generate(store, size)
        rows = store.list_crashes(limit=5)
        for r in rows:
            rep = full_report(r["crash_id"], r["host_id"], r["signature"])
            rep = rep.model_copy(update={"captured_at": r["captured_at"]})
            store.update_crash(CrashRecord(rep, {}, CoreStatus.MISSING))
        return data, store.counts()


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=5000)
    ap.add_argument("--days", type=int, default=200)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--refreshes", type=int, default=3)
    ap.add_argument("--workdir", type=Path)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args()

    from fastapi.testclient import TestClient

    from coreepi.serve import ServeConfig, create_app, create_token
    from coreepi.serve.findings import group_id

    root = args.workdir or Path(tempfile.mkdtemp(prefix="bench-ui-"))
    t = time.perf_counter()
    data, counts = make_store(root, FleetSize(hosts=args.hosts, days=args.days,
                                              tail_signatures=2000, bad_hosts=5))
    print(f"store: {counts['crashes']:,} crashes, {counts['hosts']:,} hosts, "
          f"{counts['exposure']:,} intervals ({time.perf_counter() - t:.1f} s) in {data}")
    store = DuckDBStore(data)
    token = create_token(store, ["read"], "bench")[1]
    app = create_app(store, ServeConfig())
    cache = app.state.findings
    refresh = []
    for _ in range(args.refreshes):
        t = time.perf_counter()
        snap = cache.refresh_now()
        refresh.append(time.perf_counter() - t)
    assert snap.findings is not None, snap.error
    f = snap.findings
    client = TestClient(app)
    h = {"authorization": f"Bearer {token}"}
    bad = next(x.host_id for x in f.hosts if x.attribution.verdict == "hardware-suspect")
    env = group_id("signature", "io_uring_submit | Ring::flush")
    crash = store.list_crashes(limit=1)[0]["crash_id"]
    pages = {"overview": "/", "groups": "/groups", "group": f"/groups/{env}",
             "host": f"/hosts/{bad}", "crash": f"/crashes/{crash}",
             "findings API": "/api/v1/findings"}
    results = {}
    for name, url in pages.items():
        r = client.get(url, headers=h)
        assert r.status_code == 200, (url, r.status_code, r.text[:300])
        times = []
        for _ in range(args.requests):
            t = time.perf_counter()
            r = client.get(url, headers=h)
            times.append((time.perf_counter() - t) * 1000)
        results[name] = {"p50_ms": round(pct(times, 50), 1), "p95_ms": round(pct(times, 95), 1),
                         "kb": round(len(r.content) / 1024, 1)}
    css_kb = len(client.get("/static/app.css").content) / 1024
    out = {"crashes": counts["crashes"], "hosts": counts["hosts"],
           "refresh_cold_s": round(refresh[0], 2),
           "refresh_warm_s": round(statistics.median(refresh[1:] or refresh), 2),
           "pages": results, "css_kb": round(css_kb, 1), "goal_p95_ms": GOAL_MS}
    print(f"findings refresh: cold {out['refresh_cold_s']} s, then median "
          f"{out['refresh_warm_s']} s")
    print(f"{'page':14} {'p50 ms':>8} {'p95 ms':>8} {'HTML KB':>8}")
    for name, r in results.items():
        mark = "" if r["p95_ms"] <= GOAL_MS else "  (over the goal)"
        print(f"{name:14} {r['p50_ms']:8.1f} {r['p95_ms']:8.1f} {r['kb']:8.1f}{mark}")
    print(f"stylesheet: {css_kb:.1f} KB (once, cached)")
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2))
    app.state.findings.close()
    store.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
