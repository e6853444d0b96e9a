"""The Python tracer: what a session records of calls, threads, memory and filters, checked against CPython's own hooks."""
