"""CPU time of the findings refresh's per-signature table (every signature of
the window, analysed or not: :func:`coreepi.serve.findings._signatures`) next
to the refresh's existing per-signature table on the same crashes
(``_phenotypes_by_signature``), so the added cost reads against a peer of the
same refresh. Synthetic crashes: Zipf-distributed signatures (a long tail,
as a fleet has), uniform hosts and times over 200 days. CPU seconds
(``time.process_time``), fair on a shared machine.

    .venv/bin/python benchmarks/bench_signature_table.py --crashes 1000000
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from coreepi.serve.findings import _phenotypes_by_signature, _signatures


def crashes(n: int, seed: int = 1) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "signature": pd.Categorical([f"sig{i}" for i in rng.zipf(1.3, n) % 50_000]),
        "host_id": [f"h{i}" for i in rng.integers(0, 5000, n)],
        "captured_at": pd.Timestamp("2024-01-01", tz="UTC")
        + pd.to_timedelta(rng.integers(0, 200 * 86400, n), unit="s"),
        "phenotypes": [["null-deref"]] * n,
    })


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--crashes", type=int, default=1_000_000)
    frame = crashes(ap.parse_args().crashes)
    for fn in (_signatures, _phenotypes_by_signature):
        t = time.process_time()
        out = fn(frame)
        print(f"{fn.__name__}: {time.process_time() - t:.2f} s CPU, {len(out):,} signatures")


if __name__ == "__main__":
    main()
