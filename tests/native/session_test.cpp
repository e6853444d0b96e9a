// tests/native/session_test.cpp: session lifecycle, marks, memory, propagation, limits, replay
// keys.
#include <atomic>
#include <future>
#include <thread>

#include "chunk_pool.h"
#include "framescope/internal/thread_buffer.h"
#include "session_impl.h"
#include "test_support.h"
#include "thread_identity.h"

namespace framescope_test {
namespace {

class SessionTest : public CoreTest {};

std::vector<std::string> mark_names(const Trace& t) {
  std::vector<std::string> out;
  for (const TraceEvent& e : t.events) {
    if (e.category == EventCategory::kMark) out.emplace_back(name_of(t, e));
  }
  return out;
}

bool has_warning_containing(const Trace& t, std::string_view needle) {
  for (const auto& w : t.warnings) {
    if (w.find(needle) != std::string::npos) return true;
  }
  return false;
}

TEST_F(SessionTest, EnableDisableBasics) {
  EXPECT_FALSE(profiler_enabled());
  EXPECT_THROW(profiler_config(), SessionError);
  EXPECT_THROW(disable_profiler(), SessionError);
  SessionConfig cfg;
  cfg.record_shapes = true;
  enable_profiler(cfg);
  EXPECT_TRUE(profiler_enabled());
  EXPECT_TRUE(profiler_config().record_shapes);
  RawTracePtr raw = disable_profiler();
  ASSERT_NE(raw, nullptr);
  EXPECT_FALSE(profiler_enabled());
  RawTraceStats stats = raw_trace_stats(*raw);
  EXPECT_EQ(stats.threads, 1u);
  EXPECT_EQ(stats.events, 2u);  // the start and stop marks
  EXPECT_EQ(stats.dropped, 0u);
  Trace t = replay(*raw);
  EXPECT_LE(t.start_ns, t.stop_ns);
  EXPECT_EQ(t.recorded_events, 2u);
}

TEST_F(SessionTest, EnablingTwiceIsAnError) {
  enable_profiler();
  EXPECT_THROW(enable_profiler(), SessionError);
  std::atomic<bool> threw{false};
  std::thread other([&] {
    try {
      enable_profiler();
    } catch (const SessionError&) {
      threw = true;
    }
  });
  other.join();
  EXPECT_TRUE(threw.load()) << "a second session from another thread is an error too";
  EXPECT_TRUE(profiler_enabled()) << "a failed enable leaves the running session alone";
  {
    FRAMESCOPE_RANGE("still_recorded");
  }
  Trace t = stop_profiler();
  EXPECT_EQ(find_events(t, "still_recorded").size(), 1u);
  // and after stopping, enabling works again
  enable_profiler();
  EXPECT_NO_THROW(stop_profiler());
}

TEST_F(SessionTest, ErrorMessageSaysWhatHappened) {
  enable_profiler();
  try {
    enable_profiler();
    FAIL() << "no SessionError";
  } catch (const SessionError& e) {
    EXPECT_NE(std::string(e.what()).find("already enabled"), std::string::npos) << e.what();
  }
}

TEST_F(SessionTest, TooSmallMemoryLimitIsRejected) {
  SessionConfig cfg;
  cfg.memory_limit_bytes = 1024;
  EXPECT_THROW(enable_profiler(cfg), SessionError);
  EXPECT_FALSE(profiler_enabled());
}

TEST_F(SessionTest, StartStopAndUserMarks) {
  Trace t = record([] {
    mark("user_mark");
    FRAMESCOPE_RANGE("range");
    mark("inside_range");
  });
  std::vector<std::string> marks = mark_names(t);
  ASSERT_EQ(marks.size(), 4u);
  EXPECT_EQ(marks.front(), "__start_profile");
  EXPECT_EQ(marks[1], "user_mark");
  EXPECT_EQ(marks[2], "inside_range");
  EXPECT_EQ(marks.back(), "__stop_profile");
  for (const TraceEvent& e : t.events) {
    if (e.category == EventCategory::kMark) {
      EXPECT_EQ(e.dur_ns, -1);
    }
  }
  const TraceEvent& inside = only_event(t, "inside_range");
  EXPECT_EQ(inside.parent, int64_t(find_events(t, "range")[0]));
  expect_well_formed(t);
}

TEST_F(SessionTest, MarksCanBeTurnedOffAndNeedASession) {
  mark("no_session");  // no-op
  SessionConfig cfg;
  cfg.start_stop_marks = false;
  Trace t = record([] { mark("only_mark"); }, cfg);
  EXPECT_EQ(mark_names(t), std::vector<std::string>{"only_mark"});
  EXPECT_TRUE(find_events(t, "no_session").empty());
}

TEST_F(SessionTest, RecordMemory) {
  SessionConfig cfg;
  cfg.profile_memory = true;
  int a = 0, b = 0;
  Trace t = record(
      [&] {
        record_memory(&a, 64, 64, 128, 0);
        std::thread th([&] { record_memory(&b, 32, 96); });
        th.join();
        record_memory(&a, -64, 32, 128, 0);
      },
      cfg);
  ASSERT_EQ(t.memory.size(), 3u);
  std::vector<MemorySample> mine, theirs;
  for (const MemorySample& m : t.memory) {
    (t.threads[m.thread].os_tid == framescope::internal::os_thread_id() ? mine : theirs)
        .push_back(m);
  }
  ASSERT_EQ(mine.size(), 2u);
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(mine[0].address, reinterpret_cast<uint64_t>(&a));
  EXPECT_EQ(mine[0].bytes, 64);
  EXPECT_EQ(mine[0].total_allocated, 64);
  EXPECT_EQ(mine[0].total_reserved, 128);
  EXPECT_EQ(mine[0].device, 0);
  EXPECT_EQ(mine[1].bytes, -64);
  EXPECT_EQ(mine[1].total_allocated, 32);
  EXPECT_LE(mine[0].time_ns, mine[1].time_ns);
  EXPECT_EQ(theirs[0].address, reinterpret_cast<uint64_t>(&b));
  EXPECT_EQ(theirs[0].device, -1);
  for (const MemorySample& m : t.memory) {
    EXPECT_GE(m.time_ns, t.start_ns);
    EXPECT_LE(m.time_ns, t.stop_ns);
  }
}

TEST_F(SessionTest, RecordMemoryNeedsProfileMemory) {
  int a = 0;
  record_memory(&a, 8, 8);  // no session: no-op
  Trace t = record([&] { record_memory(&a, 8, 8); });
  EXPECT_TRUE(t.memory.empty());
}

TEST_F(SessionTest, AllThreadsScopeRecordsPlainThreads) {
  Trace t = record([] {
    std::thread th([] { FRAMESCOPE_RANGE("plain_thread_range"); });
    th.join();
  });
  const TraceEvent& e = only_event(t, "plain_thread_range");
  EXPECT_NE(t.threads[e.thread].os_tid, framescope::internal::os_thread_id());
}

TEST_F(SessionTest, PropagatedScopeFollowsThreadLocalState) {
  SessionConfig cfg;
  cfg.threads = ThreadScope::kPropagated;
  ThreadPool pool(2);
  uint64_t pool_tid = 0;
  uint64_t launched_tid = 0;
  Trace t = record(
      [&] {
        FRAMESCOPE_RANGE("main_range");
        std::thread plain([] { FRAMESCOPE_RANGE("plain_thread_range"); });
        plain.join();
        pool_tid = pool.submit([] {
                         FRAMESCOPE_RANGE("pool_range");
                         return framescope::internal::os_thread_id();
                       })
                       .get();
        std::thread launched = launch_with_thread_local_state([&] {
          FRAMESCOPE_RANGE("launched_range");
          launched_tid = framescope::internal::os_thread_id();
        });
        launched.join();
      },
      cfg);
  expect_well_formed(t);
  EXPECT_EQ(find_events(t, "main_range").size(), 1u);
  EXPECT_TRUE(find_events(t, "plain_thread_range").empty())
      << "a thread that does not carry the state must not record";
  const TraceEvent& pool_ev = only_event(t, "pool_range");
  EXPECT_EQ(t.threads[pool_ev.thread].os_tid, pool_tid) << "recorded on the worker's thread";
  EXPECT_NE(pool_tid, framescope::internal::os_thread_id());
  EXPECT_EQ(pool_ev.parent, -1) << "a task's range is a root on the worker thread";
  const TraceEvent& launched_ev = only_event(t, "launched_range");
  EXPECT_EQ(t.threads[launched_ev.thread].os_tid, launched_tid);
}

TEST_F(SessionTest, PropagatedScopeDoesNotLeakThroughReusedWorkers) {
  // A pool worker that ran a task of the session must not record a later task submitted by a
  // thread that does not carry the session's state.
  SessionConfig cfg;
  cfg.threads = ThreadScope::kPropagated;
  ThreadPool pool(1);
  Trace t = record(
      [&] {
        pool.submit([] { FRAMESCOPE_RANGE("propagated_task"); }).get();
        std::thread outsider([&] { pool.submit([] { FRAMESCOPE_RANGE("outsider_task"); }).get(); });
        outsider.join();
        pool.submit([] { FRAMESCOPE_RANGE("propagated_again"); }).get();
      },
      cfg);
  EXPECT_EQ(find_events(t, "propagated_task").size(), 1u);
  EXPECT_EQ(find_events(t, "propagated_again").size(), 1u);
  EXPECT_TRUE(find_events(t, "outsider_task").empty());
}

TEST_F(SessionTest, ThreadsThatExitMidSessionKeepTheirEvents) {
  std::vector<uint64_t> tids;
  Trace t = record([&] {
    for (int i = 0; i < 3; ++i) {
      std::promise<uint64_t> tid;
      std::thread th([&] {
        FRAMESCOPE_RANGE("short_lived");
        mark("short_lived_mark");
        tid.set_value(framescope::internal::os_thread_id());
      });
      th.join();  // the thread is gone before the session stops
      tids.push_back(tid.get_future().get());
    }
  });
  auto ranges = find_events(t, "short_lived");
  ASSERT_EQ(ranges.size(), 3u);
  EXPECT_EQ(find_events(t, "short_lived_mark").size(), 3u);
  std::set<uint64_t> seen;
  for (size_t i : ranges) seen.insert(t.threads[t.events[i].thread].os_tid);
  EXPECT_EQ(seen, std::set<uint64_t>(tids.begin(), tids.end()));
  for (size_t i : ranges) EXPECT_FALSE(t.events[i].open_at_stop);
}

TEST_F(SessionTest, BackToBackSessionsAreIndependent) {
  Trace first = record([] { FRAMESCOPE_RANGE("first_only"); });
  Trace second = record([] { FRAMESCOPE_RANGE("second_only"); });
  EXPECT_EQ(find_events(first, "first_only").size(), 1u);
  EXPECT_TRUE(find_events(first, "second_only").empty());
  EXPECT_EQ(find_events(second, "second_only").size(), 1u);
  EXPECT_TRUE(find_events(second, "first_only").empty());
  EXPECT_LE(first.stop_ns, second.start_ns);
}

TEST_F(SessionTest, StopFromAnotherThread) {
  enable_profiler();
  {
    FRAMESCOPE_RANGE("on_main");
  }
  Trace t;
  std::thread stopper([&] { t = stop_profiler(); });
  stopper.join();
  EXPECT_FALSE(profiler_enabled());
  EXPECT_EQ(find_events(t, "on_main").size(), 1u);
  {
    FRAMESCOPE_RANGE("after_stop");  // this thread lets go of its old buffer
  }
  EXPECT_NO_THROW(record([] { FRAMESCOPE_RANGE("next"); }));
}

// ---- memory limit ----------------------------------------------------------------------------

constexpr size_t kChunkBytes = framescope::internal::ChunkPool::kChunkBytes;
constexpr size_t kChunkEvents = framescope::internal::ChunkPool::kChunkEvents;

TEST_F(SessionTest, MemoryLimitStopsRecordingWithAWarning) {
  SessionConfig cfg;
  cfg.memory_limit_bytes = 2 * kChunkBytes;
  constexpr int kRanges = 100000;  // 200k events, far beyond 2 chunks
  Trace t = record(
      [] {
        for (int i = 0; i < kRanges; ++i) {
          FRAMESCOPE_RANGE("flood");
        }
        mark("the_end");
      },
      cfg);
  expect_well_formed(t);
  EXPECT_GT(t.dropped_events, 0u);
  EXPECT_LE(t.recorded_events, 2 * kChunkEvents);
  EXPECT_TRUE(has_warning_containing(t, "memory limit")) << "a clear warning in trace.warnings";
  EXPECT_TRUE(has_warning_containing(t, "dropped"));
  auto floods = find_events(t, "flood");
  EXPECT_GT(floods.size(), 0u);
  EXPECT_LT(floods.size(), size_t(kRanges));
  EXPECT_TRUE(find_events(t, "the_end").empty()) << "stop policy keeps the oldest events";
  EXPECT_EQ(mark_names(t).front(), "__start_profile");
  // recording into the next session works normally again
  Trace next = record([] { FRAMESCOPE_RANGE("after_limit"); });
  EXPECT_EQ(next.dropped_events, 0u);
  EXPECT_EQ(find_events(next, "after_limit").size(), 1u);
}

TEST_F(SessionTest, MemoryLimitKeepNewestKeepsTheNewestEvents) {
  for (size_t chunks : {size_t(1), size_t(3)}) {
    SCOPED_TRACE("limit of " + std::to_string(chunks) + " chunks");
    SessionConfig cfg;
    cfg.memory_limit_bytes = chunks * kChunkBytes;
    cfg.on_limit = LimitPolicy::kKeepNewest;
    Trace t = record(
        [] {
          for (int i = 0; i < 60000; ++i) {
            FRAMESCOPE_RANGE("old");
          }
          for (int i = 0; i < 1000; ++i) {
            FRAMESCOPE_RANGE("new");
          }
          mark("the_end");
        },
        cfg);
    expect_well_formed(t);
    EXPECT_GT(t.dropped_events, 0u);
    EXPECT_LE(t.recorded_events, chunks * kChunkEvents);
    EXPECT_EQ(find_events(t, "the_end").size(), 1u) << "the newest events are kept";
    EXPECT_EQ(find_events(t, "new").size(), 1000u);
    EXPECT_LT(find_events(t, "old").size(), 60000u);
    EXPECT_TRUE(find_events(t, "__start_profile").empty()) << "the oldest events were recycled";
    EXPECT_TRUE(has_warning_containing(t, "dropped"));
  }
}

TEST_F(SessionTest, MemoryLimitWithManyThreads) {
  SessionConfig cfg;
  cfg.memory_limit_bytes = 2 * kChunkBytes;
  Trace t = record(
      [] {
        std::vector<std::thread> threads;
        for (int i = 0; i < 4; ++i) {
          threads.emplace_back([] {
            for (int j = 0; j < 30000; ++j) {
              FRAMESCOPE_RANGE("flood");
            }
          });
        }
        for (auto& th : threads) th.join();
      },
      cfg);
  expect_well_formed(t);
  EXPECT_GT(t.dropped_events, 0u);
  EXPECT_LE(t.recorded_events, 2 * kChunkEvents);
  EXPECT_TRUE(has_warning_containing(t, "memory limit"));
}

TEST_F(SessionTest, SideRecordsStayBoundedAtTheLimit) {
  // Dynamic names and marks keep side records beside their events; at the limit those must
  // not keep growing either (stop policy) or must be recycled with their events (keep newest).
  auto flood = [] {
    for (int i = 0; i < 60000; ++i) {
      RecordFunction rf;
      rf.before(std::string_view("dyn_" + std::to_string(i)));
      if (i % 4 == 0) mark("flood_mark");
    }
  };
  {
    SessionConfig cfg;
    cfg.memory_limit_bytes = kChunkBytes;
    enable_profiler(cfg);
    flood();
    RawTracePtr raw = disable_profiler();
    ASSERT_EQ(raw->threads.size(), 1u);
    const auto& d = raw->threads[0].data;
    EXPECT_LE(d.details.size(), kChunkEvents + 1);
    EXPECT_LE(d.strings.size(), kChunkEvents + 1);
    Trace t = replay(*raw);
    expect_well_formed(t);
    EXPECT_EQ(find_events(t, "dyn_0").size(), 1u);
    EXPECT_GT(t.dropped_events, 0u);
  }
  // One chunk: the full chunk recycles itself while the event being appended may need a
  // record of its own (a chunk that starts with a side event keeps that event's record).
  for (size_t chunks : {size_t(1), size_t(2)}) {
    SCOPED_TRACE("limit of " + std::to_string(chunks) + " chunks");
    SessionConfig cfg;
    cfg.memory_limit_bytes = chunks * kChunkBytes;
    cfg.on_limit = LimitPolicy::kKeepNewest;
    enable_profiler(cfg);
    flood();
    RawTracePtr raw = disable_profiler();
    const auto& d = raw->threads[0].data;
    EXPECT_LE(d.details.size(), chunks * kChunkEvents);
    EXPECT_LE(d.strings.size(), chunks * kChunkEvents);
    Trace t = replay(*raw);
    expect_well_formed(t);
    EXPECT_EQ(find_events(t, "dyn_59999").size(), 1u) << "the newest range keeps its name";
    EXPECT_TRUE(find_events(t, "dyn_0").empty());
    size_t named = 0;
    for (const TraceEvent& e : t.events) {
      std::string_view n = name_of(t, e);
      named += n.rfind("dyn_", 0) == 0 || n == "flood_mark" || n == "__stop_profile";
    }
    EXPECT_EQ(named, t.events.size()) << "every kept event resolves to its own name";
  }
}

// ---- concurrency -----------------------------------------------------------------------------

TEST_F(SessionTest, SessionsStartAndStopWhileThreadsRecord) {
  // Threads keep recording (ranges, marks, memory) while sessions come and go. Checks for
  // crashes and data races (run under ASan/TSan) and that every trace is well formed.
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&stop] {
      int x = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        FRAMESCOPE_RANGE("busy");
        {
          FRAMESCOPE_USER_RANGE("busy_child");
          mark("busy_mark");
          record_memory(&x, 1, 1);
        }
      }
    });
  }
  SessionConfig cfg;
  cfg.profile_memory = true;
  for (int round = 0; round < 30; ++round) {
    enable_profiler(cfg);
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    Trace t = stop_profiler();
    expect_well_formed(t);
    if (HasFailure()) break;
  }
  stop = true;
  for (auto& th : threads) th.join();
}

// ---- replay of extension events --------------------------------------------------------------

TEST_F(SessionTest, ReplayResolvesPythonAndCKeysThroughTheResolver) {
  using framescope::internal::EventKind;
  using framescope::internal::pack_word;
  enable_profiler();
  {
    FRAMESCOPE_RANGE("native_outer");
    auto* b = framescope::internal::current_buffer();
    ASSERT_NE(b, nullptr);
    b->append(now_ticks(), pack_word(EventKind::kPyCall, 0x1000));
    b->append(now_ticks(), pack_word(EventKind::kCCall, 0x2000));
    b->append(now_ticks(), pack_word(EventKind::kCReturn, 0));
    b->append(now_ticks(), pack_word(EventKind::kPyCall, 0x3000));  // unresolvable
    b->append(now_ticks(), pack_word(EventKind::kPyReturn, 0));
    b->append(now_ticks(), pack_word(EventKind::kPyReturn, 0));
  }
  RawTracePtr raw = disable_profiler();
  KeyResolver resolver;
  resolver.python = [](uint64_t key, Symbol& out) {
    if (key != 0x1000) return false;
    out.name = "app.py(3): run";
    out.file = "app.py";
    out.line = 3;
    out.function = "run";
    return true;
  };
  resolver.c_function = [](uint64_t key, Symbol& out) {
    out.name = "<built-in method len>";
    out.function = "len";
    return key == 0x2000;
  };
  Trace t = replay(*raw, resolver);
  expect_well_formed(t);
  const TraceEvent& run = only_event(t, "app.py(3): run");
  EXPECT_EQ(run.category, EventCategory::kPythonFunction);
  EXPECT_EQ(run.parent, int64_t(find_events(t, "native_outer")[0]));
  EXPECT_EQ(t.symbols[run.symbol].line, 3);
  const TraceEvent& len = only_event(t, "<built-in method len>");
  EXPECT_EQ(len.category, EventCategory::kCFunction);
  EXPECT_EQ(len.parent, int64_t(find_events(t, "app.py(3): run")[0]));
  EXPECT_EQ(find_events(t, "<unknown python function>").size(), 1u);
  for (const TraceEvent& e : t.events) EXPECT_FALSE(e.open_at_stop);
}

TEST_F(SessionTest, InitialStackOpensPreExistingFrames) {
  using framescope::internal::EventKind;
  using framescope::internal::pack_word;
  enable_profiler();
  InitialStack stack;
  stack.pthread_id = framescope::internal::pthread_thread_id();
  stack.keys = {1, 2};
  stack.frame_addresses = {0xa0, 0xb0};
  internal::add_initial_stack(stack);
  auto* b = framescope::internal::current_buffer();
  ASSERT_NE(b, nullptr);
  // frame 2 returned; a new call runs under frame 1
  b->append(now_ticks(), pack_word(EventKind::kPyAnchor, 0xa0));
  b->append(now_ticks(), pack_word(EventKind::kPyCall, 3));
  b->append(now_ticks(), pack_word(EventKind::kPyReturn, 0));
  RawTracePtr raw = disable_profiler();
  KeyResolver resolver;
  resolver.python = [](uint64_t key, Symbol& out) {
    out.name = "frame" + std::to_string(key);
    out.function = out.name;
    return true;
  };
  Trace t = replay(*raw, resolver);
  expect_well_formed(t);
  const TraceEvent& f1 = only_event(t, "frame1");
  const TraceEvent& f2 = only_event(t, "frame2");
  const TraceEvent& f3 = only_event(t, "frame3");
  EXPECT_EQ(f1.start_ns, t.start_ns);
  EXPECT_TRUE(f1.open_at_stop);
  EXPECT_FALSE(f2.open_at_stop) << "closed by the anchor";
  EXPECT_EQ(f3.parent, int64_t(find_events(t, "frame1")[0]));
}

}  // namespace
}  // namespace framescope_test
