"""torch's tensor memory in framescope's timeline (``profile_memory=True`` with torch ops on).

torch's CPU allocator reports every allocation and free to the profiler state a thread's
``c10::ThreadLocalDebugInfo`` holds; torch's own profiler pushes its state there, and so does
framescope (cpp/python/integrations/torch_memory.cpp), which records each report as a memory
sample: ``[memory]`` events with torch's address, bytes and totals, the Memory view, and
``export_memory_timeline``. framescope is not built against torch: the extension mirrors the
types torch reads through that slot (``c10::MemoryReportingInfoBase``, and
``torch::profiler::impl::ProfilerStateBase`` with its config, which torch's
``_profiler_enabled()`` reads). This module checks the mirror against the installed torch's
headers, then a probe checks the chain (a tensor's allocation reaches the state with its size,
and torch still reports no profiler running). Any mismatch raises a RuntimeError saying what
differs; nothing is pushed then.
"""

from __future__ import annotations

import os
import re
from typing import Any

from framescope import _core

_state: dict[str, Any] = {}

# The declarations the extension mirrors, whitespace-normalised: (header, class opener, data
# members in order, virtual functions in order, declarations that must be present).
_CLASSES: list[tuple[str, str, list[str], list[str], list[str]]] = [
    ("c10/util/ThreadLocalDebugInfo.h", "class DebugInfoKind {", ["value_type value_"], [],
     ["using value_type = const std::string_view*",
      "static C10_API const DebugInfoKind PROFILER_STATE"]),
    ("c10/util/ThreadLocalDebugInfo.h", "class C10_API DebugInfoBase {", [],
     ["virtual ~DebugInfoBase() = default"], []),
    ("c10/util/ThreadLocalDebugInfo.h", "class C10_API ThreadLocalDebugInfo {",
     ["std::shared_ptr<DebugInfoBase> info_", "DebugInfoKind kind_",
      "std::shared_ptr<ThreadLocalDebugInfo> parent_info_"], [],
     ["static DebugInfoBase* get(DebugInfoKind kind)",
      "static void _push(DebugInfoKind kind, std::shared_ptr<DebugInfoBase> info)",
      "static std::shared_ptr<DebugInfoBase> _pop(DebugInfoKind kind)",
      "static std::shared_ptr<DebugInfoBase> _peek(DebugInfoKind kind)"]),
    ("c10/core/Device.h", "struct C10_API Device final {",
     ["DeviceType type_", "DeviceIndex index_"], [], []),
    ("c10/core/Allocator.h",
     "struct C10_API MemoryReportingInfoBase : public c10::DebugInfoBase {", [],
     ["virtual void reportMemoryUsage( void* ptr, int64_t alloc_size, size_t total_allocated, "
      "size_t total_reserved, Device device) = 0",
      "virtual void reportOutOfMemory( int64_t alloc_size, size_t total_allocated, "
      "size_t total_reserved, Device device)",
      "virtual bool memoryProfilingEnabled() const = 0"], []),
    ("torch/csrc/profiler/orchestration/observer.h", "struct TORCH_API ExperimentalConfig {",
     ["std::vector<std::string> profiler_metrics", "bool profiler_measure_per_kernel",
      "bool verbose", "std::vector<std::string> performance_events",
      "bool enable_cuda_sync_events", "bool adjust_profiler_step",
      "bool disable_external_correlation", "bool profile_all_threads",
      "bool capture_overload_names", "bool record_python_gc_info",
      "bool expose_kineto_event_metadata", "std::string custom_profiler_config",
      "bool adjust_timestamps", "bool trace_only"], [], []),
    ("torch/csrc/profiler/orchestration/observer.h", "struct TORCH_API ProfilerConfig {",
     ["ProfilerState state", "ExperimentalConfig experimental_config",
      "bool report_input_shapes", "bool profile_memory", "bool with_stack", "bool with_flops",
      "bool with_modules", "std::string trace_id"], [], []),
    ("torch/csrc/profiler/orchestration/observer.h",
     "struct TORCH_API ProfilerStateBase : public c10::MemoryReportingInfoBase {",
     ["std::mutex state_mutex_", "ProfilerConfig config_", "at::CallbackHandle handle_"],
     ["virtual ActiveProfilerType profilerType() = 0"], []),
]
# Free declarations: (header, text).
_DECLARATIONS = [
    ("c10/core/Allocator.h", "C10_API void reportMemoryUsageToProfiler( void* ptr, "
     "int64_t alloc_size, size_t total_allocated, size_t total_reserved, Device device)"),
    ("c10/core/Device.h", "using DeviceIndex = int8_t"),
    ("torch/csrc/profiler/orchestration/observer.h", "enum class C10_API_ENUM ProfilerState { "
     "Disabled = 0,"),
    ("torch/csrc/profiler/orchestration/observer.h", "enum class C10_API_ENUM ActiveProfilerType "
     "{ NONE = 0,"),
]
_DEVICE_TYPE_HEADERS = ("torch/headeronly/core/DeviceType.h", "c10/core/DeviceType.h")


def _normalise(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    text = re.sub(r"\s+", " ", text)
    return text.replace("( ", "(").replace(" )", ")").strip()


def _statements(body: str) -> list[str]:
    """The top-level statements of a class body (inline function bodies cut)."""
    out: list[str] = []
    depth = 0
    parens = 0  # (braces inside parentheses are default arguments, `= {}`)
    current = ""
    for ch in body:
        if not depth and ch in "()":
            parens += 1 if ch == "(" else -1
        if parens > 0 and not depth:
            current += ch
            continue
        if ch == "{":
            depth += 1
            if depth == 1:
                out.append(current)
                current = ""
            continue
        if ch == "}":
            depth -= 1
            continue
        if depth:
            continue
        if ch == ";":
            out.append(current)
            current = ""
        else:
            current += ch
    out.append(current)
    cleaned = []
    for s in out:
        s = re.sub(r"\b(public|private|protected):", " ", s)
        s = re.sub(r"\s+", " ", s).strip()
        if s:
            cleaned.append(s)
    return cleaned


def _class_body(text: str, opener: str) -> str | None:
    start = text.find(opener)
    if start < 0:
        return None
    i = start + len(opener)
    depth = 1
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def _data_members(statements: list[str]) -> list[str]:
    members = []
    for s in statements:
        if s.startswith(("using ", "friend ", "static ", "template", "typedef ", "enum ")):
            continue
        head = s.split(" = ", 1)[0]
        if "(" in head or "operator" in head:
            continue
        members.append(head)
    return members


def check_headers(read: Any) -> list[str]:
    """What in torch's headers differs from the types framescope's extension mirrors (an empty
    list when they match). ``read(relative path)`` returns a header's text, or None."""
    problems: list[str] = []
    texts: dict[str, str | None] = {}

    def text_of(header: str) -> str | None:
        if header not in texts:
            raw = read(header)
            texts[header] = None if raw is None else _normalise(raw)
        return texts[header]

    for header, opener, members, virtuals, present in _CLASSES:
        text = text_of(header)
        if text is None:
            problems.append(f"{header} is missing")
            continue
        body = _class_body(text, opener)
        if body is None:
            problems.append(f"`{opener}` not found in {header}")
            continue
        statements = _statements(body)
        name = opener.split("{")[0].split(":")[0].replace(" final", "").split()[-1]
        found = _data_members(statements)
        if found != members:
            problems.append(f"{name} has the members {found}, not {members}")
        found_virtuals = [s for s in statements if s.startswith("virtual ")]
        if found_virtuals != [_normalise(v) for v in virtuals]:
            problems.append(f"{name} declares the virtual functions {found_virtuals}")
        for decl in present:
            if _normalise(decl) not in statements:
                problems.append(f"{name} lacks `{decl}`")
    for header, decl in _DECLARATIONS:
        text = text_of(header)
        if text is not None and _normalise(decl) not in text:
            problems.append(f"{header} lacks `{decl}`")
    device_types = [text_of(h) for h in _DEVICE_TYPE_HEADERS]
    if not any(t and "enum class DeviceType : int8_t { CPU = 0," in t for t in device_types):
        problems.append("c10::DeviceType is not an int8_t enum with CPU = 0")
    return problems


def _check_torch(torch: Any) -> None:
    if not getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", False):
        raise RuntimeError(
            f"profile_memory with torch ops: torch {torch.__version__} is built with the old "
            "C++ ABI, whose strings differ from the profiler config framescope mirrors; "
            "profile without torch_ops to record the Python heap")
    include = os.path.join(os.path.dirname(torch.__file__), "include")

    def read(header: str) -> str | None:
        try:
            with open(os.path.join(include, header), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return None

    problems = check_headers(read)
    if problems:
        raise RuntimeError(
            f"profile_memory with torch ops does not support torch {torch.__version__}: its "
            f"profiler state types differ from what framescope mirrors ({'; '.join(problems)}; "
            f"checked {include}); profile without torch_ops to record the Python heap")


def _probe(torch: Any) -> None:
    """Allocates a tensor under a probe state and checks what torch reported and read."""
    autograd = torch._C._autograd

    def work() -> tuple[int, bool, Any]:
        t = torch.empty(1000, dtype=torch.float32)
        address = int(t.data_ptr())
        enabled = bool(autograd._profiler_enabled())
        kind = autograd._profiler_type()
        del t
        return address, enabled, kind

    reports, (address, enabled, kind) = _core._torch_memory_probe(work)
    problems = []
    mine = [r for r in reports if r[0] == address]
    if [(r[1], r[4], r[5]) for r in mine] != [(4000, 0, -1), (-4000, 0, -1)]:
        problems.append(f"a 4000-byte tensor at {address:#x} was reported as {mine}")
    elif mine[0][2] < 4000:
        problems.append(f"total allocated read as {mine[0][2]}")
    if not reports or reports[-1] != (0x1000, 1, 2, 3, 0, -1):
        problems.append(f"c10::reportMemoryUsageToProfiler reached the state as "
                        f"{reports[-1:] or 'nothing'}")
    if enabled:
        problems.append("torch read the state as a running profiler (_profiler_enabled())")
    if str(kind).rsplit(".", 1)[-1] != "NONE":
        problems.append(f"torch read the state's profiler type as {kind}")
    if problems:
        raise RuntimeError(
            f"profile_memory with torch ops: the allocator observer failed its self-check on "
            f"torch {torch.__version__} ({'; '.join(problems)})")


def _yield_to_torchs_profiler(torch: Any) -> None:
    """Wraps ``torch.autograd.profiler._enable_profiler`` (torch.profiler's start, and
    emit_itt/emit_nvtx) so that framescope's state steps aside first: torch refuses to start
    ("Profiler is already enabled on this thread") when any profiler state is in the slot."""
    module = torch.autograd.profiler
    original = getattr(module, "_enable_profiler", None)
    if original is None or getattr(original, "_framescope_yields", False):
        return

    def _enable_profiler(*args: Any, **kwargs: Any) -> Any:
        _core._torch_memory_yield()
        return original(*args, **kwargs)

    _enable_profiler._framescope_yields = True  # type: ignore[attr-defined]
    module._enable_profiler = _enable_profiler


def attach() -> None:
    """Checks torch (headers, then the probe) and finds its functions, once per process.
    RuntimeError when torch's profiler state cannot be mirrored safely."""
    if _state.get("attached"):
        return
    import torch

    _check_torch(torch)
    library = _core._torch_memory_attach()
    _probe(torch)
    _yield_to_torchs_profiler(torch)
    _state.update(attached=True, library=library)


def attached() -> bool:
    """True once attach() succeeded in this process."""
    return bool(_state.get("attached"))
