// tests/native/fork_test.cpp: fork() while other threads record: the child's session goes on with
// the forking thread alone and stops without deadlock; the parent's session is unaffected.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "framescope/internal/thread_buffer.h"
#include "test_support.h"
#include "thread_identity.h"

namespace framescope_test {
namespace {

class ForkTest : public CoreTest {};

// Runs in the child: stops the session and checks it holds the child's events only. Returns
// the exit code (0: fine; the failed check otherwise). No gtest macros: they are not fork-safe.
int check_child_trace(uint64_t parent_tid) {
  mark("child_mark");
  {
    FRAMESCOPE_RANGE("child_range");
  }
  Trace t = stop_profiler();
  if (t.threads.size() != 1) return 10;  // only the forking thread
  if (t.threads[0].os_tid != internal::os_thread_id() || t.threads[0].os_tid == parent_tid) {
    return 11;
  }
  if (t.threads[0].pid != getpid()) return 12;
  if (find_events(t, "child_mark").size() != 1 || find_events(t, "child_range").size() != 1) {
    return 13;
  }
  if (!find_events(t, "hammer").empty() || !find_events(t, "hammer_dyn").empty()) return 14;
  if (!find_events(t, "before_fork").empty()) return 15;  // the parent's, closed before
  // The range open across the fork is an open slice from the child's start.
  auto open = find_events(t, "open_across_fork");
  if (open.size() != 1) return 16;
  const TraceEvent& o = t.events[open[0]];
  if (o.start_ns != t.start_ns || !o.open_at_stop) return 17;
  const TraceEvent& m = t.events[find_events(t, "child_mark")[0]];
  if (m.parent != int64_t(open[0])) return 18;
  if (t.dropped_events != 0) return 19;  // the parent's drops are not the child's
  // Recording again works normally in the child.
  enable_profiler();
  {
    FRAMESCOPE_RANGE("second_child_session");
  }
  Trace again = stop_profiler();
  if (find_events(again, "second_child_session").size() != 1) return 20;
  return 0;
}

TEST_F(ForkTest, ChildOfARecordingProcessStopsItsOwnSession) {
  // Threads record ranges with dynamic names (a mutex per side record) and static names as
  // fast as they can; the test thread forks repeatedly. Before the fork handlers, a child's
  // stop() deadlocked on a buffer mutex held by a thread that does not exist in the child.
  // A small flight recorder: the hammers recycle chunks (under their buffer's mutex) instead of
  // growing the address space that every fork copies.
  SessionConfig cfg;
  cfg.memory_limit_bytes = size_t(8) << 20;
  cfg.on_limit = LimitPolicy::kKeepNewest;
  enable_profiler(cfg);
  std::atomic<bool> stop{false};
  std::vector<std::thread> hammers;
  for (int i = 0; i < 3; ++i) {
    hammers.emplace_back([&stop] {
      while (!stop.load(std::memory_order_relaxed)) {
        FRAMESCOPE_RANGE("hammer");
        RecordFunction rf;
        rf.before(std::string_view("hammer_dyn"));
      }
    });
  }
  {
    FRAMESCOPE_RANGE("before_fork");
  }
  const uint64_t my_tid = internal::os_thread_id();
  for (int round = 0; round < 40; ++round) {
    FRAMESCOPE_RANGE("open_across_fork");
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) _exit(check_child_trace(my_tid));
    const int status = wait_child(pid, 30);
    ASSERT_NE(status, -1) << "the child deadlocked in round " << round;
    ASSERT_EQ(status, 0) << "the child's check " << status << " failed in round " << round;
  }
  stop.store(true);
  for (auto& h : hammers) h.join();
  mark("parent_after_forks");
  Trace t = stop_profiler();
  expect_well_formed(t);
  EXPECT_EQ(t.threads.size(), 4u);
  EXPECT_EQ(find_events(t, "parent_after_forks").size(), 1u);
  EXPECT_GT(find_events(t, "hammer").size(), 0u);
  // The test thread's own buffer never fills up: all of its events stay.
  EXPECT_EQ(find_events(t, "open_across_fork").size(), 40u);
  EXPECT_EQ(find_events(t, "before_fork").size(), 1u);
}

TEST_F(ForkTest, ForkWithoutASessionAndFromAThreadThatNeverRecorded) {
  // No session: the handlers only cycle the pool's and the registry's locks.
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    enable_profiler();
    mark("m");
    Trace t = stop_profiler();
    _exit(find_events(t, "m").size() == 1 ? 0 : 1);
  }
  EXPECT_EQ(wait_child(pid, 30), 0);
  // A session, and a fork from a thread that has no buffer: the main thread's events stay in
  // the parent's trace.
  enable_profiler();
  std::thread([] {
    pid_t p = fork();
    if (p == 0) {
      Trace t = stop_profiler();  // its stop mark is the child's only event
      _exit(t.threads.size() == 1 && find_events(t, "__start_profile").empty() &&
                    find_events(t, "__stop_profile").size() == 1
                ? 0
                : 1);
    }
    EXPECT_EQ(wait_child(p, 30), 0);
  }).join();
  Trace t = stop_profiler();
  EXPECT_EQ(find_events(t, "__start_profile").size(), 1u);
}

}  // namespace
}  // namespace framescope_test
