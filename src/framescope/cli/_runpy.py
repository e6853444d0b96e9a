"""Running the program as python would: a script, a directory or zip with ``__main__``, or
``-m module`` (runpy's globals), and its exceptions reported without framescope's frames."""

from __future__ import annotations

import builtins
import importlib.machinery
import io
import os
import runpy
import sys
import types
import zipfile

from framescope.cli._finish import SIGINT_HANDLER_CODE
from framescope.profiler._options import PACKAGE_DIR


RUNPY_FILES = {"<frozen runpy>", getattr(runpy, "__file__", "runpy.py")}


def _is_ours(tb: types.TracebackType) -> bool:
    filename = tb.tb_frame.f_code.co_filename
    return filename.startswith(PACKAGE_DIR) or filename in RUNPY_FILES


def _user_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The traceback without the framescope and runpy frames above the program's (and the
    console-script launcher above those), as python would show it for the program alone."""
    head = tb
    if tb is not None and tb.tb_next is not None and not _is_ours(tb) and _is_ours(tb.tb_next):
        tb = tb.tb_next  # the `framescope` launcher script: sys.exit(main())
    while tb is not None and _is_ours(tb):
        tb = tb.tb_next
    if tb is None:
        return head  # an error of framescope's own: show it whole
    # The innermost frame may be framescope's SIGINT handler (a Ctrl-C), where python's is C.
    node = tb
    while node.tb_next is not None:
        if node.tb_next.tb_next is None and node.tb_next.tb_frame.f_code is SIGINT_HANDLER_CODE:
            node.tb_next = None
            break
        node = node.tb_next
    return tb


def has_main(path: str) -> bool:
    """Whether python can run ``path``: a file, or a directory or zip file with a ``__main__``
    module (else python says "can't find '__main__' module")."""
    names = ("__main__.py", "__main__.pyc", "__main__")
    if os.path.isdir(path):
        return any(os.path.exists(os.path.join(path, name)) for name in names)
    if zipfile.is_zipfile(path):
        try:
            with zipfile.ZipFile(path) as archive:
                return any(n in names or n.startswith("__main__/") for n in archive.namelist())
        except (OSError, zipfile.BadZipFile):
            return True  # let runpy report it
    return True


def load_script(path: str) -> tuple[types.CodeType, dict[str, object]] | None:
    """The code and the fresh ``__main__`` namespace to run a script file in, as ``python path``
    does: ``__file__`` absolute (3.9+), ``sys.argv[0]`` as given, and the module stays
    ``sys.modules["__main__"]`` afterwards. None for a directory or zip file with a
    ``__main__.py``, which go through runpy, as python does. Done before the session starts,
    so that reading and compiling the file are not in the trace."""
    if os.path.isdir(path) or zipfile.is_zipfile(path):
        return None
    abspath = os.path.abspath(path)
    with io.open_code(abspath) as f:
        source = f.read()
    code = compile(source, abspath, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = abspath
    main.__cached__ = None  # type: ignore[attr-defined]
    main.__builtins__ = builtins  # type: ignore[attr-defined]
    main.__loader__ = importlib.machinery.SourceFileLoader("__main__", abspath)
    sys.modules["__main__"] = main
    return code, main.__dict__


def load_module(name: str) -> tuple[types.CodeType, dict[str, object], str]:
    """The code of a module run as ``python -m name``, the fresh ``__main__`` namespace with the
    globals runpy gives it, and its file (``sys.argv[0]``). The module becomes
    ``sys.modules["__main__"]``. Done before the session starts, as load_script, so that the
    trace begins with the module's own code; finding it imports its parent packages.

    Raises:
        ImportError: no such module (or a package without ``__main__``), as python -m says.
    """
    try:
        _, spec, code = runpy._get_module_details(name)  # type: ignore[attr-defined]
    except ImportError:
        raise
    except Exception as exc:  # runpy's own error type, with the message python -m prints
        raise ImportError(str(exc)) from None
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=spec.origin, __cached__=spec.cached, __doc__=None,
                         __loader__=spec.loader, __package__=spec.parent, __spec__=spec,
                         __builtins__=builtins)
    sys.modules["__main__"] = main
    return code, main.__dict__, spec.origin or name


def report_exception(exc: BaseException) -> None:
    """Reports an exception of the program as python would: through sys.excepthook (the
    program's own, if it set one), without framescope's frames in the traceback."""
    tb = _user_traceback(exc.__traceback__)
    try:
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
    except BaseException:  # noqa: BLE001 - a failing hook: python falls back the same way
        sys.__excepthook__(type(exc), exc, tb)


def quiet_excepthook(*args: object) -> None:
    """Installed just before the final KeyboardInterrupt leaves main(): already reported."""
