"""framescope's test suite: one package per concern, shared helpers in tests.support."""
