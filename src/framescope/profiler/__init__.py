"""The profiling session: ``profile``, its schedule and stepping, the flight recorder, and
the hooks a session installs (import hooks, unrecorded helpers, tracemalloc guard)."""
