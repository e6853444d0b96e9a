// cpp/python/bindings/bindings_processes.cpp: a trace's process table and time shift, for Python.
//
// Added to framescope._core.Trace after bind_trace() created it: names and labels of the
// processes of a trace (followed children, ranks of a job) and the shift that puts another
// host's clock on the reference clock (framescope.processes, framescope.merge).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings/trace_handle.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace framescope::py {

namespace {

constexpr int64_t kOffsetLimit = int64_t(1) << 61;

nb::str py_str(const std::string& s) {
  PyObject* o = PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace");  // new
  if (!o) throw nb::python_error();
  return nb::steal<nb::str>(o);
}

// Swaps in a new stored trace (copy-on-write, as merge(): readers keep the old one).
template <class F>
void replace_stored(PyTrace& t, F&& make) {
  nb::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(t.state->mutex);
  t.state->stored = std::make_shared<const StoredTrace>(make(*t.state->stored));
  t.state->index.reset();
}

nb::list processes(const PyTrace& t) {
  nb::list out;
  for (const ProcessInfo& p : t.state->current()->processes()) {
    nb::list labels;
    for (const std::string& l : p.labels) labels.append(py_str(l));
    out.append(nb::make_tuple(p.pid, py_str(p.name), labels, p.sort_index, py_str(p.metadata)));
  }
  return out;
}

void set_process(PyTrace& t, int64_t pid, std::string name, std::vector<std::string> labels,
                 int32_t sort_index, std::string metadata) {
  ProcessInfo info{pid, std::move(name), std::move(labels), sort_index, std::move(metadata)};
  replace_stored(t, [&](const StoredTrace& s) { return s.with_process(std::move(info)); });
}

void shift_times(PyTrace& t, int64_t offset_ns) {
  if (offset_ns <= -kOffsetLimit || offset_ns >= kOffsetLimit) {
    throw nb::value_error("framescope: offset_ns out of range (|offset| < 2**61)");
  }
  replace_stored(t, [&](const StoredTrace& s) { return StoredTrace().merged(s, offset_ns); });
}

void merge_separate(PyTrace& t, const PyTrace& other, int64_t offset_ns) {
  if (offset_ns <= -kOffsetLimit || offset_ns >= kOffsetLimit) {
    throw nb::value_error("framescope: merge offset_ns out of range (|offset| < 2**61)");
  }
  auto theirs = other.state->current();
  replace_stored(t, [&](const StoredTrace& s) { return s.merged(*theirs, offset_ns, true); });
}

}  // namespace

void bind_trace_processes(nb::module_& m) {
  nb::object cls = m.attr("Trace");
  auto method = [&](const char* name, auto&& f, auto... extra) {
    cls.attr(name) = nb::cpp_function(std::forward<decltype(f)>(f), nb::scope(cls), nb::name(name),
                                      nb::is_method(), extra...);
  };
  method("_processes", &processes);
  method("_set_process", &set_process, "pid"_a, "name"_a, "labels"_a, "sort_index"_a, "metadata"_a);
  method("_shift_times", &shift_times, "offset_ns"_a);
  method("_merge_separate_pids", &merge_separate, "other"_a, "offset_ns"_a);
}

}  // namespace framescope::py
