"""What commands read and write: ``-o``/``-f`` resolved to a file and format, the output checked
before the program runs, the file a stream goes to, a saved trace loaded, errors as one line."""

from __future__ import annotations

import os
import sys
import tempfile
from typing import TYPE_CHECKING

from framescope.export._formats import (EXTENSIONS, NAMES, check_compression, format_for_path,
                                         format_name)

if TYPE_CHECKING:
    from framescope.profiler._profile import profile


#: -f/--format's choices: the export formats' names.
FORMAT_CHOICES = NAMES


def resolve_output(output: str | None, format: str | None) -> tuple[str, str]:
    """The file and format ``framescope run`` writes: ``-f`` wins, else ``-o``'s extension;
    without ``-o`` the name follows the format (``framescope.trace.json``,
    ``framescope.trace.prof``...). Raises ValueError for a bad combination."""
    if output is not None and "\0" in output:
        raise ValueError("the output path contains a NUL character")
    if format is not None:
        name = format_name(format)
    elif output is not None:
        name = format_for_path(output, "-f/--format")
    else:
        name = "chrome"
    if output is None:
        output = "framescope.trace" + EXTENSIONS[name]
    check_compression(name, output)
    return output, name


def error_text(exc: BaseException) -> str:
    """An error as one clean line for the command line: framescope's own OSErrors carry their
    whole message (``framescope: cannot open 'x': No such file or directory``) as strerror,
    which str() would wrap in ``[Errno 2] ...: 'x'``; a plain OSError reads as python's."""
    if isinstance(exc, OSError) and exc.strerror:
        text = exc.strerror
        if text.startswith("framescope: "):
            return text[len("framescope: "):]
        if exc.filename is not None:
            return f"{exc.filename!r}: {text}"
        return text
    return str(exc)


def stream_file(output: str, format: str) -> str:
    """Where ``framescope run --stream`` streams the events: ``output`` itself for a .fstrace,
    else a hidden temporary next to it (converted to ``output`` at the end, then removed). An
    output that is not a regular file (/dev/null, a FIFO, /dev/stdout) cannot be streamed into
    (the file is completed in place and read back) and has no folder to put a temporary in: the
    stream then goes to a temporary in the system's temporary folder."""
    folder, name = os.path.split(os.path.abspath(output))
    if written_in_place(output):
        return os.path.join(tempfile.gettempdir(),
                            f".framescope-{os.getpid()}-{name}.stream.fstrace")
    if format == "fstrace":
        return output
    return os.path.join(folder, f".{name}.{os.getpid()}.stream.fstrace")


def written_in_place(output: str) -> bool:
    """True when ``output`` is written in place rather than replaced (the core's rule: an
    existing path that is not a regular file, or any path in /dev but /dev/shm, or in /proc)."""
    if os.path.exists(output) and not os.path.isfile(output):
        return True
    real = os.path.realpath(os.path.dirname(os.path.abspath(output)))
    if real == "/dev/shm" or real.startswith("/dev/shm/"):
        return False
    return any(real == top or real.startswith(top + "/") for top in ("/dev", "/proc"))


def check_output(path: str) -> str | None:
    """Why the trace cannot be written to ``path``, or None: checked before the program runs by
    creating (and removing) a temporary file next to it, as the final atomic write will (asking
    os.access is not enough: root is told yes where the file system says no, e.g. in /sys)."""
    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        return f"cannot write the trace to {path!r}: it is a directory"
    if not os.path.isdir(folder):
        return f"cannot write the trace to {path!r}: no directory {folder!r}"
    if os.path.exists(target) and not os.access(target, os.W_OK):
        return f"cannot write the trace to {path!r}: permission denied"
    if written_in_place(path):
        # A device, FIFO or /dev/stdout: written in place, no file is made next to it (nor a
        # new one in /dev).
        if not os.path.exists(target):
            return (f"cannot write the trace to {path!r}: no such file "
                    "(none is made in /dev or /proc)")
        return None
    probe = os.path.join(folder, f".{os.path.basename(target)}.{os.getpid()}.check.tmp")
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        os.unlink(probe)
    except OSError as e:
        return f"cannot write the trace to {path!r}: {(e.strerror or str(e)).lower()}"
    return None


def load_trace(command: str, path: str) -> profile | None:
    """The saved trace a command reads (``framescope.load``), or None once the reason it cannot
    be read is said on one line (``framescope COMMAND: ...``)."""
    from framescope.profiler._profile import load

    try:
        return load(path)
    except (OSError, ValueError) as exc:
        print(f"framescope {command}: {error_text(exc)}", file=sys.stderr)
        return None
