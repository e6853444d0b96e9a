"""The programs of the differential test (tests/tracer/test_differential.py), each with run(make_profile)."""
