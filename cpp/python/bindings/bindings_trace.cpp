// cpp/python/bindings/bindings_trace.cpp: bindings of a stored trace: stats, exports, files, merge.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "bindings/trace_handle.h"
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
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    if (st.index) return st.index;
  }
  nb::gil_scoped_release release;
  std::lock_guard<std::mutex> build(st.index_build);
  std::shared_ptr<const StoredTrace> stored;
  {
    std::lock_guard<std::mutex> lock(st.mutex);
    if (st.index) return st.index;
    stored = st.stored;
  }
  auto index = std::make_shared<const Trace>(materialize(*stored));
  std::lock_guard<std::mutex> lock(st.mutex);
  if (st.stored == stored) st.index = index;
  return index;
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
          [](const PyTrace& t, uint32_t s) {
            auto st = t.state->current();
            if (s >= st->symbols().size()) throw nb::index_error("symbol out of range");
            const Symbol& sym = st->symbols()[s];
            return nb::make_tuple(py_str(sym.name), py_str(sym.file), sym.line,
                                  py_str(sym.function));
          },
          "s"_a)
      .def_prop_ro("symbol_count",
                   [](const PyTrace& t) { return t.state->current()->symbols().size(); })
      .def(
          "detail",
          [](const PyTrace& t, size_t i) -> nb::object {
            auto tr = index_of(*t.state);
            if (i >= tr->events.size()) throw nb::index_error("event index out of range");
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
          "i"_a)
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
            const ExportFormat f = format.is_none() ? format_for_path(path)
                                                    : parse_format(nb::cast<std::string>(format));
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
             int64_t wall_offset_ns, bool progress) {
            // Chrome JSON with top-level members first (framescope/_torch_json.py builds them).
            auto stored = t.state->current();
            nb::gil_scoped_release release;
            auto sink = open_file_output(path, is_gzip_path(path));
            if (progress && isatty(2)) {
              write_chrome_json(ProgressSource(*stored, "framescope: writing " + path), *sink,
                                extra_members, wall_offset_ns);
            } else {
              write_chrome_json(*stored, *sink, extra_members, wall_offset_ns);
            }
            sink->commit();
          },
          "path"_a, "extra_members"_a, "wall_offset_ns"_a, "progress"_a = true)
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
          [](PyTrace& t, const PyTrace& other, int64_t offset_ns) {
            constexpr int64_t kLimit = int64_t(1) << 61;
            if (offset_ns <= -kLimit || offset_ns >= kLimit) {
              throw nb::value_error("framescope: merge offset_ns out of range (|offset| < 2**61)");
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
          "other"_a, "offset_ns"_a = 0)
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
}

}  // namespace framescope::py
