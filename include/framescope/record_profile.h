// framescope/record_profile.h: RAII profiling of a scope of a pure C++ program into a trace file.
#pragma once

#include <string>

#include "framescope/session.h"

namespace framescope {

/// Enables a session on construction and, on destruction, stops it and writes a Chrome trace to
/// `path`. Construction throws SessionError like enable_profiler(); errors while writing in the
/// destructor are reported on stderr (a destructor must not throw). Not copyable.
class RecordProfile {
 public:
  explicit RecordProfile(std::string path, const SessionConfig& config = {});
  ~RecordProfile();
  RecordProfile(const RecordProfile&) = delete;
  RecordProfile& operator=(const RecordProfile&) = delete;

 private:
  std::string path_;
};

}  // namespace framescope
