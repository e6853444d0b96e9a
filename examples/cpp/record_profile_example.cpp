// examples/cpp/record_profile_example.cpp: profiles a pure C++ program into a Chrome trace file.
//
//   record_profile_example trace.json   # then open trace.json in https://ui.perfetto.dev
//
// Nested FRAMESCOPE_RANGE scopes on the main thread and on a framescope::ThreadPool worker (its
// tasks carry the caller's thread-local state) all land in one session. Exits non-zero when the
// trace could not be written.
#include <cmath>
#include <cstdio>
#include <exception>
#include <future>
#include <vector>

#include "framescope/framescope.h"

namespace {

double leaf_work(int n) {
  FRAMESCOPE_RANGE("leaf_work");
  double acc = 0;
  for (int i = 1; i <= n; ++i) acc += std::sqrt(double(i));
  return acc;
}

double middle(int n) {
  FRAMESCOPE_RANGE("middle");
  double acc = 0;
  for (int i = 0; i < 3; ++i) acc += leaf_work(n);
  return acc;
}

double pipeline(framescope::ThreadPool& pool) {
  FRAMESCOPE_USER_RANGE("pipeline");
  // Work on a pool worker: its ranges are recorded on the worker's thread.
  std::future<double> background = pool.submit([] {
    FRAMESCOPE_RANGE("background_task");
    return middle(20000);
  });
  double here = middle(10000);
  framescope::mark("foreground_done");
  return here + background.get();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT.json\n", argv[0]);
    return 2;
  }
  framescope::ThreadPool pool(1);
  double result = 0;
  try {
    framescope::RecordProfile profile(argv[1]);  // starts a session
    for (int step = 0; step < 3; ++step) result += pipeline(pool);
    profile.stop();  // stops the session and writes the trace; throws if writing fails
  } catch (const std::exception& e) {
    std::fprintf(stderr, "record_profile_example: %s\n", e.what());
    return 1;
  }
  std::printf("result %.3f; trace written to %s\n", result, argv[1]);
  return 0;
}
