"""Every public callable of framescope has a signature inspect (help(), IDEs) can read, and those
written in C++ match their stubs in _core.pyi: names, kinds and defaults of the parameters."""

from __future__ import annotations

import ast
import inspect
import os
from typing import Any

import pytest

import framescope
from framescope import eval_frame

STUB = os.path.join(os.path.dirname(framescope.__file__), "_core.pyi")


def _stub_signatures() -> dict[str, list[tuple[str, str, str | None]]]:
    """name -> [(parameter, kind, default source or None)] of _core.pyi's functions and classes
    (a class: its __init__ without self)."""
    tree = ast.parse(open(STUB, encoding="utf-8").read())
    out: dict[str, list[tuple[str, str, str | None]]] = {}

    def params(fn: ast.FunctionDef, skip_self: bool) -> list[tuple[str, str, str | None]]:
        a = fn.args
        positional = a.posonlyargs + a.args
        defaults: list[ast.expr | None] = [None] * (len(positional) - len(a.defaults))
        defaults += a.defaults
        rows = []
        for i, arg in enumerate(positional):
            kind = "POSITIONAL_ONLY" if i < len(a.posonlyargs) else "POSITIONAL_OR_KEYWORD"
            d = defaults[i]
            rows.append((arg.arg, kind, None if d is None else ast.unparse(d)))
        if a.vararg:
            rows.append((a.vararg.arg, "VAR_POSITIONAL", None))
        for arg, d in zip(a.kwonlyargs, a.kw_defaults):
            rows.append((arg.arg, "KEYWORD_ONLY", None if d is None else ast.unparse(d)))
        if a.kwarg:
            rows.append((a.kwarg.arg, "VAR_KEYWORD", None))
        return rows[1:] if skip_self else rows

    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = params(node, False)
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    out[node.name] = params(item, True)
    return out


def _public() -> list[tuple[str, Any]]:
    objs = [(f"framescope.{n}", getattr(framescope, n)) for n in framescope.__all__]
    objs += [(f"framescope.eval_frame.{n}", getattr(eval_frame, n)) for n in eval_frame.__all__]
    return [(n, o) for n, o in objs if callable(o) and not isinstance(o, type(framescope))]


def _runtime(sig: inspect.Signature) -> list[tuple[str, str, str | None]]:
    return [(p.name, p.kind.name,
             None if p.default is inspect.Parameter.empty else repr(p.default))
            for p in sig.parameters.values()]


# Typing aliases of eval_frame (Callable[...] / Protocol types): not called by users.
_ALIASES = {"Callback", "FrameState", "GuardCompleteHook", "GuardFn", "GuardHook"}


@pytest.mark.parametrize("name,obj", _public(), ids=[n for n, _ in _public()])
def test_public_signature_readable_and_matches_stub(name: str, obj: Any) -> None:
    if name.rsplit(".", 1)[1] in _ALIASES:
        pytest.skip("a typing alias")
    if isinstance(obj, type) and issubclass(obj, BaseException):
        pytest.skip("an exception class")
    if isinstance(obj, type) and issubclass(obj, __import__("enum").Enum):
        pytest.skip("an enum")
    sig = inspect.signature(obj)  # raises when there is none to read
    params = _runtime(sig)
    assert not [p for p in params if p[1] in ("VAR_POSITIONAL", "VAR_KEYWORD")] or \
        name.endswith(("EventList", "FunctionEventAvg")), f"{name}{sig}: no real parameters"
    stubs = _stub_signatures()
    short = name.rsplit(".", 1)[1]
    from_core = getattr(obj, "__module__", "").startswith(("framescope._core",
                                                           "framescope.eval_frame")) \
        and short in stubs
    if short in stubs and (from_core or obj.__module__ == "framescope._public_functions"):
        stub = stubs[short]
        assert [(p, k) for p, k, _ in params] == [(p, k) for p, k, _ in stub], (name, sig)
        for (p, _k, d), (_p, _k2, sd) in zip(params, stub):
            if sd not in (None, "...") and d is not None:
                assert d == sd or d.split(".")[-1].split(":")[0] in sd, (name, p, d, sd)


def test_profile_signature_is_its_keywords() -> None:
    sig = inspect.signature(framescope.profile)
    assert "with_stack" in sig.parameters and "schedule" in sig.parameters
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in sig.parameters.values())
    assert "with_stack" in framescope.profile.__init__.__code__.co_varnames
    import pydoc

    assert "with_stack" in pydoc.render_doc(framescope.profile)


def test_guarded_code_signature_has_strategy() -> None:
    assert list(inspect.signature(eval_frame.GuardedCode).parameters) == \
        ["code", "check_fn", "strategy"]
