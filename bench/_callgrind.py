"""Reading a callgrind part file: the benches that count instructions share this parser."""

from __future__ import annotations

import os
from collections.abc import Collection


def parse_part(path: str, line_sources: Collection[str] = ()
               ) -> tuple[int, dict[str, int], dict[str, int]]:
    """Total Ir of a callgrind part (written with --compress-strings=no --compress-pos=no), self
    Ir per function ("name [object]") and per source line of `line_sources` ("file:line"; needs
    line tables: FRAMESCOPE_PROFILING_SYMBOLS)."""
    total = 0
    funcs: dict[str, int] = {}
    lines: dict[str, int] = {}
    obj = fn = source = ""
    skip_next = False
    with open(path) as fh:
        for raw in fh:
            if skip_next:  # the cost line after calls=: the callee's inclusive cost, not self
                skip_next = False
                continue
            if raw.startswith("ob="):
                obj = os.path.basename(raw[3:].strip())
            elif raw.startswith("fn="):
                fn = f"{raw[3:].strip()} [{obj}]"
            elif raw.startswith(("fl=", "fi=", "fe=")):
                source = os.path.basename(raw[3:].strip())
            elif raw.startswith("calls="):
                skip_next = True
            elif raw.startswith("totals:"):
                total = int(raw.split()[1])
            elif raw[:1].isdigit():
                parts = raw.split()
                if len(parts) < 2:
                    continue
                ir = int(parts[1])
                funcs[fn] = funcs.get(fn, 0) + ir
                if source in line_sources:
                    key = f"{source}:{parts[0]}"
                    lines[key] = lines.get(key, 0) + ir
    return total, funcs, lines
