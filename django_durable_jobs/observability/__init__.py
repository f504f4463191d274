"""What the app tells observers: OpenTelemetry spans and the fenced-write history log.

Imports nothing from the package: both are called from the store and the worker, never the
other way round.
"""
