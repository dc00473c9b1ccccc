"""Coverage-guided fuzzing of one target with atheris (libFuzzer).

    python tests/fuzz/run_fuzz.py TARGET [libFuzzer flags…]

e.g. ``run_fuzz.py hs_err -max_total_time=120 -rss_limit_mb=1024 -timeout=10``.
The seed corpus ``tests/fuzz/corpus/TARGET`` is read (not written: new
inputs go to a scratch corpus directory given first on the command line, if
any). An input on which the target raises anything but its allowed clear
error, runs past ``-timeout`` seconds or past ``-rss_limit_mb`` is written as
``crash-…``/``timeout-…``/``oom-…`` (``-artifact_prefix``) and the run
exits non-zero. coreepi is instrumented for coverage (``instrument_imports``).
"""

from __future__ import annotations

import sys
from pathlib import Path

import atheris

sys.path.insert(0, str(Path(__file__).resolve().parent))

with atheris.instrument_imports(include=["coreepi"]):
    import targets  # noqa: E402  (instrumented: imports the parsers lazily, so warm them)
    from coreepi.ingest import fleet  # noqa: F401
    from coreepi.model import heartbeat, report  # noqa: F401
    from coreepi.parse.elf import corefile, notes  # noqa: F401
    from coreepi.parse.jvm import hs_err  # noqa: F401
    from coreepi.parse.kernel import oops  # noqa: F401
    from coreepi.parse.telemetry import logs  # noqa: F401
    from coreepi.serve.routes import ingest  # noqa: F401


def main() -> None:
    name, flags = sys.argv[1], sys.argv[2:]
    target = targets.TARGETS[name]

    def one(data: bytes) -> None:
        try:
            target.run(data)
        except target.allowed:
            pass

    atheris.Setup([sys.argv[0], *flags], one)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
