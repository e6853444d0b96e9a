// cpp/python/bindings_trace.cpp: nanobind bindings of a stored trace: events, stats, exports.
#include <nanobind/nanobind.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "framescope/writers.h"
#include "trace_handle.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace framescope::py {

namespace {

// Every string handed to Python is decoded with replacement: names may hold invalid UTF-8 (C
// ABI, merged blobs, lone surrogates of thread names), and no reader may fail on them.
nb::str py_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");  // new
  if (!o) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

nb::list py_strs(const std::vector<std::string>& v) {
  nb::list out;
  for (const std::string& s : v) out.append(py_str(s));
  return out;
}

// The materialized index (random access: event(i), find, parents), built once per trace state.
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

// Progress on stderr for long exports: only on a terminal, only after a second.
class ProgressVisitor final : public TraceVisitor {
 public:
  ProgressVisitor(TraceVisitor& t, uint64_t total, std::string label)
      : t_(t), total_(total ? total : 1), label_(std::move(label)),
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

nb::tuple event_tuple(const Trace& t, size_t i) {
  if (i >= t.events.size()) throw nb::index_error("event index out of range");
  const TraceEvent& e = t.events[i];
  return nb::make_tuple(py_str(t.symbols[e.symbol].name), category_name(e.category), e.thread,
                        e.start_ns, e.dur_ns, e.parent, e.depth, e.symbol, int(e.category));
}

// One event of the index, built in C++ (iterating millions of events must not build Python
// dataclasses); names come from a per-trace cache of str objects.
struct PyEvent {
  std::shared_ptr<const Trace> trace;
  std::shared_ptr<std::vector<nb::object>> names;
  size_t index = 0;
  const TraceEvent& e() const { return trace->events[index]; }
};

struct EventCursor {
  std::shared_ptr<const Trace> trace;
  std::shared_ptr<std::vector<nb::object>> names;
  size_t next = 0;
  size_t end = 0;
};

std::shared_ptr<std::vector<nb::object>> name_cache(const std::shared_ptr<const Trace>& t) {
  auto names = std::make_shared<std::vector<nb::object>>();
  names->reserve(t->symbols.size());
  for (const Symbol& s : t->symbols) names->push_back(py_str(s.name));
  return names;
}

}  // namespace

void bind_trace(nb::module_& m) {
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const OutputError& e) {
      if (e.error_code()) {
        nb::object err = nb::module_::import_("builtins").attr("OSError")(
            e.error_code(), py_str(e.what()), py_str(e.path()));
        PyErr_SetObject(PyExc_OSError, err.ptr());
      } else {
        PyErr_SetString(PyExc_OSError, e.what());
      }
    } catch (const TraceFormatError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });

  nb::class_<PyEvent>(m, "Event", "One event: a Python call, a range, a builtin call or a mark.")
      .def_prop_ro("index", [](const PyEvent& e) { return e.index; })
      .def_prop_ro("name", [](const PyEvent& e) { return (*e.names)[e.e().symbol]; })
      .def_prop_ro("category", [](const PyEvent& e) { return category_name(e.e().category); })
      .def_prop_ro("thread", [](const PyEvent& e) { return e.e().thread; })
      .def_prop_ro("start_ns", [](const PyEvent& e) { return e.e().start_ns; })
      .def_prop_ro("duration_ns", [](const PyEvent& e) { return e.e().dur_ns; })
      .def_prop_ro("end_ns",
                   [](const PyEvent& e) { return e.e().start_ns + std::max<int64_t>(0, e.e().dur_ns); })
      .def_prop_ro("parent",
                   [](const PyEvent& e) -> nb::object {
                     if (e.e().parent < 0) return nb::none();
                     return nb::int_(e.e().parent);
                   })
      .def_prop_ro("depth", [](const PyEvent& e) { return e.e().depth; })
      .def_prop_ro("open_at_stop", [](const PyEvent& e) { return e.e().open_at_stop; })
      .def("__eq__",
           [](const PyEvent& a, nb::handle b) {
             if (!nb::isinstance<PyEvent>(b)) return false;
             const PyEvent& o = nb::cast<const PyEvent&>(b);
             return a.trace == o.trace && a.index == o.index;
           })
      .def("__hash__", [](const PyEvent& e) { return std::hash<size_t>()(e.index); })
      .def("__repr__", [](const PyEvent& e) -> nb::str {
        const TraceEvent& ev = e.e();
        return nb::str("Event(index={}, name={!r}, category={!r}, thread={}, start_ns={}, "
                       "duration_ns={}, parent={}, depth={})")
            .format(e.index, (*e.names)[ev.symbol], category_name(ev.category), ev.thread,
                    ev.start_ns, ev.dur_ns,
                    ev.parent < 0 ? nb::object(nb::none()) : nb::object(nb::int_(ev.parent)),
                    ev.depth);
      });

  nb::class_<EventCursor>(m, "_EventCursor")
      .def("__iter__", [](nb::handle self) { return self; })
      .def("__next__", [](EventCursor& c) {
        if (c.next >= c.end) throw nb::stop_iteration();
        return PyEvent{c.trace, c.names, c.next++};
      });

  nb::class_<PyTrace>(m, "Trace")
      .def("__len__",
           [](const PyTrace& t) {
             auto s = t.state->current();
             nb::gil_scoped_release release;
             return s->event_count();
           })
      .def(
          "event", [](const PyTrace& t, size_t i) { return event_tuple(*index_of(*t.state), i); },
          "i"_a)
      .def(
          "event_object",
          [](const PyTrace& t, size_t i) {
            auto index = index_of(*t.state);
            if (i >= index->events.size()) throw nb::index_error("event index out of range");
            return PyEvent{index, name_cache(index), i};
          },
          "i"_a)
      .def(
          "iter_events",
          [](const PyTrace& t, size_t start, size_t stop) {
            auto index = index_of(*t.state);
            stop = std::min(stop, index->events.size());
            return EventCursor{index, name_cache(index), std::min(start, stop), stop};
          },
          "start"_a = 0, "stop"_a = SIZE_MAX)
      .def(
          "symbol",
          [](const PyTrace& t, uint32_t s) {
            auto st = t.state->current();
            if (s >= st->symbols().size()) throw nb::index_error("symbol out of range");
            const Symbol& sym = st->symbols()[s];
            return nb::make_tuple(py_str(sym.name), py_str(sym.file), sym.line, py_str(sym.function));
          },
          "s"_a)
      .def_prop_ro("symbol_count", [](const PyTrace& t) { return t.state->current()->symbols().size(); })
      .def(
          "find",
          [](const PyTrace& t, nb::handle name) {
            PyObject* b = PyUnicode_AsEncodedString(name.ptr(), "utf-8", "surrogatepass");  // new
            if (!b) throw nb::python_error();
            const std::string wanted(PyBytes_AS_STRING(b), size_t(PyBytes_GET_SIZE(b)));
            Py_DECREF(b);
            auto index = index_of(*t.state);
            nb::gil_scoped_release release;
            std::vector<size_t> out;
            std::vector<char> match(index->symbols.size(), 0);
            bool any = false;
            for (size_t i = 0; i < index->symbols.size(); ++i) {
              if (index->symbols[i].name == wanted) any = match[i] = 1;
            }
            if (any) {
              for (size_t i = 0; i < index->events.size(); ++i) {
                if (match[index->events[i].symbol]) out.push_back(i);
              }
            }
            return out;
          },
          "name"_a, "Indices of the events with this exact name.")
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
      .def_prop_ro("threads",
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
            // gzip by extension for the text formats (pstats and Perfetto are binary).
            const bool gzip = is_gzip_path(path) && f != ExportFormat::kPstats;
            export_to(*t.state, path, f, gzip, progress);
          },
          "path"_a, "format"_a.none() = nb::none(), "progress"_a = true,
          "Writes the trace to `path` in `format` (chosen from the extension when None).")
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
          },
          "other"_a, "offset_ns"_a = 0)
      .def_prop_ro("warnings", [](const PyTrace& t) { return py_strs(t.state->current()->warnings()); })
      .def_prop_ro("dropped_events", [](const PyTrace& t) { return t.state->current()->dropped_events(); })
      .def_prop_ro("recorded_events", [](const PyTrace& t) { return t.state->current()->recorded_events(); })
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
