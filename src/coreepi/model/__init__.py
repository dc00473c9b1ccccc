"""model: the contracts every stage shares.

- :mod:`coreepi.model.report`: :class:`CrashReport`, one crash (versioned JSON);
- :mod:`coreepi.model.events`: :class:`TelemetryEvent`, one hardware or kernel event;
- :mod:`coreepi.model.fleet`: host rows, exposure intervals, rejections;
- :mod:`coreepi.model.compression`: the compressions an artifact may come in (magic bytes);
- :mod:`coreepi.model.heartbeat`: :class:`Heartbeat`, a node agent's exposure report;
- :mod:`coreepi.model.schema`: the CrashReport JSON Schema;
- :mod:`coreepi.model.trusted`: models a parser built from its own typed values, unvalidated.

Nothing here does I/O. The submodules are imported by name (not re-exported
here) so that a command pays only for the models it uses.
"""
