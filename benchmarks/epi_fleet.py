"""A large synthetic fleet written straight into a DuckDB store (for bench_epi.py).

Vectorized: host and crash tables are numpy arrays of integer codes, handed to
DuckDB as DataFrames; the 10M exposure rows and their JSON attribute text are
built by DuckDB itself from (host, day, load) integers, so generating the
fleet costs seconds, not the hours 10M Python objects would.

The fleet (defaults: 100,000 hosts × 100 one-day exposure intervals = 10M
intervals, about 1M crashes) carries known diseases:

* ``_Unwind_RaiseException | __cxa_throw`` everywhere (software);
* ``io_uring_submit | Ring::flush`` only on kernel 6.1.0 (environment-triggered);
* ``Pool::grow | Arena::alloc`` only at load1 ≥ 20 (software, high-load stratum);
* ``Parser::parse | Config::load`` only on app_version 2.1 (rolled out mid-window);
* a long tail of 20,000 background signatures;
* ``bad_hosts`` hosts with a bad CPU: many private signatures, stack-misaligned,
  machine checks before their crashes (hardware-suspect).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import numpy as np
import pandas as pd

from coreepi.store import DuckDBStore

T0 = datetime(2024, 1, 1, tzinfo=UTC)
CPU = ["EPYC-7763", "Xeon-8380", "EPYC-9654", "Xeon-6430"]
KERNEL = ["5.15.0", "6.1.0", "6.8.0"]
ZONE = [f"z{i}" for i in range(8)]
PHENOTYPES = [
    ["return-to-null"], ["null-deref"], ["abort-with-message"], ["wild-pointer"],
    ["stack-misaligned", "return-to-bogus"], ["uncaught-exception"],
]  # fmt: skip
HARDWARE = {"stack-misaligned"}


@dataclass
class FleetSize:
    hosts: int = 100_000
    days: int = 100
    tail_signatures: int = 20_000
    bad_hosts: int = 10
    seed: int = 20240101

    @property
    def intervals(self) -> int:
        return self.hosts * self.days


def host_name(i: np.ndarray | int) -> np.ndarray | str:
    if isinstance(i, (int, np.integer)):
        return f"h-{int(i):06d}"
    return np.char.add("h-", np.char.zfill(np.asarray(i).astype(str), 6))


def generate(store: DuckDBStore, size: FleetSize) -> dict[str, int]:
    """Fill an empty ``store``; returns the row counts written."""
    rng = np.random.default_rng(size.seed)
    n, days = size.hosts, size.days
    cpu = rng.integers(0, len(CPU), n)
    kernel = rng.choice(len(KERNEL), n, p=[0.5, 0.3, 0.2])
    zone = rng.integers(0, len(ZONE), n)
    rollout = rng.integers(days // 4, days, n)  # day app_version 2.1 arrives on the host
    load = rng.gamma(4.0, 3.0, (n, days)).clip(0, 39).astype(np.int8)  # per host-day

    hosts = pd.DataFrame({"h": np.arange(n, dtype=np.int32), "cpu": cpu.astype(np.int8),
                          "kernel": kernel.astype(np.int8), "zone": zone.astype(np.int8),
                          "rollout": rollout.astype(np.int16)})
    con = store._con
    with store.transaction():
        con.register("_h", hosts)
        con.execute(
            "INSERT INTO hosts SELECT 'h-' || lpad(CAST(h AS VARCHAR), 6, '0'), "
            "'{\"cpu_model\": \"' || list_extract(?, cpu + 1) || '\", \"kernel\": \"' || "
            "list_extract(?, kernel + 1) || '\", \"zone\": \"' || list_extract(?, zone + 1) || "
            "'\"}', now() FROM _h",
            [CPU, KERNEL, ZONE],
        )
        cells = pd.DataFrame({
            "h": np.repeat(np.arange(n, dtype=np.int32), days),
            "d": np.tile(np.arange(days, dtype=np.int16), n),
            "load": load.ravel(),
        })
        con.register("_cells", cells)
        con.execute(
            "INSERT INTO exposure SELECT 'h-' || lpad(CAST(c.h AS VARCHAR), 6, '0'), "
            "?::TIMESTAMPTZ + to_days(CAST(c.d AS INTEGER)), "
            "?::TIMESTAMPTZ + to_days(CAST(c.d AS INTEGER) + 1), "
            "'{\"app_version\": \"' || CASE WHEN c.d >= h.rollout THEN '2.1' ELSE '2.0' END "
            "|| '\", \"load1\": ' || CAST(c.load AS VARCHAR) || '}', NULL "
            "FROM _cells c JOIN _h h USING (h)",
            [T0, T0],
        )
        con.unregister("_cells")
        con.unregister("_h")
    del cells

    # crashes: per disease, a Poisson count per (host, day) cell
    version21 = np.arange(days)[None, :] >= rollout[:, None]
    kernel61 = (kernel == 1)[:, None] & np.ones((1, days), bool)
    diseases = [  # (rate per node-day per cell mask, signature code, phenotype code)
        (np.full((n, days), 0.04), 0, 0),
        (np.where(kernel61, 0.05, 0.0), 1, 1),
        (np.where(load >= 20, 0.03, 0.0), 2, 2),
        (np.where(version21, 0.01, 0.0), 3, 5),
    ]
    cell_parts, sig_parts, phen_parts = [], [], []
    for rate, sig, phen in diseases:
        k = rng.poisson(rate.ravel())
        idx = np.repeat(np.arange(k.size, dtype=np.int64), k)
        cell_parts.append(idx)
        sig_parts.append(np.full(idx.size, sig, np.int32))
        phen_parts.append(np.full(idx.size, phen, np.int8))
    # the long tail: 0.035 per node-day over zipf-like signatures
    k = rng.poisson(np.full(n * days, 0.035))
    idx = np.repeat(np.arange(k.size, dtype=np.int64), k)
    weights = 1.0 / np.arange(1, size.tail_signatures + 1) ** 1.1
    tail = rng.choice(size.tail_signatures, idx.size, p=weights / weights.sum())
    cell_parts.append(idx)
    sig_parts.append((100 + tail).astype(np.int32))
    phen_parts.append(rng.choice([1, 2, 3, 5], idx.size).astype(np.int8))
    # bad hosts: 300 crashes each in unrelated places, mostly stack-misaligned
    bad = rng.choice(n, size.bad_hosts, replace=False)
    next_sig = 100 + size.tail_signatures
    for b in bad:
        d = rng.integers(days // 2, days, 300)
        cell_parts.append(b * days + d)
        sig_parts.append(np.arange(next_sig, next_sig + 300, dtype=np.int32))
        next_sig += 300
        phen_parts.append(np.where(np.arange(300) < 240, 4, 3).astype(np.int8))
    cell = np.concatenate(cell_parts)
    crashes = pd.DataFrame({
        "i": np.arange(cell.size, dtype=np.int64),
        "h": (cell // days).astype(np.int32),
        "s": ((cell % days) * 86400 + rng.integers(0, 86400, cell.size)).astype(np.int64),
        "sig": np.concatenate(sig_parts),
        "phen": np.concatenate(phen_parts),
    })
    sig_names = ["_Unwind_RaiseException | __cxa_throw", "io_uring_submit | Ring::flush",
                 "Pool::grow | Arena::alloc", "Parser::parse | Config::load"]
    sigs = pd.DataFrame({"sig": np.arange(len(sig_names), dtype=np.int32), "name": sig_names})
    phens = pd.DataFrame({
        "phen": np.arange(len(PHENOTYPES), dtype=np.int8),
        "p": [",".join(p) for p in PHENOTYPES],
        "hw": [",".join(x for x in p if x in HARDWARE) for p in PHENOTYPES],
    })
    with store.transaction():
        con.register("_c", crashes)
        con.register("_s", sigs)
        con.register("_p", phens)
        con.execute(
            "INSERT INTO crashes (crash_id, host_id, captured_at, source, signature, phenotypes, "
            "hardware_phenotypes, signal, signal_number, si_code_name, exe, app_version, "
            "attributes, core_status, report, ingested_at) "
            "SELECT 'c' || lpad(CAST(c.i AS VARCHAR), 8, '0'), "
            "'h-' || lpad(CAST(c.h AS VARCHAR), 6, '0'), ?::TIMESTAMPTZ + to_seconds(c.s), "
            "'elf-core', coalesce(s.name, CASE WHEN c.sig < ? THEN 'Tail' || CAST(c.sig AS VARCHAR) "
            "|| '::run' ELSE 'Private' || CAST(c.sig AS VARCHAR) || '::odd' END), "
            "string_split(p.p, ','), CASE WHEN p.hw = '' THEN []::VARCHAR[] "
            "ELSE string_split(p.hw, ',') END, 'SIGSEGV', 11, 'SEGV_MAPERR', '/usr/bin/svc', "
            "NULL, '{}', 'missing', '{}', now() "
            "FROM _c c LEFT JOIN _s s USING (sig) JOIN _p p USING (phen)",
            [T0, 100 + size.tail_signatures],
        )
        for name in ("_c", "_s", "_p"):
            con.unregister(name)
        # machine checks on the bad hosts, a few days into their bad period
        tel = pd.DataFrame({"h": np.repeat(bad, 3).astype(np.int32),
                            "d": np.tile([days // 2 - 2, days // 2 + 5, days // 2 + 20], len(bad))})
        con.register("_t", tel)
        con.execute(
            "INSERT INTO telemetry (event_id, host_id, ts, kind, severity, component, "
            "hardware_indicative, summary, detail) SELECT 'e' || CAST(row_number() OVER () AS "
            "VARCHAR), 'h-' || lpad(CAST(h AS VARCHAR), 6, '0'), ?::TIMESTAMPTZ + to_days(d), "
            "'mce', 'corrected', 'cpu', true, "
            "'mce: [Hardware Error]: CPU 12: Machine Check: 0 Bank 5: be00000000800400', '{}' "
            "FROM _t",
            [T0],
        )
        con.unregister("_t")
    return {"hosts": n, "exposure": n * days, "crashes": int(cell.size),
            "bad_hosts": [host_name(int(b)) for b in bad]}  # type: ignore[dict-item]
