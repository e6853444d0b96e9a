// cpp/python/bindings_session.cpp: nanobind bindings of sessions (start, stop, marks, memory samples).
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "framescope/session.h"
#include "framescope/stored_trace.h"
#include "session_impl.h"
#include "trace_handle.h"
#include "stack_segments.h"
#include "tracer_api.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace framescope::py {

namespace {

TracerBackend parse_backend(const std::string& name) {
  if (name == "frame_hook") return TracerBackend::kFrameHook;
  if (name == "sys.monitoring" || name == "monitoring") return TracerBackend::kMonitoring;
  if (name == "setprofile") return TracerBackend::kSetProfile;
  if (name == "none") return TracerBackend::kNone;
  throw nb::value_error(("framescope: unknown tracer backend '" + name +
                         "' (expected frame_hook, sys.monitoring, setprofile or none)")
                            .c_str());
}

void start_session(bool record_shapes, bool profile_memory, bool with_flops,
                   const std::string& backend, bool c_calls,
                   const std::vector<std::string>& prune_prefixes, nb::handle current_frames,
                   size_t memory_limit, bool keep_newest, bool propagated_only) {
  SessionConfig config;
  config.record_shapes = record_shapes;
  config.profile_memory = profile_memory;
  config.with_flops = with_flops;
  config.memory_limit_bytes = memory_limit;
  config.on_limit = keep_newest ? LimitPolicy::kKeepNewest : LimitPolicy::kStopRecording;
  config.threads = propagated_only ? ThreadScope::kPropagated : ThreadScope::kAllThreads;
  TracerOptions options;
  options.backend = parse_backend(backend);
  options.c_calls = c_calls;
  options.prune_prefixes = prune_prefixes;
  if (c_calls && options.backend == TracerBackend::kNone) {
    throw nb::value_error("framescope: c_calls needs the Python tracer (with_stack=True)");
  }
  prepare_hook_thread();
  try {
    enable_profiler(config);
  } catch (const SessionError& e) {
    throw std::runtime_error(e.what());
  }
  if (!tracer_start(options, current_frames.ptr())) {
    disable_profiler();
    throw nb::python_error();
  }
}

// Thread names as UTF-8; a name Python cannot encode (a lone surrogate) keeps its surrogate
// encoded (invalid UTF-8), which every reader shows as U+FFFD: stop() must never fail on a name.
std::vector<std::pair<uint64_t, std::string>> thread_names_of(nb::handle names) {
  std::vector<std::pair<uint64_t, std::string>> out;
  if (!names.is_valid() || names.is_none()) return out;
  for (nb::handle item : names) {
    try {
      nb::tuple t = nb::borrow<nb::tuple>(item);
      if (t.size() != 2) continue;
      const uint64_t ident = nb::cast<uint64_t>(t[0]);
      PyObject* bytes = PyUnicode_AsEncodedString(t[1].ptr(), "utf-8", "surrogatepass");  // new
      if (!bytes) {
        PyErr_Clear();
        continue;
      }
      out.emplace_back(ident, std::string(PyBytes_AS_STRING(bytes), size_t(PyBytes_GET_SIZE(bytes))));
      Py_DECREF(bytes);
    } catch (const std::exception&) {
      PyErr_Clear();
    }
  }
  return out;
}

PyTrace stop_session(nb::handle thread_names) {
  if (!profiler_enabled()) throw std::runtime_error("framescope: no profiling session is enabled");
  const auto names = thread_names_of(thread_names);
  std::string backend = tracer_backend_description();
  tracer_stop();
  RawTracePtr raw;
  try {
    raw = disable_profiler();
  } catch (const SessionError& e) {
    tracer_release();
    throw std::runtime_error(e.what());
  }
  PyTrace out;
  try {
    out.state->stored = std::make_shared<const StoredTrace>(
        StoredTrace::from_raw(std::move(*raw), tracer_resolver(), names));
  } catch (...) {
    tracer_release();
    release_record_function_names();
    throw;
  }
  raw.reset();
  tracer_release();
  release_record_function_names();
  out.state->backend = backend;
  return out;
}

}  // namespace

void bind_session(nb::module_& m) {
  m.def("_start", &start_session, "record_shapes"_a, "profile_memory"_a, "with_flops"_a,
        "backend"_a, "c_calls"_a, "prune_prefixes"_a, "current_frames"_a.none(), "memory_limit"_a,
        "keep_newest"_a, "propagated_only"_a = false);
  m.def("_stop", &stop_session, "thread_names"_a.none());
  m.def("is_enabled", &profiler_enabled, "True while a framescope session records.");
  m.def("_backend", &tracer_backend_description);
  m.def("_foreign_frame_hook", &foreign_frame_hook,
        "The PEP 523 function another tool installed (described), or '' when none is.");
  m.def(
      "mark",
      [](nb::handle name) {
        if (!PyUnicode_Check(name.ptr())) throw nb::type_error("mark(name): name must be a str");
        // surrogatepass: a name with a lone surrogate is kept (readers show U+FFFD), not refused
        PyObject* b = PyUnicode_AsEncodedString(name.ptr(), "utf-8", "surrogatepass");  // new
        if (!b) throw nb::python_error();
        const std::string text(PyBytes_AS_STRING(b), size_t(PyBytes_GET_SIZE(b)));
        Py_DECREF(b);
        framescope::mark(text);
      },
      "name"_a,
      "Record an instant event (a mark) on the calling thread; no-op without a session.");
  m.def(
      "record_memory",
      [](uint64_t address, int64_t bytes, int64_t total_allocated, int64_t total_reserved,
         int32_t device) {
        framescope::record_memory(reinterpret_cast<const void*>(address), bytes, total_allocated,
                                  total_reserved, device);
      },
      "address"_a, "bytes"_a, "total_allocated"_a, "total_reserved"_a = 0, "device"_a = -1);
  m.def(
      "_set_stack_segment_budget",
      [](size_t bytes) { return internal::set_stack_segment_budget(bytes); }, "bytes"_a,
      "Sets how much C stack (bytes, per thread) the frame hook may add in segments for deep "
      "recursion (0: none); returns the previous budget.");
  m.def("_stack_segments_supported", &internal::stack_segments_supported,
        "True when the frame hook can continue deep recursion on stack segments here.");
  m.def(
      "label_calls",
      [](nb::handle code, const std::string& label) {
        if (!tracer_label_calls(code.ptr(), label)) throw nb::python_error();
      },
      "code"_a, "label"_a);

}

}  // namespace framescope::py
