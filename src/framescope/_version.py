"""framescope's version: the one place it is written (pyproject.toml reads it through
scikit-build-core's regex provider, CMake for the extension's ``_core.__version__``)."""

__version__ = "0.1.0"
