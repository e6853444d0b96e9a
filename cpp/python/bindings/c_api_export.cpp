// cpp/python/bindings/c_api_export.cpp: the capsule behind <framescope/c_api.h>.
#include <Python.h>

#include <new>

#include "framescope/c_api.h"
#include "framescope/record_function.h"
#include "framescope/session.h"
#include "tracer/tracer_api.h"
#include "utf8.h"

struct framescope_range {
  framescope::RecordFunction range{framescope::RecordScope::kUserScope};
};

namespace framescope::py {

namespace {

framescope_range* range_enter(const char* name) {
  if (internal::g_range_consumers.load(std::memory_order_relaxed) == 0 || !name) return nullptr;
  auto* r = new (std::nothrow) framescope_range();
  if (!r) return nullptr;
  if (!r->range.is_active()) {
    delete r;
    return nullptr;
  }
  // Names from C are bytes: ill-formed UTF-8 is repaired here, where it enters the core, so
  // that every reader and writer downstream sees valid text (a copy only in that case).
  const std::string_view bytes(name);
  if (FRAMESCOPE_LIKELY(internal::is_valid_utf8(bytes))) {
    r->range.before(bytes);
  } else {
    try {
      r->range.before(std::string_view(internal::to_valid_utf8(bytes)));
    } catch (...) {  // out of memory: the range goes unnamed (the C ABI never throws)
      r->range.before(std::string_view("?"));
    }
  }
  return r;
}

void range_exit(framescope_range* r) {
  if (!r) return;
  r->range.end();
  delete r;
}

void c_mark(const char* name) {
  if (!name) return;
  try {
    framescope::mark(internal::to_valid_utf8(name));
  } catch (...) {  // out of memory: no mark (the C ABI never throws)
  }
}

int is_enabled() { return profiler_enabled() ? 1 : 0; }

const framescope_c_api kApi = {FRAMESCOPE_C_API_VERSION, range_enter, range_exit, c_mark,
                               is_enabled};

}  // namespace

bool c_api_init(PyObject* module) {
  PyObject* capsule =
      PyCapsule_New(const_cast<framescope_c_api*>(&kApi), FRAMESCOPE_C_API_CAPSULE, nullptr);
  if (!capsule) return false;
  return PyModule_AddObject(module, "_C_API", capsule) == 0 || (Py_DECREF(capsule), false);
}

}  // namespace framescope::py
