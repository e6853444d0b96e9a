// cpp/python/bindings/bindings_session.cpp: nanobind bindings of tracer queries and settings
// (session start/stop, marks and memory samples: session_control.cpp).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "stack_segments.h"
#include "tracer/tracer_api.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace framescope::py {

void bind_session(nb::module_& m) {
  m.def("_backend", &tracer_backend_description);
  m.def("_foreign_frame_hook", &foreign_frame_hook,
        "The PEP 523 function another tool installed (described), or '' when none is.");
  m.def(
      "_set_stack_segment_budget",
      [](size_t bytes) { return internal::set_stack_segment_budget(bytes); }, "bytes"_a,
      "Sets how much C stack (bytes, per thread) the frame hook may add in segments for deep "
      "recursion (0: none); returns the previous budget.");
  m.def("_stack_segments_supported", &internal::stack_segments_supported,
        "True when the frame hook can continue deep recursion on stack segments here.");
  m.def(
      "label_calls",
      [](nb::handle code, const std::string& label, bool per_instance) {
        if (!tracer_label_calls(code.ptr(), label, per_instance)) throw nb::python_error();
      },
      "code"_a, "label"_a, "per_instance"_a = false);
}

}  // namespace framescope::py
