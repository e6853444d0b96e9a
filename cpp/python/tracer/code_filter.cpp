// cpp/python/tracer/code_filter.cpp: matching a code object's file against a session's filters.
#include "tracer/code_filter.h"

#include <fnmatch.h>

namespace framescope::py {

namespace {

bool matches_any(const std::vector<std::string>& globs, const char* file) {
  for (const std::string& g : globs) {
    if (fnmatch(g.c_str(), file, 0) == 0) return true;
  }
  return false;
}

}  // namespace

bool CodeFilter::records(PyCodeObject* code) const {
  if (empty()) return true;
  Py_ssize_t n = 0;
  const char* file = PyUnicode_Check(code->co_filename)
                         ? PyUnicode_AsUTF8AndSize(code->co_filename, &n)  // borrowed buffer
                         : nullptr;
  if (!file) {
    PyErr_Clear();
    return include_globs.empty();  // a nameless file matches no glob
  }
  const std::string_view name(file, size_t(n));
  for (const std::string& p : skip_prefixes) {
    if (!p.empty() && name.substr(0, p.size()) == p) return false;
  }
  for (const std::string& f : skip_files) {
    if (name == f) return false;
  }
  if (!include_globs.empty() && !matches_any(include_globs, file)) return false;
  return !matches_any(exclude_globs, file);
}

}  // namespace framescope::py
