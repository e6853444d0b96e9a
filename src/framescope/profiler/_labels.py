"""``label_calls``: calls of a class's instances as labelled slices (torch's ``nn.Module`` too)."""

from __future__ import annotations

import sys

from framescope import _arguments, _core


def label_torch_modules() -> None:
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        call = torch.nn.Module.__call__
    except AttributeError:
        return
    code = getattr(call, "__code__", None)
    if code is not None:
        _core.label_calls(code, "nn.Module", per_instance=True)  # torch's "Linear_0", "Linear_1"


def label_calls(cls: type, label: str | None = None) -> None:
    """Show calls of instances of ``cls`` as ``"<label>: <instance class>"`` slices, with the
    frames of the call nested under them (as torch does for ``nn.Module``).

    Raises:
        TypeError: ``cls`` is not a class (an instance, say), or has no Python ``__call__``;
            ``label`` is not a str.
        ValueError: ``label`` is empty, or has a NUL character or a lone surrogate.
    """
    if not isinstance(cls, type):
        raise TypeError(f"label_calls(): cls must be a class, not {type(cls).__name__} "
                        f"(label_calls(type(obj)) labels the calls of obj's class)")
    if label is not None:
        _arguments.text("label_calls(): label", label)
    call = getattr(cls, "__call__", None)
    code = getattr(call, "__code__", None)
    if code is None:
        raise TypeError(f"{cls!r} has no Python-level __call__ to label")
    _core.label_calls(code, label or cls.__name__)
