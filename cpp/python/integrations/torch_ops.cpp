// cpp/python/integrations/torch_ops.cpp: torch operators as framescope ranges, observed through
// torch's own RecordFunction callbacks (at::addGlobalCallback), found in the loaded libtorch at run
// time.
//
// framescope is not built against torch. The five torch functions used here are looked up by
// their mangled names in the already loaded libtorch_cpu, and the one torch type passed by value,
// at::RecordFunctionCallback, is mirrored below. The Python side (framescope/torch_ops.py)
// checks that mirror against the installed torch's ATen/record_function.h before attaching, and
// a probe (an op run under the callbacks right after attaching) checks the whole chain: the
// callback fires, name() reads the op's name, and torch's inputSizes/inputTypes read its inputs.
#include <Python.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "framescope/record_function.h"
#include "integrations/loaded_library.h"
#include "tracer/tracer_api.h"

namespace framescope::py {

namespace {

// ---- the torch ABI, as declared in ATen/record_function.h (torch 2.x) ----------------------

/// at::RecordScope values, and its NUM_SCOPES (the size of the callback's scope mask).
enum TorchScope : uint8_t {
  kTorchFunction = 0,
  kTorchBackwardFunction = 1,
  kTorchUserScope = 7,
};
constexpr size_t kTorchNumScopes = 10;

/// at::ObserverContext: a polymorphic base with a virtual destructor only, so its vtable is
/// [offset, typeinfo, complete dtor, deleting dtor] like this one's. torch owns the context a
/// start callback returns and deletes it through that vtable after the end callbacks ran.
struct TorchObserverContext {
  virtual ~TorchObserverContext() = default;
};

/// Start/end callbacks as torch calls them. The RecordFunction is opaque here: only passed back
/// to torch's exported functions. `std::unique_ptr<Derived>` and
/// `std::unique_ptr<at::ObserverContext>` are returned alike (a pointer with a non-trivial
/// destructor: through a hidden result pointer).
using TorchStart = std::unique_ptr<TorchObserverContext> (*)(const void* record_function);
using TorchEnd = void (*)(const void* record_function, TorchObserverContext* ctx);

/// at::RecordFunctionCallback, member for member. Trivially copyable and 40 bytes: passed by
/// value in memory, as torch's is.
struct TorchCallback {
  TorchStart start;
  TorchEnd end;
  double sampling_prob;
  std::array<bool, kTorchNumScopes> scopes;
  bool needs_inputs;
  bool needs_outputs;
  bool needs_ids;
};
static_assert(sizeof(TorchCallback) == 40, "layout of at::RecordFunctionCallback (torch 2.x)");

struct TorchApi {
  uint64_t (*add_global_callback)(TorchCallback) = nullptr;  // at::addGlobalCallback
  void (*remove_callback)(uint64_t) = nullptr;               // at::removeCallback
  const char* (*name)(const void*) = nullptr;                // at::RecordFunction::name
  // torch::profiler::impl::inputSizes / inputTypes: what torch's own profiler reports as
  // "Input Dims" / "Input type" (empty sizes and type for inputs that are not tensors).
  std::vector<std::vector<int64_t>> (*input_sizes)(const void*, bool) = nullptr;
  std::vector<std::string> (*input_types)(const void*) = nullptr;  // cxx11 ABI only
  std::string library;
};

constexpr const char* kAddGlobalCallback = "_ZN2at17addGlobalCallbackENS_22RecordFunctionCallbackE";
constexpr const char* kRemoveCallback = "_ZN2at14removeCallbackEm";
constexpr const char* kName = "_ZNK2at14RecordFunction4nameEv";
constexpr const char* kInputSizes = "_ZN5torch8profiler4impl10inputSizesERKN2at14RecordFunctionEb";
constexpr const char* kInputTypes =
    "_ZN5torch8profiler4impl10inputTypesB5cxx11ERKN2at14RecordFunctionE";

TorchApi g_api;
bool g_attached = false;

// ---- recording -------------------------------------------------------------------------------

/// The framescope range of one observed torch op; torch keeps it as the op's observer context.
struct OpRange final : TorchObserverContext {
  explicit OpRange(RecordScope scope) : range(scope) {}
  framescope::RecordFunction range;
};

/// Names of torch ops (schema names: a bounded set) interned for the life of the process, so an
/// op is recorded with a static name (an 8-byte pointer) rather than a copied string. Beyond
/// kMaxInterned names (a program that generates names), names are copied per range.
constexpr size_t kMaxInterned = 1 << 16;
std::mutex g_intern_mutex;
std::unordered_set<std::string>* g_interned = new std::unordered_set<std::string>();  // leaked:
// ranges of exiting threads may still read the names.

const char* intern_slow(const char* name) {
  std::lock_guard<std::mutex> lock(g_intern_mutex);
  auto it = g_interned->find(name);
  if (it != g_interned->end()) return it->c_str();
  if (g_interned->size() >= kMaxInterned) return nullptr;
  return g_interned->insert(name).first->c_str();
}

/// Per-thread cache from torch's name pointer to the interned copy. A pointer may be reused for
/// another name once torch frees a dynamic name, so a hit is confirmed by comparing the text.
const char* intern(const char* name) {
  thread_local std::unordered_map<const char*, const char*> cache;
  auto it = cache.find(name);
  if (it != cache.end() && std::strcmp(it->second, name) == 0) return it->second;
  const char* interned = intern_slow(name);
  if (interned && cache.size() < 4096) cache[name] = interned;
  return interned;
}

/// inputTypes names a scalar by its IValue tag ("Int", "Double", ...); torch.profiler (and so
/// framescope) says "Scalar".
bool is_scalar_tag(const std::string& t) {
  return t == "Int" || t == "Double" || t == "Bool" || t == "ComplexDouble" || t == "SymInt" ||
         t == "SymFloat" || t == "SymBool";
}

/// torch's inputs of `fn` as framescope range inputs: a tensor as its shape and dtype name, a
/// scalar as an empty shape and "Scalar", a list as an empty shape and "GenericList" (inputTypes
/// does not tell tensor lists from scalar lists), anything else as none. Without the cxx11-ABI
/// inputTypes, tensors keep their shapes only.
std::vector<RangeInput> inputs_of(const void* fn) {
  std::vector<RangeInput> out;
  std::vector<std::vector<int64_t>> sizes = g_api.input_sizes(fn, false);
  std::vector<std::string> types;
  if (g_api.input_types) types = g_api.input_types(fn);
  out.reserve(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string type = i < types.size() ? std::move(types[i]) : std::string();
    if (is_scalar_tag(type)) type = "Scalar";
    if (type.empty() && sizes[i].empty()) {
      out.emplace_back();
    } else {
      out.push_back(RangeInput::of_shape(std::move(sizes[i]), std::move(type)));
    }
  }
  return out;
}

// A probe records what the callbacks saw on this thread, instead of ranges (attach check).
struct ProbeRecord {
  std::string name;
  int scope;
  std::vector<std::vector<int64_t>> sizes;
  std::vector<std::string> types;
};
thread_local std::vector<ProbeRecord>* t_probe = nullptr;

std::unique_ptr<TorchObserverContext> start_op_unchecked(const void* fn, RecordScope scope,
                                                         int torch_scope);

std::unique_ptr<TorchObserverContext> start_op(const void* fn, RecordScope scope, int torch_scope) {
  // Nothing may escape into torch (it would only log and drop it): a failure to allocate loses
  // this op's range.
  try {
    return start_op_unchecked(fn, scope, torch_scope);
  } catch (...) {
    return nullptr;
  }
}

std::unique_ptr<TorchObserverContext> start_op_unchecked(const void* fn, RecordScope scope,
                                                         int torch_scope) {
  const char* name = g_api.name(fn);
  if (FRAMESCOPE_UNLIKELY(t_probe != nullptr)) {
    ProbeRecord r{name ? name : "", torch_scope, g_api.input_sizes(fn, false), {}};
    if (g_api.input_types) r.types = g_api.input_types(fn);
    t_probe->push_back(std::move(r));
    return nullptr;
  }
  if (name == nullptr) return nullptr;
  auto op = std::make_unique<OpRange>(scope);
  if (!op->range.is_active()) return nullptr;  // this thread does not record
  if (op->range.needs_inputs()) {
    op->range.before(std::string_view(name), inputs_of(fn));
  } else if (const char* interned = scope == RecordScope::kFunction ? intern(name) : nullptr) {
    op->range.before(interned);
  } else {
    op->range.before(std::string_view(name));
  }
  return op;
}

// The end callback may run on another thread than the start (async ops); the framescope range
// handles that. torch deletes the context afterwards.
void end_op(const void*, TorchObserverContext* ctx) {
  if (ctx != nullptr) static_cast<OpRange*>(ctx)->range.end();
}

std::unique_ptr<TorchObserverContext> start_cpu_op(const void* fn) {
  return start_op(fn, RecordScope::kFunction, kTorchFunction);
}
std::unique_ptr<TorchObserverContext> start_user_scope(const void* fn) {
  return start_op(fn, RecordScope::kUserScope, kTorchUserScope);
}

std::vector<uint64_t> g_handles;  // registered callbacks (under the GIL)

TorchCallback make_callback(TorchStart start, bool user_scope, bool needs_inputs) {
  TorchCallback cb{};
  cb.start = start;
  cb.end = end_op;
  cb.sampling_prob = 1.0;
  for (size_t s = 0; s < kTorchNumScopes; ++s) {
    cb.scopes[s] = (s == kTorchUserScope) == user_scope;
  }
  cb.needs_inputs = needs_inputs;
  return cb;
}

void add_callbacks(bool needs_inputs) {
  // torch keeps a registered callback in its global list and each thread's cached copy; ranges
  // that started with it still get its end call after removal, so both functions stay valid for
  // the life of the process (this extension is never unloaded).
  g_handles.push_back(g_api.add_global_callback(make_callback(start_cpu_op, false, needs_inputs)));
  g_handles.push_back(
      g_api.add_global_callback(make_callback(start_user_scope, true, needs_inputs)));
}

void remove_callbacks() {
  for (uint64_t h : g_handles) {
    try {
      g_api.remove_callback(h);  // throws c10::Error if someone cleared torch's callbacks
    } catch (...) {
    }
  }
  g_handles.clear();
}

// ---- Python functions ------------------------------------------------------------------------

/// _torch_ops_attach() -> (library path, has input types). Finds the loaded libtorch and its
/// functions. RuntimeError when torch is not loaded or lacks one of them.
PyObject* torch_ops_attach(PyObject*, PyObject*) {
  if (!g_attached) {
    LoadedLibrary s = find_loaded_library(kAddGlobalCallback);
    if (s.handle == nullptr) {
      PyErr_SetString(PyExc_RuntimeError,
                      "framescope: no loaded library exports at::addGlobalCallback "
                      "(import torch first)");
      return nullptr;
    }
    TorchApi api;
    std::string missing;
    resolve_symbol(s.handle, kAddGlobalCallback, api.add_global_callback, missing);
    resolve_symbol(s.handle, kRemoveCallback, api.remove_callback, missing);
    resolve_symbol(s.handle, kName, api.name, missing);
    resolve_symbol(s.handle, kInputSizes, api.input_sizes, missing);
    if (!missing.empty()) {
      PyErr_Format(PyExc_RuntimeError, "framescope: %s does not export %s", s.path.c_str(),
                   missing.c_str());
      return nullptr;
    }
    std::string no_types;
    resolve_symbol(s.handle, kInputTypes, api.input_types,
                   no_types);  // absent with the old C++ ABI
    api.library = s.path;
    g_api = std::move(api);
    g_attached = true;
  }
  return Py_BuildValue("(sO)", g_api.library.c_str(), g_api.input_types ? Py_True : Py_False);
}

/// _torch_ops_probe(fn) -> [(name, torch scope, sizes, types)]: calls fn() with the callbacks
/// registered (needing inputs) and returns what they saw on this thread, recording nothing.
PyObject* torch_ops_probe(PyObject*, PyObject* fn) {
  if (!g_attached || !g_handles.empty()) {
    PyErr_SetString(PyExc_RuntimeError,
                    "framescope: torch ops probe needs an attached, idle observer");
    return nullptr;
  }
  std::vector<ProbeRecord> seen;
  t_probe = &seen;
  add_callbacks(true);
  PyObject* result = PyObject_CallNoArgs(fn);  // new
  remove_callbacks();
  t_probe = nullptr;
  if (result == nullptr) return nullptr;
  Py_DECREF(result);
  PyObject* list = PyList_New(0);  // new
  if (list == nullptr) return nullptr;
  for (const ProbeRecord& r : seen) {
    PyObject* sizes = PyList_New(0);
    PyObject* types = PyList_New(0);
    bool ok = sizes && types;
    for (size_t i = 0; ok && i < r.sizes.size(); ++i) {
      PyObject* dims = PyList_New(0);
      ok = dims != nullptr;
      for (size_t j = 0; ok && j < r.sizes[i].size(); ++j) {
        PyObject* d = PyLong_FromLongLong(r.sizes[i][j]);
        ok = d && PyList_Append(dims, d) == 0;
        Py_XDECREF(d);
      }
      ok = ok && PyList_Append(sizes, dims) == 0;
      Py_XDECREF(dims);
    }
    for (size_t i = 0; ok && i < r.types.size(); ++i) {
      PyObject* t =
          PyUnicode_DecodeUTF8(r.types[i].data(), Py_ssize_t(r.types[i].size()), "replace");
      ok = t && PyList_Append(types, t) == 0;
      Py_XDECREF(t);
    }
    PyObject* row = ok ? Py_BuildValue("(siOO)", r.name.c_str(), r.scope, sizes, types) : nullptr;
    Py_XDECREF(sizes);
    Py_XDECREF(types);
    if (row == nullptr || PyList_Append(list, row) != 0) {
      Py_XDECREF(row);
      Py_DECREF(list);
      return nullptr;
    }
    Py_DECREF(row);
  }
  return list;
}

/// _torch_ops_enable(record_inputs): registers the observers (ops then record into the active
/// session on the thread that runs them). No-op when already enabled.
PyObject* torch_ops_enable(PyObject*, PyObject* arg) {
  if (!g_attached) {
    PyErr_SetString(PyExc_RuntimeError, "framescope: torch ops observer is not attached");
    return nullptr;
  }
  int needs_inputs = PyObject_IsTrue(arg);
  if (needs_inputs < 0) return nullptr;
  if (g_handles.empty()) add_callbacks(needs_inputs != 0);
  Py_RETURN_NONE;
}

/// _torch_ops_disable(): removes the observers (idempotent).
PyObject* torch_ops_disable(PyObject*, PyObject*) {
  if (g_attached) remove_callbacks();
  Py_RETURN_NONE;
}

PyMethodDef kMethods[] = {
    {"_torch_ops_attach", torch_ops_attach, METH_NOARGS, nullptr},
    {"_torch_ops_probe", torch_ops_probe, METH_O, nullptr},
    {"_torch_ops_enable", torch_ops_enable, METH_O, nullptr},
    {"_torch_ops_disable", torch_ops_disable, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool torch_ops_init(PyObject* module) { return PyModule_AddFunctions(module, kMethods) == 0; }

}  // namespace framescope::py
