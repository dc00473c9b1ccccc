"""parse.telemetry: hardware and kernel telemetry lines (MCE, EDAC, Xid, AER) -> TelemetryEvent."""
