// cpp/python/bindings/bindings_trace.cpp: bindings of a stored trace: stats, exports, files, merge.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "bindings/arg_checks.h"
#include "bindings/trace_handle.h"
#include "framescope/key_averages.h"
#include "framescope/writers.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace framescope::py {

// Every string handed to Python is decoded with replacement: names may hold invalid UTF-8 (C
// ABI, merged blobs, lone surrogates of thread names), and no reader may fail on them.
nb::str py_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");  // new
  if (!o) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

namespace {

nb::list py_strs(const std::vector<std::string>& v) {
  nb::list out;
  for (const std::string& s : v) out.append(py_str(s));
  return out;
}

}  // namespace

void set_output_error(const OutputError& e) {
  if (!e.error_code()) {
    PyErr_SetString(PyExc_OSError, e.what());
    return;
  }
  PyObject* err = PyObject_CallFunction(PyExc_OSError, "isN", e.error_code(), e.what(),
                                        py_str(e.path()).release().ptr());  // new
  if (err) {
    PyErr_SetObject(PyExc_OSError, err);
    Py_DECREF(err);
  }
}

// The materialized index (random access: event(i), detail(i)), built once per trace state.
std::shared_ptr<const Trace> index_of(TraceState& st) {
  return st.built_once(&TraceState::index, [](const StoredTrace& stored) {
    return std::make_shared<const Trace>(materialize(stored));
  });
}

namespace {

// Progress on stderr for long exports: only on a terminal, only after a second.
class ProgressVisitor final : public TraceVisitor {
 public:
  ProgressVisitor(TraceVisitor& t, uint64_t total, std::string label)
      : t_(t),
        total_(total ? total : 1),
        label_(std::move(label)),
        start_(std::chrono::steady_clock::now()) {}
  ~ProgressVisitor() override {
    if (shown_) std::fprintf(stderr, "\r%s: done%20s\n", label_.c_str(), "");
  }
  void begin_trace(const TraceView& v) override { t_.begin_trace(v); }
  void begin_thread(uint32_t th) override { t_.begin_thread(th); }
  void slice_begin(const Slice& s) override {
    tick();
    t_.slice_begin(s);
  }
  void slice_end(const Slice& s) override {
    tick();
    t_.slice_end(s);
  }
  void instant(const Slice& s) override {
    tick();
    t_.instant(s);
  }
  void async_slice(const Slice& s) override { t_.async_slice(s); }
  void memory(const MemorySample& m) override { t_.memory(m); }
  void end_thread(uint32_t th) override { t_.end_thread(th); }
  void end_trace() override { t_.end_trace(); }

 private:
  void tick() {
    if ((++done_ & 0xfffff) != 0) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (s < 1.0) return;
    shown_ = true;
    std::fprintf(stderr, "\r%s: %3d%%", label_.c_str(),
                 int(std::min<uint64_t>(100, done_ * 100 / total_)));
    std::fflush(stderr);
  }
  TraceVisitor& t_;
  uint64_t total_;
  std::string label_;
  std::chrono::steady_clock::time_point start_;
  uint64_t done_ = 0;
  bool shown_ = false;
};

class ProgressSource final : public TraceSource {
 public:
  ProgressSource(const StoredTrace& s, std::string label) : s_(s), label_(std::move(label)) {}
  uint64_t event_count() const override { return s_.event_count(); }
  int64_t time_base_ns() const override { return s_.time_base_ns(); }
  void visit(TraceVisitor& v) const override {
    ProgressVisitor p(v, s_.recorded_events(), label_);
    s_.visit(p);
  }

 private:
  const StoredTrace& s_;
  std::string label_;
};

void export_to(TraceState& st, const std::string& path, ExportFormat format, bool gzip,
               bool progress) {
  auto stored = st.current();
  nb::gil_scoped_release release;
  auto sink = open_file_output(path, gzip);
  if (progress && isatty(2)) {
    write_format(format, ProgressSource(*stored, "framescope: writing " + path), *sink);
  } else {
    write_format(format, *stored, *sink);
  }
  sink->commit();
}

}  // namespace

// Fallback overloads of the methods taking a path: nanobind tries an overload only after the
// ones registered before it refused the arguments, so these run only for a wrong argument (a
// path that is not a str, or a str with lone surrogates, which std::string cannot take) and
// say which, where nanobind would list the signatures.
static void bind_path_fallbacks(nb::class_<PyTrace>& trace) {
  trace
      .def(
          "export_chrome_trace",
          [](const PyTrace&, nb::handle path) {
            bad_path_arg(path, "Trace.export_chrome_trace()");
          },
          "path"_a.none())
      .def(
          "export",
          [](const PyTrace&, nb::handle path, nb::handle, nb::handle progress) {
            if (!PyUnicode_Check(path.ptr()) || !PyUnicode_AsUTF8(path.ptr())) {
              PyErr_Clear();
              bad_path_arg(path, "Trace.export()");
            }
            PyErr_Format(PyExc_TypeError,
                         "Trace.export(): progress must be True or False, not %.100s",
                         Py_TYPE(progress.ptr())->tp_name);
            throw nb::python_error();
          },
          "path"_a.none(), "format"_a.none() = nb::none(), "progress"_a.none() = true)
      .def(
          "save", [](const PyTrace&, nb::handle path) { bad_path_arg(path, "Trace.save()"); },
          "path"_a.none())
      .def_static(
          "load", [](nb::handle path) { bad_path_arg(path, "Trace.load()"); }, "path"_a.none());
}

void bind_trace(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const OutputError& e) {
      set_output_error(e);
    } catch (const TraceFormatError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  nb::class_<PyTrace> trace(m, "Trace");
  bind_events(m, trace);
  trace
      .def("__len__",
           [](const PyTrace& t) {
             auto s = t.state->current();
             nb::gil_scoped_release release;
             return s->event_count();
           })
      .def(
          "symbol",
          [](const PyTrace& t, nb::handle s_arg) {
            auto st = t.state->current();
            const Symbol& sym =
                st->symbols()[index_arg(s_arg, "symbol()", "s", st->symbols().size(), "symbols")];
            return nb::make_tuple(py_str(sym.name), py_str(sym.file), sym.line,
                                  py_str(sym.function));
          },
          "s"_a.none())
      .def_prop_ro("symbol_count",
                   [](const PyTrace& t) { return t.state->current()->symbols().size(); })
      .def(
          "detail",
          [](const PyTrace& t, nb::handle i_arg) -> nb::object {
            auto tr = index_of(*t.state);
            const uint64_t i = index_arg(i_arg, "detail()", "i", tr->events.size(), "events");
            if (tr->events[i].detail == UINT32_MAX) return nb::none();
            const EventDetail& d = tr->details[tr->events[i].detail];
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
                  inputs.append(py_str(in.text));
                  break;
                default:
                  inputs.append(nb::none());
              }
            }
            return nb::make_tuple(d.handle, d.seq_nr, d.flops, inputs);
          },
          "i"_a.none())
      .def_prop_ro(
          "threads",
          [](const PyTrace& t) {
            nb::list out;
            for (const ThreadInfo& th : t.state->current()->threads()) {
              out.append(nb::make_tuple(th.pid, th.os_tid, th.pthread_id, py_str(th.name)));
            }
            return out;
          })
      .def("stats",
           [](const PyTrace& t) {
             auto st = t.state->current();
             std::vector<SymbolStats> stats;
             {
               nb::gil_scoped_release release;
               stats = compute_stats(*st, st->symbols().size());
             }
             nb::list out;
             for (const SymbolStats& s : stats) {
               const Symbol& sym = st->symbols()[s.symbol];
               out.append(nb::make_tuple(py_str(sym.name), s.calls, s.total_ns, s.self_ns,
                                         py_str(sym.file), sym.line, py_str(sym.function)));
             }
             return out;
           })
      .def(
          "export_chrome_trace",
          [](const PyTrace& t, const std::string& path) {
            export_to(*t.state, path, ExportFormat::kChromeJson, is_gzip_path(path), false);
          },
          "path"_a)
      .def(
          "export",
          [](const PyTrace& t, const std::string& path, nb::handle format, bool progress) {
            const ExportFormat f = format.is_none()
                                       ? format_for_path(path)
                                       : parse_format(text_arg(format, "Trace.export()", "format"));
            // gzip by extension; pstats.Stats reads only plain files, so a pstats .gz is refused
            // rather than written plain under a name that says gzip.
            const bool gzip = is_gzip_path(path);
            if (gzip && f == ExportFormat::kPstats) {
              throw std::invalid_argument(
                  "framescope: pstats.Stats reads only uncompressed files: use .prof ('" + path +
                  "')");
            }
            export_to(*t.state, path, f, gzip, progress);
          },
          "path"_a, "format"_a.none() = nb::none(), "progress"_a = true,
          "Writes the trace to `path` in `format` (chosen from the extension when None).")
      .def(
          "_export_chrome",
          [](const PyTrace& t, const std::string& path, const std::string& extra_members,
             int64_t wall_offset_ns, bool progress, bool python_heap_instants) {
            // Chrome JSON with top-level members first (framescope/_torch_json.py builds them).
            auto stored = t.state->current();
            nb::gil_scoped_release release;
            auto sink = open_file_output(path, is_gzip_path(path));
            if (progress && isatty(2)) {
              write_chrome_json(ProgressSource(*stored, "framescope: writing " + path), *sink,
                                extra_members, wall_offset_ns, python_heap_instants);
            } else {
              write_chrome_json(*stored, *sink, extra_members, wall_offset_ns,
                                python_heap_instants);
            }
            sink->commit();
          },
          "path"_a, "extra_members"_a, "wall_offset_ns"_a, "progress"_a = true,
          "python_heap_instants"_a = true)
      .def(
          "save",
          [](const PyTrace& t, const std::string& path) {
            auto st = t.state->current();
            nb::gil_scoped_release release;
            auto sink = open_file_output(path, false);
            st->serialize(*sink);
            sink->commit();
          },
          "path"_a)
      .def_static(
          "load",
          [](const std::string& path) {
            PyTrace t;
            {
              nb::gil_scoped_release release;
              t.state->stored = std::make_shared<const StoredTrace>(StoredTrace::load(path));
            }
            t.state->backend = "loaded";
            return t;
          },
          "path"_a)
      .def("serialize",
           [](const PyTrace& t) {
             auto st = t.state->current();
             std::string s;
             {
               nb::gil_scoped_release release;
               s = st->serialize();
             }
             return nb::bytes(s.data(), s.size());
           })
      .def_static(
          "deserialize",
          [](nb::handle data) {
            if (!PyBytes_Check(data.ptr())) {  // a clear TypeError, not a signature dump
              PyErr_Format(PyExc_TypeError, "Trace.deserialize: data must be bytes, not %.100s",
                           Py_TYPE(data.ptr())->tp_name);
              throw nb::python_error();
            }
            PyTrace t;
            const std::string_view bytes(PyBytes_AS_STRING(data.ptr()),
                                         size_t(PyBytes_GET_SIZE(data.ptr())));
            t.state->stored = std::make_shared<const StoredTrace>(StoredTrace::deserialize(bytes));
            t.state->backend = "deserialized";
            return t;
          },
          "data"_a)
      .def(
          "merge",
          [](PyTrace& t, nb::handle other_arg, nb::handle offset_arg) {
            if (!nb::isinstance<PyTrace>(other_arg)) {
              PyErr_Format(PyExc_TypeError, "Trace.merge(): other must be a Trace, not %.100s",
                           Py_TYPE(other_arg.ptr())->tp_name);
              throw nb::python_error();
            }
            const PyTrace& other = nb::cast<const PyTrace&>(other_arg);
            if (PyBool_Check(offset_arg.ptr()) || !PyIndex_Check(offset_arg.ptr())) {
              PyErr_Format(PyExc_TypeError, "Trace.merge(): offset_ns must be an int, not %.100s",
                           Py_TYPE(offset_arg.ptr())->tp_name);
              throw nb::python_error();
            }
            nb::object number = nb::steal(PyNumber_Index(offset_arg.ptr()));
            if (!number.is_valid()) throw nb::python_error();
            int overflow = 0;
            const long long offset_ns = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
            if (offset_ns == -1 && PyErr_Occurred()) throw nb::python_error();
            constexpr long long kLimit = 1LL << 61;
            if (overflow != 0 || offset_ns <= -kLimit || offset_ns >= kLimit) {
              PyErr_Format(PyExc_ValueError,
                           "Trace.merge(): offset_ns=%S is out of range (|offset_ns| < 2**61)",
                           number.ptr());
              throw nb::python_error();
            }
            auto theirs = other.state->current();
            nb::gil_scoped_release release;
            // Copy-on-write: readers holding the old trace keep reading it undisturbed.
            std::lock_guard<std::mutex> lock(t.state->mutex);
            t.state->stored =
                std::make_shared<const StoredTrace>(t.state->stored->merged(*theirs, offset_ns));
            t.state->index.reset();
            t.state->durations.reset();
          },
          "other"_a.none(), "offset_ns"_a.none() = 0)
      .def_prop_ro("warnings",
                   [](const PyTrace& t) { return py_strs(t.state->current()->warnings()); })
      .def_prop_ro("dropped_events",
                   [](const PyTrace& t) { return t.state->current()->dropped_events(); })
      .def_prop_ro("recorded_events",
                   [](const PyTrace& t) { return t.state->current()->recorded_events(); })
      .def_prop_ro("slot_bytes", [](const PyTrace& t) { return t.state->current()->slot_bytes(); })
      .def_prop_ro("start_ns", [](const PyTrace& t) { return t.state->current()->start_ns(); })
      .def_prop_ro("stop_ns", [](const PyTrace& t) { return t.state->current()->stop_ns(); })
      .def_prop_ro("backend", [](const PyTrace& t) { return t.state->backend; })
      .def_prop_ro("memory", [](const PyTrace& t) {
        auto st = t.state->current();
        std::vector<MemorySample> samples;
        {
          nb::gil_scoped_release release;
          samples = st->memory_samples();
        }
        nb::list out;
        for (const MemorySample& m : samples) {
          out.append(nb::make_tuple(m.time_ns, m.thread, m.address, m.bytes, m.total_allocated,
                                    m.total_reserved, m.device));
        }
        return out;
      });
  bind_path_fallbacks(trace);

  // The native formats' names, from the core's one table (framescope.export._formats reads it).
  m.def("export_formats", []() {
    size_t count = 0;
    const FormatNames* formats = export_formats(&count);
    nb::list out;
    auto text = [](std::string_view s) { return nb::str(s.data(), s.size()); };
    for (size_t i = 0; i < count; ++i) {
      const FormatNames& f = formats[i];
      nb::list suffixes;
      for (std::string_view s : f.suffixes) {
        if (!s.empty()) suffixes.append(text(s));
      }
      nb::tuple aliases = f.alias.empty() ? nb::make_tuple() : nb::make_tuple(text(f.alias));
      out.append(nb::make_tuple(text(f.name), text(f.extension), nb::tuple(suffixes), aliases));
    }
    return out;
  });
}

}  // namespace framescope::py
