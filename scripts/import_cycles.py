#!/usr/bin/env python3
"""scripts/import_cycles.py: the import graph of src/framescope and its cycles.

Every import counts: top level, under TYPE_CHECKING, and inside functions. ``from pkg import
mod`` is an import of the module ``pkg.mod`` (importing a submodule runs its package's
__init__ too, but that is Python's mechanics, not a dependency of the importer on the package's
other modules); ``from framescope import x`` of a name of the root package is left out (the
root only re-exports). Prints each cycle (a strongly connected component of more than one
module) and the pairs of subpackages that import each other; exits 1 when a module cycle
exists.

Usage: python scripts/import_cycles.py [src/framescope]
"""

from __future__ import annotations

import ast
import os
import sys


def modules(root: str) -> dict[str, str]:
    """Dotted module name -> file, for every .py under ``root`` (the children's bootstrap, run
    as a sitecustomize of other interpreters, is not a module of the package)."""
    out = {}
    base = os.path.dirname(os.path.abspath(root))
    for folder, _, files in os.walk(root):
        if "_bootstrap" in folder:
            continue
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                dotted = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                out[dotted.removesuffix(".__init__")] = path
    return out


def graph(mods: dict[str, str]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods
                           else node.module for a in node.names]
            for target in targets:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target not in (mod, "framescope"):
                    edges[mod].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def package_pairs(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    def package(m: str) -> str:
        return ".".join(m.split(".")[:2])

    deps: dict[str, set[str]] = {}
    for m, targets in edges.items():
        for t in targets:
            if package(m) != package(t):
                deps.setdefault(package(m), set()).add(package(t))
    return sorted((a, b) for a in deps for b in deps[a] if a < b and a in deps.get(b, ()))


def main() -> int:
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "src", "framescope")
    edges = graph(modules(root))
    found = cycles(edges)
    for component in found:
        print("cycle:", " <-> ".join(component))
    for a, b in package_pairs(edges):
        print(f"subpackages importing each other: {a} <-> {b}")
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} imports, "
          f"{len(found)} module cycles")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
