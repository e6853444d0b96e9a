// cpp/python/bindings/record_function_internal.h: what record_function's type and decorator share.
#pragma once

#include "py_compat.h"  // first: Python.h

#include <cstdint>

#include "framescope/record_function.h"

namespace framescope::py {

/// What a range's owner (a record_function object, a decorated function) caches about its name
/// between ranges. Zero-initialised = nothing known yet.
struct RangeNameCache {
  uint64_t pinned_epoch;    ///< session in which the name's str is pinned (kept alive)
  int8_t name_is_c_string;  ///< 0 unknown, 1 the UTF-8 has no NUL inside, -1 it has
};

/// Starts `range` (constructed, user scope) when something consumes it: named by `name` (a
/// str), with `args` (a str or None) as its input when inputs are recorded. A name without NUL
/// is handed to the core uncopied and its str is pinned until the session's trace is replayed.
/// Returns false with a Python exception set (the range is then not started). Needs the GIL.
bool begin_python_range(RecordFunction& range, PyObject* name, PyObject* args,
                        RangeNameCache& cache);

/// A callable that runs `fn` inside a range (the decorator form). New reference, or null with an
/// exception set. `name` is a str, `args` a str or None.
PyObject* make_range_wrapper(PyObject* name, PyObject* args, PyObject* fn);

/// Creates the decorator's wrapper type. False with an exception set.
bool range_wrapper_init();

/// True for a function wrapped by the decorator. Needs the GIL.
bool is_range_wrapper(PyObject* obj);

}  // namespace framescope::py
