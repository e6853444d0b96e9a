"""The Python package's structure (issue 28, docs/architecture.md): no module imports one that
imports it back (TYPE_CHECKING and function-level imports included), and no module grows past
the size one concern takes. Read from the source tree, not the installed package."""

from __future__ import annotations

import importlib.util
import os



def _repository() -> str:
    """The checkout this file is in (tests/ or a folder below it)."""
    here = os.path.dirname(os.path.abspath(__file__))
    while not os.path.isdir(os.path.join(here, "src", "framescope")):
        parent = os.path.dirname(here)
        assert parent != here, "not in a framescope checkout"
        here = parent
    return here


ROOT = _repository()
PACKAGE = os.path.join(ROOT, "src", "framescope")


def _checker():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(
        "import_cycles", os.path.join(ROOT, "scripts", "import_cycles.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_import_cycles() -> None:
    checker = _checker()
    edges = checker.graph(checker.modules(PACKAGE))
    assert len(edges) > 50 and sum(map(len, edges.values())) > 100  # the graph was read
    assert checker.cycles(edges) == []


def test_the_checker_finds_a_cycle() -> None:
    checker = _checker()
    edges = {"framescope.a": {"framescope.b"}, "framescope.b": {"framescope.c"},
             "framescope.c": {"framescope.a"}, "framescope.d": {"framescope.a"}}
    assert checker.cycles(edges) == [["framescope.a", "framescope.b", "framescope.c"]]


def test_no_module_over_about_450_lines() -> None:
    sizes = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    sizes[os.path.relpath(path, PACKAGE)] = sum(1 for _ in f)
    assert len(sizes) > 50
    assert {p: n for p, n in sizes.items() if n > 460} == {}
