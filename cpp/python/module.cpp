// cpp/python/module.cpp: framescope._core, the extension module.
#include <nanobind/nanobind.h>

#include <cstdlib>
#include <cstring>

#include "tracer/tracer_api.h"

namespace nb = nanobind;

namespace framescope::py {
void bind_session(nb::module_& m);
void bind_session_control(nb::module_& m);  // bindings/session_control.cpp
void bind_trace(nb::module_& m);
void bind_analysis(nb::module_& m);            // bindings/bindings_analysis.cpp
void bind_tables(nb::module_& m);              // bindings/bindings_tables.cpp
void bind_snapshot(nb::module_& m);            // bindings/bindings_snapshot.cpp
void bind_trace_processes(nb::module_& m);     // bindings/bindings_processes.cpp
bool bench_hooks_init(PyObject* module);       // bench/bench_hooks.cpp (benchmarks)
bool bench_chunk_pool_init(PyObject* module);  // bench/bench_chunk_pool.cpp (benchmarks)
bool torch_ops_init(PyObject* module);      // integrations/torch_ops.cpp (profile(torch_ops=True))
bool torch_memory_init(PyObject* module);   // integrations/torch_memory.cpp (torch's tensor memory)
bool term_signal_init(PyObject* module);    // integrations/term_signal.cpp (framescope.follow)
bool asyncio_steps_init(PyObject* module);  // integrations/asyncio_steps.cpp (_asyncio_tasks)
namespace fallback {
// tracer/builtin_names.cpp: the module's nanobind functions are framescope's own builtins,
// never recorded as the program's C calls (framescope.mark() under c_calls=True).
void register_own_functions(PyObject* module);
}  // namespace fallback
}  // namespace framescope::py

NB_MODULE(_core, m) {
  m.doc() = "framescope's C++ core: sessions, ranges, the frame hook and the eval_frame API.";
  m.attr("__version__") = FRAMESCOPE_VERSION;  // from src/framescope/_version.py (CMake)
  // nanobind reports, at the very end of interpreter shutdown, every Trace object still alive.
  // Objects are legitimately alive then when something the interpreter never tears down holds
  // them: a daemon thread's frame (its module globals), torch's static state. Those reports say
  // nothing about framescope and end users cannot act on them, so they are off unless asked for
  // (FRAMESCOPE_NB_LEAK_WARNINGS=1, which the tests set to check that framescope itself leaks
  // nothing at exit).
  const char* leak_warnings = std::getenv("FRAMESCOPE_NB_LEAK_WARNINGS");
  nb::set_leak_warnings(leak_warnings && std::strcmp(leak_warnings, "1") == 0);
  framescope::py::bind_trace(m);
  framescope::py::bind_analysis(m);
  framescope::py::bind_tables(m);
  framescope::py::bind_snapshot(m);
  framescope::py::bind_trace_processes(m);
  framescope::py::bind_session(m);
  framescope::py::bind_session_control(m);
  if (!framescope::py::record_function_init(m.ptr()) || !framescope::py::c_api_init(m.ptr()) ||
      !framescope::py::eval_frame_api_init(m.ptr()) || !framescope::py::bench_hooks_init(m.ptr()) ||
      !framescope::py::bench_chunk_pool_init(m.ptr()) || !framescope::py::torch_ops_init(m.ptr()) ||
      !framescope::py::torch_memory_init(m.ptr()) || !framescope::py::term_signal_init(m.ptr()) ||
      !framescope::py::asyncio_steps_init(m.ptr())) {
    throw nb::python_error();
  }
  framescope::py::fallback::register_own_functions(m.ptr());  // once every function is defined
}
