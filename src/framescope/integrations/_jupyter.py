"""IPython / Jupyter magics: ``%load_ext framescope``, then ``%%framescope`` profiles a cell and
``%framescope statement`` one line; the summary is printed under the cell's output and the trace
written to a file (``-o``: its extension picks the format as in ``profile.export``: ``.json``
Chrome trace, ``.pftrace``, ``.prof``, ``.fstrace``..., and ``.html``, a report also shown inline).

Options: ``-o PATH`` (default ``framescope-<cell number>.json``), ``--no-stack`` (record ranges
only, no Python calls: ``with_stack=False``), ``--c-calls`` (builtins too), ``--torch-ops``,
``--record-shapes``, ``-l N`` (summary rows, 0: none, -1: all), ``-s self|total|calls`` (summary
order), ``--show-host`` (the kernel's functions in the summary too).
The cell runs as a normal cell (its last expression is displayed, an exception shown); top-level
``await`` is not supported inside ``%%framescope``.

What the summary shows is the cell: the kernel's own code (IPython, ipykernel, traitlets, zmq,
tornado, the ``executing``/``stack_data`` traceback formatting, the cell holding the magic) and
what it calls (``codeop``, ``tokenize``...) is host code (framescope.analysis._host_code): recorded, but
left out of the trace file (which starts at the cell's code) and of the summary's rows, its total
said under the table; ``--show-host`` lists it in the summary and keeps it in the trace with the
category "host". The summary covers the threads that ran the cell: the
kernel's threads that were running before it (its I/O, heartbeat and control threads, mostly
waiting) are in the trace file but not in the summary.
"""

from __future__ import annotations

import html
import os
import sys
import threading
from typing import Any

from IPython.core.magic import Magics, line_cell_magic, magics_class
from IPython.display import display

from framescope.analysis._summary import summary_table
from framescope.profiler import _session
from framescope.profiler._profile import profile

def _cell_number(shell: Any) -> int:
    """The number of the cell running the magic (``In [N]``). IPython 8 and 9 count the cell as
    run before running it (``execution_count`` is N + 1 by then), so the number is read from the
    compiler's record of the cell's file: the frame of the cell that called the magic."""
    names = getattr(getattr(shell, "compile", None), "_filename_map", None)
    if isinstance(names, dict):
        frame: Any = sys._getframe(1)
        while frame is not None:
            number = names.get(frame.f_code.co_filename)
            if isinstance(number, int):
                return number
            frame = frame.f_back
    count = getattr(shell, "execution_count", 1)
    return max(count - 1, 0) if isinstance(count, int) else 0


def _calling_files() -> tuple[str, ...]:
    """Files of the frames running the magic (the kernel, the cell holding ``%%framescope``):
    host code, whatever directory they are in."""
    files = []
    frame: Any = sys._getframe(1)
    while frame is not None:
        files.append(frame.f_code.co_filename)
        frame = frame.f_back
    return tuple(files)


@magics_class
class FramescopeMagics(Magics):
    @line_cell_magic
    def framescope(self, line: str, cell: str | None = None) -> None:
        """Profile a cell (``%%framescope [options]``) or a statement
        (``%framescope [options] statement``) with framescope. See framescope.integrations._jupyter."""
        opts, statement = self.parse_options(
            line, "o:l:s:", "no-stack", "c-calls", "torch-ops", "record-shapes", "show-host",
            posix=False, strict=False,
        )
        code = cell if cell is not None else statement
        if not code.strip():
            print("framescope: nothing to profile (write %%framescope above a cell, or "
                  "%framescope statement)")
            return
        count = _cell_number(self.shell)
        output = os.path.expanduser(str(opts.get("o", f"framescope-{count}.json")).strip("'\""))
        limit = int(opts.get("l", 20))
        sort_by = str(opts.get("s", "self"))
        if sort_by not in ("self", "total", "calls"):
            print(f"framescope: -s must be self, total or calls, not {sort_by!r}")
            return
        with_stack = "no-stack" not in opts
        try:
            prof = profile(
                with_stack=with_stack,
                c_calls="c-calls" in opts and with_stack,
                torch_ops="torch-ops" in opts,
                record_shapes="record-shapes" in opts,
            )
        except (RuntimeError, ValueError) as exc:
            print(f"framescope: {exc}")
            return
        shell = self.shell
        if shell is None:
            print("framescope: no IPython shell to run the cell in")
            return
        # The kernel's threads already running (I/O, heartbeat, control): not the cell's.
        me = threading.current_thread()
        kernel_threads = {t.native_id for t in threading.enumerate() if t is not me}
        # The trace starts at the cell: the kernel's frames are left out of it, unless asked.
        _session.set_host_code(prof, files=_calling_files(),
                               export="show" if "show-host" in opts else "drop")
        prof.start()
        try:
            shell.run_cell(code, store_history=False)  # type: ignore[no-untyped-call]
        finally:
            prof.stop()
        try:
            prof.export(output)  # the extension picks the format, .html included
        except (OSError, ValueError) as exc:
            print(f"framescope: {exc}")
            return
        if limit != 0:
            cell_threads = [i for i, (_pid, tid, _pthread, _name) in enumerate(prof.trace.threads)
                            if tid not in kernel_threads]
            print(summary_table(prof.trace, limit=limit, sort_by=sort_by, threads=cell_threads,
                                show_host="show-host" in opts, extra_host=_session.host_files(prof)))
        print(f"framescope: trace written to {output} (backend: {prof.backend})")
        if output.endswith(".html"):
            with open(output, encoding="utf-8") as f:
                page = f.read()
            # A raw bundle, not IPython's HTML(): that warns "Consider using IPython.display.
            # IFrame" for any <iframe>, and an IFrame of a file path does not load in a browser
            # that reaches the notebook through a server.
            display({  # type: ignore[no-untyped-call]
                "text/html": f'<iframe srcdoc="{html.escape(page, quote=True)}" '
                             'style="width:100%;height:600px;border:1px solid #ddd"></iframe>',
                "text/plain": f"framescope report: {output}",
            }, raw=True)


def load_ipython_extension(ipython: Any) -> None:
    """Called by ``%load_ext framescope``."""
    ipython.register_magics(FramescopeMagics)
