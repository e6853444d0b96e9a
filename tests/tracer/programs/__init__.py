"""The programs of the differential test (tests/tracer/test_differential.py): each has
``run(make_profile)``, or ``work()`` alone, which tests/support/differential_runner.py's
run_work() runs once unrecorded, then once recorded."""
