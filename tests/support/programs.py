"""Small programs the command-line tests run under ``framescope run``, and how they start them."""

from __future__ import annotations

import resource
import signal
import textwrap
from pathlib import Path

# Prints "ready", then calls work() (loop.py(4): work) until a signal ends it.
LOOP = textwrap.dedent("""
    import sys, time

    def work():
        return sum(range(1000))

    work()
    print("ready", flush=True)
    while True:
        work()
        time.sleep(0.001)
""")

# Forks a child that outlives the parent by half a second: forks.py(4): parent_work in the
# parent, forks.py(7): child_work in the child.
FORK_OUTLIVES_PARENT = textwrap.dedent("""
    import os, sys, time

    def parent_work():
        return 1

    def child_work():
        return 2

    if os.fork() == 0:
        time.sleep(0.5)  # outlives the parent
        child_work()
        sys.exit(0)
    parent_work()
""")

# A program's first lines: a keep_newest session (1 MiB) running, its flight recorder dumping to
# t.json on SIGUSR1, `real_dump` the profile's own dump (for a test to wrap).
RECORDING_ON_SIGUSR1 = """\
import os, signal
import framescope
from framescope.profiler._flight_recorder import FlightRecorder

prof = framescope.profile(on_limit="keep_newest", memory_limit="1MiB")
recorder = FlightRecorder(prof, "t.json", "chrome", signal.SIGUSR1)
recorder.install()
prof.start()
real_dump = prof.dump
"""


def write(path: Path, code: str) -> Path:
    """Writes ``code`` (dedented) to ``path``."""
    path.write_text(textwrap.dedent(code))
    return path


def as_from_a_terminal() -> None:
    """A ``preexec_fn``: the child starts as from a terminal, with SIGINT, SIGHUP, SIGTERM and
    SIGQUIT at their defaults (a shell running the suite in the background leaves SIGINT ignored,
    nohup SIGHUP, and a child inherits that), and no core file from SIGQUIT."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM, signal.SIGQUIT):
        signal.signal(signum, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
