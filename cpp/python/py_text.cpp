// cpp/python/py_text.cpp: str -> UTF-8 with U+FFFD for lone surrogates.
#include "py_text.h"

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "utf8.h"

namespace framescope::py {

std::string utf8_of(PyObject* s) {
  if (!s || !PyUnicode_Check(s)) return {};
  Py_ssize_t size = 0;
  if (const char* utf8 = PyUnicode_AsUTF8AndSize(s, &size)) {  // cached by the str
    return std::string(utf8, size_t(size));
  }
  // Only lone surrogates make a str unencodable: encode it code point by code point.
  PyErr_Clear();
  std::string out;
  const Py_ssize_t length = PyUnicode_GetLength(s);
  const int kind = PyUnicode_KIND(s);
  const void* data = PyUnicode_DATA(s);
  out.reserve(size_t(length) + 8);
  for (Py_ssize_t i = 0; i < length; ++i) {
    internal::append_code_point(out, PyUnicode_READ(kind, data, i));
  }
  return out;
}

}  // namespace framescope::py
