"""The project itself: its typing (mypy --strict) and scripts/test_all.sh on a fresh system."""
