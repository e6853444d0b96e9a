// cpp/python/py_text.h: Python str -> UTF-8 for names entering the core, never failing on odd text.
#pragma once

#include <string>

struct _object;  // PyObject: this header is included before and after <Python.h> alike

namespace framescope::py {

/// The UTF-8 form of the str `s`, with U+FFFD for each lone surrogate (a file name decoded
/// with surrogateescape, `"w\udcff"`), which strict UTF-8 cannot encode. NUL characters are kept.
/// Never sets a Python exception. Needs the GIL; throws std::bad_alloc only.
std::string utf8_of(_object* s);

}  // namespace framescope::py
