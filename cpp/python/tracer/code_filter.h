// cpp/python/tracer/code_filter.h: which code objects a session records (include/exclude files,
// framescope's own code), decided once per code object per session.
#pragma once

#include <string>
#include <vector>

#include "py_compat.h"

namespace framescope::py {

/// The files whose frames a session records. A frame whose code is not recorded is simply not
/// there: its callees are recorded (when their own files are) as calls of the nearest recorded
/// frame around them; its C calls (c_calls) are not recorded either.
struct CodeFilter {
  /// Never recorded: framescope's own package (and, for `framescope run`, the launcher's
  /// files). Prefixes of co_filename.
  std::vector<std::string> skip_prefixes;
  /// Never recorded: these exact co_filenames.
  std::vector<std::string> skip_files;
  /// When not empty, only files matching one of these globs are recorded (fnmatch(3) without
  /// flags: `*` also matches `/`), matched against co_filename.
  std::vector<std::string> include_globs;
  /// Files matching one of these globs are not recorded.
  std::vector<std::string> exclude_globs;

  /// True when frames of `code` are recorded. Needs the GIL (reads co_filename).
  bool records(PyCodeObject* code) const;
  bool empty() const noexcept {
    return skip_prefixes.empty() && skip_files.empty() && include_globs.empty() &&
           exclude_globs.empty();
  }
};

}  // namespace framescope::py
