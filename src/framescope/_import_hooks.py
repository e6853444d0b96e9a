"""Running a function right after a module is first imported (a post-import hook).

Used under ``framescope run`` to act when a program initialises torch.distributed or MPI, and in
followed children to enable torch ops once torch is imported, without importing those modules
early ourselves (torch alone takes seconds to import).
"""

from __future__ import annotations

import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, Sequence, cast

if TYPE_CHECKING:
    import importlib.abc
    import importlib.machinery

# The finder and loader are plain classes (the import system only calls their methods): deriving
# from importlib.abc's would import it, and with it importlib.resources, pathlib and tempfile
# (~10 ms, at the start of every session that waits for asyncio to be imported).

_hooks: dict[str, list[Callable[[ModuleType], None]]] = {}
_lock = threading.Lock()


def after_import(name: str, hook: Callable[[ModuleType], None]) -> None:
    """Calls ``hook(module)`` once ``name`` is imported: now if it already is, else right after
    its module code has run. A hook that raises gets a warning on stderr; the import goes on."""
    module = sys.modules.get(name)
    if module is not None:
        _call(name, hook, module)
        return
    with _lock:
        _hooks.setdefault(name, []).append(hook)
        if not any(isinstance(f, _Finder) for f in sys.meta_path):
            sys.meta_path.insert(0, _Finder())


def _call(name: str, hook: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        hook(module)
    except Exception as exc:  # noqa: BLE001 - the program's import must not fail for us
        print(f"framescope: a hook after importing {name} failed: {exc!r}", file=sys.stderr)


class _Loader:
    """Wraps the real loader: runs the module, then the hooks registered for it."""

    def __init__(self, loader: Any, name: str) -> None:
        self.loader = loader
        self.name = name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        create = getattr(self.loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module: ModuleType) -> None:
        # The module shows its real loader, as without the hook.
        if module.__spec__ is not None:
            module.__spec__.loader = self.loader
        module.__loader__ = self.loader
        self.loader.exec_module(module)
        with _lock:
            hooks = _hooks.pop(self.name, [])
        for hook in hooks:
            _call(self.name, hook, module)

    def __getattr__(self, attr: str) -> object:  # get_data, is_package... of the real loader
        return getattr(self.loader, attr)


class _Finder:
    """Finds hooked modules through the other finders and wraps their loaders."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = cast("importlib.abc.Loader", _Loader(spec.loader, fullname))
                return spec
        return None
