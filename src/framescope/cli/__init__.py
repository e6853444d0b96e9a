"""The ``framescope`` command line."""

from framescope.cli._main import main as main
