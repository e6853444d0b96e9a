// cpp/python/bindings/arg_checks.h: arguments of the Trace bindings converted by hand, so that a
// wrong one is an exception naming it, never nanobind's "incompatible function arguments" dump.
//
// Why by hand: when no overload of a binding accepts the arguments, nanobind raises a TypeError
// listing the C++ signature and the argument types; an index that is negative or past 2**64,
// or None where a str goes, got that dump instead of saying which argument is wrong. These take
// the argument as a handle (declared .none() when None must reach them) and check it here.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <string>

#include "py_text.h"

namespace framescope::py {

/// `value` as a Python int (a new reference; a bool is not one): TypeError naming `name` else.
inline PyObject* int_arg(nanobind::handle value, const char* fn, const char* name) {
  PyObject* o = value.ptr();
  if (PyBool_Check(o) || !PyIndex_Check(o)) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be an int, not %.100s", fn, name,
                 Py_TYPE(o)->tp_name);
    throw nanobind::python_error();
  }
  PyObject* number = PyNumber_Index(o);
  if (!number) throw nanobind::python_error();
  return number;
}

/// The int argument `name` of `fn` (anything with __index__, not bool) as an index below
/// `size` of `what` ("events", "symbols"): TypeError for another type, IndexError outside
/// 0..size-1.
inline uint64_t index_arg(nanobind::handle value, const char* fn, const char* name, uint64_t size,
                          const char* what) {
  PyObject* number = int_arg(value, fn, name);  // new
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(number, &overflow);
  const bool failed = v == -1 && PyErr_Occurred();
  if (failed || overflow != 0 || v < 0 || static_cast<unsigned long long>(v) >= size) {
    if (!failed) {
      PyErr_Format(PyExc_IndexError, "%s: %s=%S is out of range: the trace has %llu %s", fn, name,
                   number, static_cast<unsigned long long>(size), what);
    }
    Py_DECREF(number);
    throw nanobind::python_error();
  }
  Py_DECREF(number);
  return static_cast<uint64_t>(v);
}

/// An optional bound (iter_events' start and stop): an int clamped to 0..max, or TypeError.
inline uint64_t bound_arg(nanobind::handle value, const char* fn, const char* name, uint64_t max) {
  PyObject* number = int_arg(value, fn, name);  // new
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(number, &overflow);
  Py_DECREF(number);
  if (v == -1 && PyErr_Occurred()) throw nanobind::python_error();
  if (overflow < 0 || (overflow == 0 && v < 0)) return 0;
  if (overflow > 0 || static_cast<unsigned long long>(v) > max) return max;
  return static_cast<uint64_t>(v);
}

/// The str argument `name` of `fn` as UTF-8: TypeError for another type (None included).
inline std::string text_arg(nanobind::handle value, const char* fn, const char* name) {
  if (!PyUnicode_Check(value.ptr())) {
    PyErr_Format(PyExc_TypeError, "%s: %s must be a str, not %.100s", fn, name,
                 Py_TYPE(value.ptr())->tp_name);
    throw nanobind::python_error();
  }
  return utf8_of(value.ptr());
}

/// For the fallback overload of a binding taking a file path as std::string, reached only when
/// that conversion failed: TypeError for a non-str, ValueError for a str with lone surrogates
/// (not UTF-8: a name decoded with surrogateescape), which a file name here cannot hold.
[[noreturn]] inline void bad_path_arg(nanobind::handle value, const char* fn) {
  if (PyUnicode_Check(value.ptr())) {
    PyErr_Format(PyExc_ValueError,
                 "%s: path %R is not valid text (a lone surrogate, e.g. from a file name that "
                 "is not UTF-8)",
                 fn, value.ptr());
  } else {
    PyErr_Format(PyExc_TypeError, "%s: path must be a str, not %.100s", fn,
                 Py_TYPE(value.ptr())->tp_name);
  }
  throw nanobind::python_error();
}

}  // namespace framescope::py
