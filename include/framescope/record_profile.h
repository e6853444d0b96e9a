// framescope/record_profile.h: RAII profiling of a scope of a pure C++ program into a trace file.
#pragma once

#include <string>

#include "framescope/session.h"

namespace framescope {

/// Enables a session on construction and, on destruction, stops it and writes a Chrome trace to
/// `path`. Construction throws SessionError like enable_profiler(); errors while writing in the
/// destructor are reported on stderr (a destructor must not throw); call stop() to get them as
/// exceptions instead. Not copyable.
class RecordProfile {
 public:
  explicit RecordProfile(std::string path, const SessionConfig& config = {});
  ~RecordProfile();
  RecordProfile(const RecordProfile&) = delete;
  RecordProfile& operator=(const RecordProfile&) = delete;

  /// Stops the session and writes the trace now, so that the caller sees failures: throws
  /// std::runtime_error naming the path when writing fails (SessionError when the session was
  /// already stopped elsewhere). Afterwards (even when it threw) the destructor does nothing.
  void stop();

 private:
  std::string path_;
  bool stopped_ = false;
};

}  // namespace framescope
