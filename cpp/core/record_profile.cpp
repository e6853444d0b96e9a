// cpp/core/record_profile.cpp: RecordProfile, the RAII trace-to-file helper.
#include "framescope/record_profile.h"

#include <cstdio>
#include <exception>

#include "framescope/chrome_trace.h"

namespace framescope {

RecordProfile::RecordProfile(std::string path, const SessionConfig& config)
    : path_(std::move(path)) {
  enable_profiler(config);
}

void RecordProfile::stop() {
  if (stopped_) return;
  stopped_ = true;
  write_chrome_trace(stop_profiler(), path_);
}

RecordProfile::~RecordProfile() {
  if (stopped_) return;
  try {
    stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "framescope: RecordProfile could not write '%s': %s\n", path_.c_str(),
                 e.what());
  }
}

}  // namespace framescope
