"""The command line: framescope run, convert, summary, and how a run ends."""
