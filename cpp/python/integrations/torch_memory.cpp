// cpp/python/integrations/torch_memory.cpp: torch's tensor allocations (its CPU allocator's
// reports) as framescope memory samples, through the profiler state torch's allocator reports to.
//
// torch's CPU allocator calls c10::reportMemoryUsageToProfiler(ptr, bytes, total allocated,
// total reserved, device) for every allocation and free while the thread's
// c10::ThreadLocalDebugInfo holds, under DebugInfoKind::PROFILER_STATE, a
// c10::MemoryReportingInfoBase whose memoryProfilingEnabled() is true. That is how torch's own
// profiler sees tensor memory: it pushes its state there on the thread that starts it, and
// at::ThreadLocalState carries it into the threads torch hands work to (at::launch, autograd).
//
// framescope pushes a state of its own there the same way. framescope is not built against torch,
// so the types torch reads through that slot are mirrored below, member for member, and the
// Python side (framescope/_torch_memory.py) checks them against the installed torch's headers
// before anything is pushed. They are more than MemoryReportingInfoBase: other torch code reads
// the slot as a torch::profiler::impl::ProfilerStateBase (torch.autograd._profiler_enabled()
// reads its config_.state, _profiler_type() calls its profilerType()), so the state mirrors
// ProfilerStateBase with a config whose state is Disabled: to every reader but the allocator,
// no profiler runs. A probe (an allocation under the state, right after the checks) checks the
// whole chain: torch's allocator reaches this state with the tensor's size, and torch's own
// readers see no profiler.
#include <Python.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "framescope/session.h"
#include "integrations/loaded_library.h"

namespace framescope::py {

namespace {

// ---- the torch ABI, as declared in torch 2.x's headers ---------------------------------------
// c10/util/ThreadLocalDebugInfo.h, c10/core/Device.h, c10/core/Allocator.h and
// torch/csrc/profiler/orchestration/observer.h (checked by _torch_memory.py).

/// c10::DebugInfoKind: a pointer to a string_view naming the slot (trivially copyable: passed
/// in a register, as torch's).
struct DebugInfoKind {
  const std::string_view* value;
};

/// c10::Device: DeviceType (int8_t, 0 = CPU) and DeviceIndex (int8_t, -1 for the CPU).
struct Device {
  int8_t type;
  int8_t index;
};
static_assert(sizeof(Device) == 2, "layout of c10::Device");

/// c10::DebugInfoBase: a virtual destructor only.
struct DebugInfoBase {
  virtual ~DebugInfoBase() = default;
};

/// c10::MemoryReportingInfoBase: its virtual functions in declaration order (the vtable slots
/// after the destructors).
struct MemoryReportingInfoBase : DebugInfoBase {
  virtual void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t total_allocated,
                                 size_t total_reserved, Device device) = 0;
  virtual void reportOutOfMemory(int64_t alloc_size, size_t total_allocated, size_t total_reserved,
                                 Device device) = 0;
  virtual bool memoryProfilingEnabled() const = 0;
};

/// torch::profiler::impl::ExperimentalConfig's members (its functions are not virtual).
struct ExperimentalConfig {
  std::vector<std::string> profiler_metrics;
  bool profiler_measure_per_kernel = false;
  bool verbose = false;
  std::vector<std::string> performance_events;
  bool enable_cuda_sync_events = false;
  bool adjust_profiler_step = false;
  bool disable_external_correlation = false;
  bool profile_all_threads = false;
  bool capture_overload_names = false;
  bool record_python_gc_info = false;
  bool expose_kineto_event_metadata = false;
  std::string custom_profiler_config;
  bool adjust_timestamps = false;
  bool trace_only = false;
};

constexpr int kProfilerStateDisabled = 0;  // torch::profiler::impl::ProfilerState::Disabled
constexpr int kActiveProfilerNone = 0;     // torch::profiler::impl::ActiveProfilerType::NONE

/// torch::profiler::impl::ProfilerConfig's members. torch may copy it (getProfilerConfig()), so
/// every member is a real object of the same type as torch's (the same libstdc++, C++11 ABI).
struct ProfilerConfig {
  int state = kProfilerStateDisabled;  // enum class ProfilerState (int)
  ExperimentalConfig experimental_config;
  bool report_input_shapes = false;
  bool profile_memory = false;
  bool with_stack = false;
  bool with_flops = false;
  bool with_modules = false;
  std::string trace_id;
};

/// torch::profiler::impl::ProfilerStateBase: one more virtual function, then its members.
struct ProfilerStateBase : MemoryReportingInfoBase {
  virtual int profilerType() = 0;  // enum class ActiveProfilerType (int)
  std::mutex state_mutex_;
  ProfilerConfig config_;
  uint64_t handle_ = 0;  // at::CallbackHandle
};

using PushFn = void (*)(DebugInfoKind, std::shared_ptr<DebugInfoBase>);
using PopFn = std::shared_ptr<DebugInfoBase> (*)(DebugInfoKind);
using GetFn = DebugInfoBase* (*)(DebugInfoKind);
using ReportFn = void (*)(void*, int64_t, size_t, size_t, Device);

constexpr const char* kPush =
    "_ZN3c1020ThreadLocalDebugInfo5_pushENS_13DebugInfoKindESt10shared_ptrINS_13DebugInfoBaseEE";
constexpr const char* kPop = "_ZN3c1020ThreadLocalDebugInfo4_popENS_13DebugInfoKindE";
constexpr const char* kPeek = "_ZN3c1020ThreadLocalDebugInfo5_peekENS_13DebugInfoKindE";
constexpr const char* kGet = "_ZN3c1020ThreadLocalDebugInfo3getENS_13DebugInfoKindE";
constexpr const char* kProfilerStateKind = "_ZN3c1013DebugInfoKind14PROFILER_STATEE";
constexpr const char* kReport = "_ZN3c1027reportMemoryUsageToProfilerEPvlmmNS_6DeviceE";

struct Api {
  PushFn push = nullptr;
  PopFn pop = nullptr;
  PopFn peek = nullptr;
  GetFn get = nullptr;
  ReportFn report = nullptr;  // c10::reportMemoryUsageToProfiler (the probe calls it)
  const DebugInfoKind* profiler_state = nullptr;
  std::string library;
};
Api g_api;
bool g_attached = false;

// ---- the state ---------------------------------------------------------------------------------

/// A report as the probe keeps it.
struct ProbeReport {
  uint64_t address;
  int64_t bytes;
  uint64_t total_allocated;
  uint64_t total_reserved;
  int type;
  int index;
};

/// framescope's profiler state. Called by torch's allocator on any thread the state reached,
/// without the GIL: records into the framescope session (record_memory() is thread-safe and
/// does nothing on a thread that does not record), or, for the probe, into `probe`.
class MemoryState final : public ProfilerStateBase {
 public:
  explicit MemoryState(std::vector<ProbeReport>* probe) : probe_(probe) {
    config_.profile_memory = true;  // (torch's readers see state Disabled, see the file comment)
  }
  void reportMemoryUsage(void* ptr, int64_t alloc_size, size_t total_allocated,
                         size_t total_reserved, Device device) override {
    if (!enabled_.load(std::memory_order_relaxed)) return;
    if (probe_ != nullptr) {
      probe_->push_back(ProbeReport{reinterpret_cast<uint64_t>(ptr), alloc_size,
                                    uint64_t(total_allocated), uint64_t(total_reserved),
                                    device.type, device.index});
      return;
    }
    // The CPU's allocations only: framescope records no device, and a device allocator's
    // samples (CUDA's caching allocator reports here too) would be mistaken for the CPU's.
    if (device.type != 0) return;
    record_memory(ptr, alloc_size, int64_t(total_allocated), int64_t(total_reserved), -1);
  }
  void reportOutOfMemory(int64_t, size_t, size_t, Device) override {}
  bool memoryProfilingEnabled() const override { return enabled_.load(std::memory_order_relaxed); }
  int profilerType() override { return kActiveProfilerNone; }

  void disable() { enabled_.store(false, std::memory_order_relaxed); }

 private:
  std::atomic<bool> enabled_{true};
  std::vector<ProbeReport>* probe_;
};

/// The running session's state and the thread it was pushed on (under the GIL).
std::shared_ptr<MemoryState> g_state;
std::thread::id g_state_thread;

void push_state(const std::shared_ptr<MemoryState>& state) {
  g_api.push(*g_api.profiler_state, std::static_pointer_cast<DebugInfoBase>(state));
}

/// Pops `state` when it is the newest debug info of this thread; a state pushed later (torch's
/// own profiler, started inside the session and still running) keeps it: disabled, it stays
/// below that one until the thread ends. True when popped.
bool pop_state(const std::shared_ptr<MemoryState>& state) {
  try {
    std::shared_ptr<DebugInfoBase> top = g_api.peek(*g_api.profiler_state);  // throws: other kind
    if (top.get() != static_cast<DebugInfoBase*>(state.get())) return false;
    g_api.pop(*g_api.profiler_state);
    return true;
  } catch (...) {
    return false;
  }
}

// ---- Python functions ------------------------------------------------------------------------

/// _torch_memory_attach() -> library path. Finds the loaded libc10's functions. RuntimeError
/// when torch is not loaded or lacks one of them, or this build's std::string is not the C++11
/// ABI's (the mirrored config holds strings).
PyObject* torch_memory_attach(PyObject*, PyObject*) {
#if !defined(_GLIBCXX_USE_CXX11_ABI) || !_GLIBCXX_USE_CXX11_ABI
  PyErr_SetString(PyExc_RuntimeError,
                  "framescope: this build does not use libstdc++'s C++11 ABI, which torch's "
                  "profiler state is mirrored in");
  return nullptr;
#else
  if (!g_attached) {
    LoadedLibrary s = find_loaded_library(kPush);
    if (s.handle == nullptr) {
      PyErr_SetString(PyExc_RuntimeError,
                      "framescope: no loaded library exports c10::ThreadLocalDebugInfo::_push "
                      "(import torch first)");
      return nullptr;
    }
    Api api;
    std::string missing;
    resolve_symbol(s.handle, kPush, api.push, missing);
    resolve_symbol(s.handle, kPop, api.pop, missing);
    resolve_symbol(s.handle, kPeek, api.peek, missing);
    resolve_symbol(s.handle, kGet, api.get, missing);
    resolve_symbol(s.handle, kReport, api.report, missing);
    resolve_symbol(s.handle, kProfilerStateKind, api.profiler_state, missing);
    if (!missing.empty()) {
      PyErr_Format(PyExc_RuntimeError, "framescope: %s does not export %s", s.path.c_str(),
                   missing.c_str());
      return nullptr;
    }
    api.library = s.path;
    g_api = std::move(api);
    g_attached = true;
  }
  return PyUnicode_DecodeFSDefault(g_api.library.c_str());
#endif
}

PyObject* probe_result(const std::vector<ProbeReport>& seen, PyObject* result) {
  PyObject* reports = PyList_New(0);  // new
  for (size_t i = 0; reports != nullptr && i < seen.size(); ++i) {
    const ProbeReport& r = seen[i];
    PyObject* row = Py_BuildValue("(KLKKii)", (unsigned long long)r.address, (long long)r.bytes,
                                  (unsigned long long)r.total_allocated,
                                  (unsigned long long)r.total_reserved, r.type, r.index);
    if (row == nullptr || PyList_Append(reports, row) != 0) Py_CLEAR(reports);
    Py_XDECREF(row);
  }
  PyObject* out = reports ? Py_BuildValue("(NO)", reports, result) : nullptr;
  return out;
}

/// _torch_memory_probe(fn) -> (reports, fn's result): calls fn() with a probe state pushed on
/// this thread; reports are (address, bytes, total allocated, total reserved, device type,
/// device index) as torch reported them, plus one direct call of
/// c10::reportMemoryUsageToProfiler(0x1000, 1, 2, 3, CPU:-1) made after fn returned.
PyObject* torch_memory_probe(PyObject*, PyObject* fn) {
  if (!g_attached) {
    PyErr_SetString(PyExc_RuntimeError, "framescope: torch memory observer is not attached");
    return nullptr;
  }
  // (the probe's state goes above whatever the thread holds, a running session's included,
  // and is popped before this returns)
  std::vector<ProbeReport> seen;
  auto state = std::make_shared<MemoryState>(&seen);
  push_state(state);
  PyObject* result = PyObject_CallNoArgs(fn);  // new
  if (result != nullptr) g_api.report(reinterpret_cast<void*>(0x1000), 1, 2, 3, Device{0, -1});
  state->disable();
  if (!pop_state(state)) {
    Py_XDECREF(result);
    PyErr_SetString(PyExc_RuntimeError,
                    "framescope: torch memory probe: the pushed state was not the newest "
                    "debug info after the probe");
    return nullptr;
  }
  if (result == nullptr) return nullptr;
  PyObject* out = probe_result(seen, result);
  Py_DECREF(result);
  return out;
}

/// _torch_memory_enable(): pushes a recording state on the calling thread (the one starting the
/// session; torch carries it into the threads it hands work to). No-op when one is pushed.
PyObject* torch_memory_enable(PyObject*, PyObject*) {
  if (!g_attached) {
    PyErr_SetString(PyExc_RuntimeError, "framescope: torch memory observer is not attached");
    return nullptr;
  }
  if (g_state) Py_RETURN_NONE;
  if (g_api.get(*g_api.profiler_state) != nullptr) {
    // torch's profiler runs on this thread: a state pushed above its own would take its
    // reports, and its stop would pop this one instead of its own.
    internal::add_session_warning(
        "framescope: torch's profiler is running on this thread, so torch records the tensor "
        "memory: this session has none (profile_memory)");
    Py_RETURN_NONE;
  }
  auto state = std::make_shared<MemoryState>(nullptr);
  try {
    push_state(state);
  } catch (...) {
    PyErr_SetString(PyExc_RuntimeError, "framescope: torch refused the memory profiler state");
    return nullptr;
  }
  g_state = std::move(state);
  g_state_thread = std::this_thread::get_id();
  Py_RETURN_NONE;
}

/// _torch_memory_disable() -> bool: stops recording and pops the state when this is the thread
/// that pushed it and nothing was pushed after it (else it stays, disabled: see pop_state).
/// True when popped. Idempotent.
PyObject* torch_memory_disable(PyObject*, PyObject*) {
  if (!g_state) Py_RETURN_FALSE;
  g_state->disable();
  const bool popped = g_state_thread == std::this_thread::get_id() && pop_state(g_state);
  g_state.reset();
  return PyBool_FromLong(popped);
}

/// _torch_memory_yield(): torch's profiler is about to start on this thread (framescope wraps
/// torch.autograd.profiler._enable_profiler): the session's state, when it is this thread's
/// newest, is disabled and popped, since torch refuses to start above another profiler state.
/// torch's profiler then records the tensor memory; the session records none from here on.
PyObject* torch_memory_yield(PyObject*, PyObject*) {
  if (g_state && g_state_thread == std::this_thread::get_id() && pop_state(g_state)) {
    g_state->disable();
    g_state.reset();
    internal::add_session_warning(
        "framescope: torch's profiler started during the session: the tensor memory after "
        "that is torch's to record (framescope stopped recording it)");
  }
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"_torch_memory_attach", torch_memory_attach, METH_NOARGS, nullptr},
    {"_torch_memory_probe", torch_memory_probe, METH_O, nullptr},
    {"_torch_memory_enable", torch_memory_enable, METH_NOARGS, nullptr},
    {"_torch_memory_disable", torch_memory_disable, METH_NOARGS, nullptr},
    {"_torch_memory_yield", torch_memory_yield, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool torch_memory_init(PyObject* module) { return PyModule_AddFunctions(module, kMethods) == 0; }

}  // namespace framescope::py
