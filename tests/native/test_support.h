// tests/native/test_support.h: shared helpers of the native tests (session fixture, trace checks,
// fork children).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "framescope/framescope.h"

namespace framescope_test {

using namespace framescope;

/// A symbol of a hand-made trace, named `name` (its function too).
inline Symbol sym(std::string name) {
  Symbol s;
  s.name = std::move(name);
  s.function = s.name;
  return s;
}

/// An event of a hand-made trace (a Python call unless `cat` says otherwise).
inline TraceEvent ev(int64_t start, int64_t dur, int64_t parent, uint32_t symbol, uint32_t depth,
                     EventCategory cat = EventCategory::kPythonFunction) {
  TraceEvent e;
  e.start_ns = start;
  e.dur_ns = dur;
  e.parent = parent;
  e.symbol = symbol;
  e.depth = depth;
  e.category = cat;
  return e;
}

/// Python keys of fake "code objects" f0, f1, ... (compact events): any value works, the
/// resolver names them.
constexpr uint64_t kKeyBase = 0x5000;

/// Names the fake keys kKeyBase + i "f<i>".
inline KeyResolver fake_python_resolver() {
  KeyResolver r;
  r.python = [](uint64_t key, Symbol& out) {
    if (key < kKeyBase) return false;
    out.name = "f" + std::to_string(key - kKeyBase);
    out.function = out.name;
    return true;
  };
  return r;
}

/// Leaves the process-wide state clean after each test: no session, no callbacks.
class CoreTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (profiler_enabled()) {
      try {
        disable_profiler();
      } catch (...) {
      }
    }
    clear_callbacks();
  }
};

/// Runs `fn` under a fresh session with `config` and returns the replayed trace.
inline Trace record(const std::function<void()>& fn, SessionConfig config = {}) {
  enable_profiler(config);
  fn();
  return stop_profiler();
}

inline std::string_view name_of(const Trace& t, const TraceEvent& e) {
  return t.symbols.at(e.symbol).name;
}

/// Indices of events named `name`, in trace order.
inline std::vector<size_t> find_events(const Trace& t, std::string_view name) {
  std::vector<size_t> out;
  for (size_t i = 0; i < t.events.size(); ++i) {
    if (name_of(t, t.events[i]) == name) out.push_back(i);
  }
  return out;
}

/// The single event named `name` (fails the test otherwise).
inline const TraceEvent& only_event(const Trace& t, std::string_view name) {
  auto found = find_events(t, name);
  EXPECT_EQ(found.size(), 1u) << "events named " << name;
  if (found.empty()) {
    static TraceEvent none;
    ADD_FAILURE() << "no event named " << name;
    return none;
  }
  return t.events[found[0]];
}

/// Range events only (no marks, no Python events).
inline size_t count_ranges(const Trace& t) {
  size_t n = 0;
  for (const TraceEvent& e : t.events) {
    if (e.category == EventCategory::kCpuOp || e.category == EventCategory::kUserAnnotation ||
        e.category == EventCategory::kOther) {
      ++n;
    }
  }
  return n;
}

/// Waits for the child `pid` for up to `seconds`; kills it and returns -1 when it does not finish
/// (a deadlocked child), else its exit status (128 + signal when killed by a signal).
inline int wait_child(pid_t pid, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/// Structural invariants of a replayed trace: parents precede children on the same thread, the
/// depth follows the parent, and a child lies inside its parent in time (async ends excepted).
inline void expect_well_formed(const Trace& t) {
  for (size_t i = 0; i < t.events.size(); ++i) {
    const TraceEvent& e = t.events[i];
    ASSERT_LT(e.symbol, t.symbols.size());
    ASSERT_LT(e.thread, t.threads.size());
    if (e.parent < 0) {
      EXPECT_EQ(e.depth, 0u) << "event " << i;
      continue;
    }
    ASSERT_LT(e.parent, int64_t(i)) << "parent after child, event " << i;
    const TraceEvent& p = t.events[size_t(e.parent)];
    EXPECT_EQ(p.thread, e.thread) << "event " << i;
    EXPECT_EQ(e.depth, p.depth + 1) << "event " << i;
    EXPECT_GE(p.dur_ns, 0) << "an instant cannot be a parent, event " << i;
    EXPECT_GE(e.start_ns, p.start_ns) << "event " << i;
    if (!e.async_end && !p.async_end) {
      int64_t end = e.start_ns + std::max<int64_t>(e.dur_ns, 0);
      EXPECT_LE(end, p.start_ns + p.dur_ns)
          << "event " << i << " " << name_of(t, e) << " outlives parent " << name_of(t, p);
    }
  }
}

}  // namespace framescope_test
