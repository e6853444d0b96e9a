"""torch operators in framescope's timeline (``profile(torch_ops=True)``).

framescope registers an observer with torch's RecordFunction machinery (``at::addGlobalCallback``,
the mechanism torch's own profiler uses), so every ``aten::...`` op, autograd node and
``torch.profiler.record_function`` range becomes a framescope range on the thread that ran it,
nested under the Python frames that called it. framescope is not built against torch: the
extension finds those functions in the loaded ``libtorch_cpu`` at run time. Before it does, this
module checks that the installed torch declares ``at::RecordFunctionCallback`` exactly as the
extension mirrors it (from ``torch/include/ATen/record_function.h``), and after, a probe op
checks that names and input shapes come through. Any mismatch raises a RuntimeError that says
what differs; nothing is registered then.
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any

from framescope import _core

#: torch versions whose ``ATen/record_function.h`` was compared with the extension's mirror by
#: hand; used only when the installed torch ships no headers to check.
VERIFIED_TORCH_VERSIONS = ("2.13",)

# The declarations the extension mirrors (cpp/python/integrations/torch_ops.cpp),
# whitespace-normalised.
_EXPECTED_CALLBACK_MEMBERS = [
    "StartCallback start_;",
    "EndCallback end_;",
    "double sampling_prob_ = 1.0;",
    "std::array<bool, static_cast<size_t>(RecordScope::NUM_SCOPES)> scopes_ = {};",
    "bool needs_inputs_ = false;",
    "bool needs_outputs_ = false;",
    "bool needs_ids_ = false;",
]
_EXPECTED_CALLBACK_TYPES = [
    "using StartCallback = std::unique_ptr<ObserverContext> (*)(const RecordFunction&);",
    "using EndCallback = void (*)(const RecordFunction&, ObserverContext*);",
]
_EXPECTED_SCOPES = {"FUNCTION": 0, "BACKWARD_FUNCTION": 1, "USER_SCOPE": 7, "NUM_SCOPES": 10}

_state: dict[str, Any] = {}


def _normalise(text: str) -> str:
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"\s+", " ", text).replace("( *)", "(*)").strip()


def check_header(text: str) -> list[str]:
    """What in a ``record_function.h`` differs from the layout framescope's extension mirrors
    (an empty list when it matches)."""
    problems: list[str] = []
    m = re.search(r"enum class \w* ?RecordScope : uint8_t \{(.*?)\};", text, re.S)
    if not m:
        problems.append("enum RecordScope not found")
    else:
        names = [n.split("=")[0].strip() for n in _normalise(m.group(1)).split(",")]
        names = [n for n in names if n]
        for name, index in _EXPECTED_SCOPES.items():
            if name not in names or names.index(name) != index:
                problems.append(f"RecordScope::{name} is not value {index}")
    m = re.search(r"class TORCH_API RecordFunctionCallback \{(.*?)\n\};", text, re.S)
    if not m:
        problems.append("class RecordFunctionCallback not found")
        return problems
    body = m.group(1)
    private = body.rsplit("private:", 1)[-1]
    members = [_normalise(s) + ";" for s in private.split(";") if _normalise(s)]
    if members != _EXPECTED_CALLBACK_MEMBERS:
        problems.append(f"RecordFunctionCallback members are {members}")
    flat = _normalise(body)
    for decl in _EXPECTED_CALLBACK_TYPES:
        if _normalise(decl) not in flat:
            problems.append(f"RecordFunctionCallback lacks `{decl}`")
    if "virtual ~ObserverContext() = default;" not in _normalise(text):
        problems.append("ObserverContext has not just a virtual destructor")
    return problems


def _import_torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        raise RuntimeError(
            "torch_ops=True needs PyTorch, which could not be imported "
            f"({exc}); install torch or profile without torch_ops"
        ) from None
    return torch


def _check_torch(torch: Any) -> None:
    version = str(torch.__version__).split("+")[0]
    major_minor = ".".join(version.split(".")[:2])
    header = os.path.join(os.path.dirname(torch.__file__), "include", "ATen", "record_function.h")
    if os.path.exists(header):
        with open(header, encoding="utf-8", errors="replace") as f:
            problems = check_header(f.read())
        if problems:
            raise RuntimeError(
                f"torch_ops=True does not support torch {torch.__version__}: its "
                f"at::RecordFunctionCallback differs from the layout framescope mirrors "
                f"({'; '.join(problems)}; checked {header})"
            )
    elif major_minor not in VERIFIED_TORCH_VERSIONS:
        raise RuntimeError(
            f"torch_ops=True: torch {torch.__version__} ships no ATen headers to check "
            f"framescope's RecordFunction observer against, and is not one of the versions "
            f"verified by hand ({', '.join(VERIFIED_TORCH_VERSIONS)})"
        )


def _probe(torch: Any) -> None:
    """Runs one op and one user range under the observer and checks what it saw."""
    a = torch.ones(2, 3)
    b = torch.ones(2, 3)

    def work() -> None:
        torch.add(a, b, alpha=2)
        with torch.autograd.profiler.record_function("framescope.probe"):
            pass

    seen = _core._torch_ops_probe(work)
    add = [r for r in seen if r[0] == "aten::add"]
    user = [r for r in seen if r[0] == "framescope.probe"]
    problems = []
    if len(add) != 1 or add[0][1] != 0:
        problems.append(f"expected one aten::add op, saw {[r[:2] for r in seen]}")
    elif add[0][2][:2] != [[2, 3], [2, 3]]:
        problems.append(f"aten::add input sizes read as {add[0][2]}")
    elif add[0][3] and add[0][3][0] != "float":
        problems.append(f"aten::add input types read as {add[0][3]}")
    if len(user) != 1 or user[0][1] != 7:
        problems.append(f"expected one user scope 'framescope.probe', saw {[r[:2] for r in seen]}")
    if problems:
        raise RuntimeError(
            f"torch_ops=True: the RecordFunction observer failed its self-check on torch "
            f"{torch.__version__} ({'; '.join(problems)})"
        )


def attach() -> None:
    """Imports torch, checks it, finds its RecordFunction functions and runs the probe (once per
    process). RuntimeError when torch is missing or unsupported."""
    if _state.get("attached"):
        return
    torch = _import_torch()
    _check_torch(torch)
    library, has_types = _core._torch_ops_attach()
    _probe(torch)
    _state.update(attached=True, library=library, input_types=has_types)


def enable(record_shapes: bool) -> None:
    """Starts recording torch ops into the running session (after attach())."""
    attach()
    _core._torch_ops_enable(record_shapes)


def disable() -> None:
    """Stops recording torch ops (idempotent)."""
    if "framescope._core" in sys.modules:
        _core._torch_ops_disable()
