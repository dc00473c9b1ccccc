"""parse: turn one artifact's bytes into a CrashReport, and nothing more.

- :mod:`coreepi.parse.elf`: ELF cores (drgn is set up in one place,
  :mod:`coreepi.parse.elf.unwind`; no drgn object leaves this package);
- :mod:`coreepi.parse.jvm`: JVM hs_err logs;
- :mod:`coreepi.parse.kernel`: kernel logs;
- :mod:`coreepi.parse.telemetry`: hardware telemetry lines -> TelemetryEvent.

Phenotypes and signatures are :mod:`coreepi.analyze`'s job for every kind.
"""
