"""Imports during the session: a new module's body runs (its <module> frame and the calls it
makes), a package's __init__, importlib.reload, and __import__ of a module already loaded."""

import importlib
import os
import sys
import tempfile

SOURCE = '''
def helper():
    return 1

VALUE = helper()
'''


def write(path, text):
    # Several runs may be here at once: a file written anew changes the folder's mtime, which
    # makes another run's import system read the folder again (other calls).
    try:
        with open(path) as f:
            if f.read() == text:
                return
    except FileNotFoundError:
        pass
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def run(make_profile):
    # The same path in every run: runs recorded separately are compared by file names.
    tmp = os.path.join(tempfile.gettempdir(), "framescope-differential-imports")
    os.makedirs(os.path.join(tmp, "fs_fresh_pkg"), exist_ok=True)
    write(os.path.join(tmp, "fs_fresh_module.py"), SOURCE)
    write(os.path.join(tmp, "fs_fresh_pkg", "__init__.py"), SOURCE)
    sys.path.insert(0, tmp)
    importlib.invalidate_caches()
    prof = make_profile()
    with prof:
        import fs_fresh_module
        import fs_fresh_pkg  # noqa: F401

        importlib.reload(fs_fresh_module)
        __import__("os.path")
    sys.path.remove(tmp)
    return prof
