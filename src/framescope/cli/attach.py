"""``framescope attach PID``: a window of a running process (the work is in framescope.attach)."""

from __future__ import annotations

import argparse

from framescope.cli._attach import attach as run
from framescope.cli._options import add_analysis_options, add_recording_options, add_torch_options


def add_parser(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    from framescope.cli._attach import add_parser as add

    add(sub, [add_recording_options, add_analysis_options, add_torch_options])


__all__ = ["add_parser", "run"]
