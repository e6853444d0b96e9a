# framescope's bootstrap for the Python children of `framescope run` (see framescope/processes/_follow.py).
#
# `framescope run` puts this directory first on PYTHONPATH, so every Python it starts, directly
# or not (multiprocessing's spawn and forkserver, subprocess), imports this module at start-up.
# It starts recording there, with the parent's options, and saves the child's trace at exit for
# the parent to merge. Kept to syntax every Python reads: a Python without framescope (another
# version, another installation) only chains to its own sitecustomize.


def _framescope_bootstrap():  # type: () -> None
    import os
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    # The child's sys.path is as it would be without framescope (PYTHONPATH stays, for its own
    # children).
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    # Chain to the sitecustomize this one shadows, if there is one.
    this = sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # type: ignore  # noqa: F401  (the next one on sys.path)
    except ImportError as exc:
        if getattr(exc, "name", None) != "sitecustomize":
            import traceback

            traceback.print_exc()
        if this is not None:
            sys.modules["sitecustomize"] = this
    except Exception:
        import traceback

        traceback.print_exc()
    try:
        from framescope.processes import _follow as follow
    except Exception:
        return  # not this Python's package
    follow.child_start()


_framescope_bootstrap()
del _framescope_bootstrap
