// cpp/python/bindings_session.cpp: nanobind bindings of sessions and of the replayed Trace.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <memory>

#include "framescope/chrome_trace.h"
#include "framescope/session.h"
#include "stack_segments.h"
#include "tracer_api.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace framescope::py {

namespace {

// The Python view of a replayed trace: shared so that event views keep it alive.
struct PyTrace {
  std::shared_ptr<Trace> trace;
  std::string backend;
};

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
                   const std::vector<std::string>& prune_prefixes, nb::handle native_ids,
                   size_t memory_limit, bool keep_newest, bool propagated_only,
                   const std::string& skip_frames_prefix) {
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
  if (!tracer_start(options, native_ids.ptr(), skip_frames_prefix)) {
    disable_profiler();
    throw nb::python_error();
  }
}

PyTrace stop_session(const std::vector<std::pair<uint64_t, std::string>>& thread_names) {
  if (!profiler_enabled()) throw std::runtime_error("framescope: no profiling session is enabled");
  std::string backend = tracer_backend_description();
  tracer_stop();
  RawTracePtr raw;
  try {
    raw = disable_profiler();
  } catch (const SessionError& e) {
    tracer_release();
    throw std::runtime_error(e.what());
  }
  auto trace = std::make_shared<Trace>(replay(*raw, tracer_resolver()));
  raw.reset();
  tracer_release();
  release_record_function_names();
  for (ThreadInfo& t : trace->threads) {
    for (const auto& [ident, name] : thread_names) {
      if (ident == t.os_tid) t.name = name;
    }
  }
  return PyTrace{std::move(trace), backend};
}

nb::tuple event_tuple(const Trace& t, size_t i) {
  if (i >= t.events.size()) throw nb::index_error("event index out of range");
  const TraceEvent& e = t.events[i];
  return nb::make_tuple(t.symbols[e.symbol].name, category_name(e.category), e.thread, e.start_ns,
                        e.dur_ns, e.parent, e.depth, e.symbol, int(e.category));
}

}  // namespace

void bind_session(nb::module_& m) {
  m.def("_start", &start_session, "record_shapes"_a, "profile_memory"_a, "with_flops"_a,
        "backend"_a, "c_calls"_a, "prune_prefixes"_a, "native_ids"_a.none(), "memory_limit"_a,
        "keep_newest"_a, "propagated_only"_a = false, "skip_frames_prefix"_a = "");
  m.def("_stop", &stop_session, "thread_names"_a);
  m.def("is_enabled", &profiler_enabled, "True while a framescope session records.");
  m.def("_backend", &tracer_backend_description);
  m.def("_foreign_frame_hook", &foreign_frame_hook,
        "The PEP 523 function another tool installed (described), or '' when none is.");
  m.def(
      "mark", [](const std::string& name) { framescope::mark(name); }, "name"_a,
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

  nb::class_<PyTrace>(m, "Trace")
      .def("__len__", [](const PyTrace& t) { return t.trace->events.size(); })
      .def(
          "event", [](const PyTrace& t, size_t i) { return event_tuple(*t.trace, i); }, "i"_a)
      .def(
          "symbol",
          [](const PyTrace& t, uint32_t s) {
            if (s >= t.trace->symbols.size()) throw nb::index_error("symbol out of range");
            const Symbol& sym = t.trace->symbols[s];
            return nb::make_tuple(sym.name, sym.file, sym.line, sym.function);
          },
          "s"_a)
      .def_prop_ro("symbol_count", [](const PyTrace& t) { return t.trace->symbols.size(); })
      .def(
          "find",
          [](const PyTrace& t, const std::string& name) {
            std::vector<size_t> out;
            const auto& tr = *t.trace;
            for (size_t i = 0; i < tr.events.size(); ++i) {
              if (tr.symbols[tr.events[i].symbol].name == name) out.push_back(i);
            }
            return out;
          },
          "name"_a, "Indices of the events with this exact name.")
      .def(
          "detail",
          [](const PyTrace& t, size_t i) -> nb::object {
            const auto& tr = *t.trace;
            if (i >= tr.events.size()) throw nb::index_error("event index out of range");
            if (tr.events[i].detail == UINT32_MAX) return nb::none();
            const EventDetail& d = tr.details[tr.events[i].detail];
            nb::list inputs;
            for (const RangeInput& in : d.inputs) {
              switch (in.kind) {
                case RangeInput::Kind::kShape:
                  inputs.append(nb::cast(in.shape));
                  break;
                case RangeInput::Kind::kInt:
                  inputs.append(in.int_value);
                  break;
                case RangeInput::Kind::kDouble:
                  inputs.append(in.double_value);
                  break;
                case RangeInput::Kind::kString:
                  inputs.append(in.text);
                  break;
                default:
                  inputs.append(nb::none());
              }
            }
            return nb::make_tuple(d.handle, d.seq_nr, d.flops, inputs);
          },
          "i"_a)
      .def_prop_ro("threads",
                   [](const PyTrace& t) {
                     nb::list out;
                     for (const ThreadInfo& th : t.trace->threads) {
                       out.append(nb::make_tuple(th.pid, th.os_tid, th.pthread_id, th.name));
                     }
                     return out;
                   })
      .def("stats",
           [](const PyTrace& t) {
             nb::list out;
             for (const SymbolStats& s : t.trace->stats()) {
               const Symbol& sym = t.trace->symbols[s.symbol];
               out.append(nb::make_tuple(sym.name, s.calls, s.total_ns, s.self_ns, sym.file,
                                         sym.line, sym.function));
             }
             return out;
           })
      .def(
          "export_chrome_trace",
          [](const PyTrace& t, const std::string& path) {
            nb::gil_scoped_release release;
            write_chrome_trace(*t.trace, path);
          },
          "path"_a)
      .def("serialize",
           [](const PyTrace& t) {
             std::string s = t.trace->serialize();
             return nb::bytes(s.data(), s.size());
           })
      .def_static(
          "deserialize",
          [](nb::bytes data) {
            PyTrace t;
            t.trace = std::make_shared<Trace>(Trace::deserialize(
                std::string_view(static_cast<const char*>(data.data()), data.size())));
            t.backend = "deserialized";
            return t;
          },
          "data"_a)
      .def(
          "merge",
          [](PyTrace& t, const PyTrace& other, int64_t offset_ns) {
            t.trace->merge(*other.trace, offset_ns);
          },
          "other"_a, "offset_ns"_a = 0)
      .def_prop_ro("warnings", [](const PyTrace& t) { return t.trace->warnings; })
      .def_prop_ro("dropped_events", [](const PyTrace& t) { return t.trace->dropped_events; })
      .def_prop_ro("recorded_events", [](const PyTrace& t) { return t.trace->recorded_events; })
      .def_prop_ro("start_ns", [](const PyTrace& t) { return t.trace->start_ns; })
      .def_prop_ro("stop_ns", [](const PyTrace& t) { return t.trace->stop_ns; })
      .def_prop_ro("backend", [](const PyTrace& t) { return t.backend; })
      .def_prop_ro("memory", [](const PyTrace& t) {
        nb::list out;
        for (const MemorySample& m : t.trace->memory) {
          out.append(nb::make_tuple(m.time_ns, m.thread, m.address, m.bytes, m.total_allocated,
                                    m.total_reserved, m.device));
        }
        return out;
      });
}

}  // namespace framescope::py
