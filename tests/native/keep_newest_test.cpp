// tests/native/keep_newest_test.cpp: the flight recorder keeps the ranges and Python calls that
// enclose its window (their begins were in recycled chunks) as slices with their real start.
#include <pthread.h>

#include <string>

#include "framescope/internal/thread_buffer.h"
#include "session_impl.h"
#include "test_support.h"
#include "thread_identity.h"

namespace framescope_test {
namespace {

using internal::ThreadBuffer;

class KeepNewestTest : public CoreTest {};

constexpr size_t kChunkEvents = 16384;
constexpr size_t kChunkBytes = kChunkEvents * 16;

SessionConfig flight_recorder(size_t chunks) {
  SessionConfig cfg;
  cfg.memory_limit_bytes = chunks * kChunkBytes;
  cfg.on_limit = LimitPolicy::kKeepNewest;
  return cfg;
}

// Names of `i`'s ancestors, innermost first.
std::vector<std::string> ancestors(const Trace& t, size_t i) {
  std::vector<std::string> out;
  for (int64_t p = t.events[i].parent; p >= 0; p = t.events[size_t(p)].parent) {
    out.emplace_back(name_of(t, t.events[size_t(p)]));
  }
  return out;
}

TEST_F(KeepNewestTest, RangesEnclosingTheWindowAreKept) {
  for (size_t chunks : {size_t(1), size_t(3)}) {
    SCOPED_TRACE("limit of " + std::to_string(chunks) + " chunks");
    Trace t = record(
        [] {
          FRAMESCOPE_RANGE("outer");
          RecordFunction dynamic;
          dynamic.before(std::string_view("dynamic_outer"), {RangeInput::of_int(7)});
          {
            FRAMESCOPE_RANGE("closed_before_the_window");
          }
          for (int i = 0; i < 60000; ++i) {
            FRAMESCOPE_RANGE("old");
          }
          FRAMESCOPE_RANGE("inner");
          mark("the_end");
        },
        [&] {
          SessionConfig cfg = flight_recorder(chunks);
          cfg.record_shapes = true;
          return cfg;
        }());
    expect_well_formed(t);
    EXPECT_GT(t.dropped_events, 0u);
    ASSERT_EQ(find_events(t, "the_end").size(), 1u);
    const size_t end = find_events(t, "the_end")[0];
    EXPECT_EQ(ancestors(t, end), (std::vector<std::string>{"inner", "dynamic_outer", "outer"}));
    EXPECT_TRUE(find_events(t, "closed_before_the_window").empty());
    EXPECT_TRUE(find_events(t, "__start_profile").empty());
    // The enclosing ranges keep their real start (before the oldest kept event) and end.
    const TraceEvent& outer = only_event(t, "outer");
    const TraceEvent& dyn = only_event(t, "dynamic_outer");
    const TraceEvent& first_old = t.events[find_events(t, "old").front()];
    EXPECT_LT(outer.start_ns, first_old.start_ns);
    EXPECT_LE(outer.start_ns, dyn.start_ns);
    EXPECT_FALSE(outer.open_at_stop);
    EXPECT_FALSE(dyn.open_at_stop);
    ASSERT_NE(dyn.detail, UINT32_MAX) << "the carried range keeps its side record";
    ASSERT_EQ(t.details[dyn.detail].inputs.size(), 1u);
    EXPECT_EQ(t.details[dyn.detail].inputs[0].int_value, 7);
  }
}

TEST_F(KeepNewestTest, RangesStillOpenAtStopStayOpen) {
  enable_profiler(flight_recorder(1));
  RecordFunction open;
  open.before("open_at_stop");
  for (int i = 0; i < 40000; ++i) {
    FRAMESCOPE_RANGE("old");
  }
  Trace t = stop_profiler();
  expect_well_formed(t);
  const TraceEvent& e = only_event(t, "open_at_stop");
  EXPECT_TRUE(e.open_at_stop);
  EXPECT_EQ(e.start_ns + e.dur_ns, t.stop_ns);
  for (size_t i : find_events(t, "old")) EXPECT_EQ(ancestors(t, i).back(), "open_at_stop");
}

// Python calls as the extension records them: compact 8-byte events with fake keys (kKeyBase,
// fake_python_resolver: test_support.h).

TEST_F(KeepNewestTest, PythonCallsEnclosingTheWindowAndClosesOfPreexistingFrames) {
  SessionConfig cfg = flight_recorder(2);
  cfg.start_stop_marks = false;
  enable_profiler(cfg);
  ThreadBuffer* b = internal::current_buffer();
  ASSERT_NE(b, nullptr);
  const uint64_t epoch = internal::g_session_epoch.load();
  auto bits = [epoch](uint64_t f) {
    return internal::compact_call_bits(internal::register_compact_key(epoch, kKeyBase + f));
  };
  // Frames f10 > f11 were running when the session started; f11 returns at once.
  InitialStack stack;
  stack.pthread_id = internal::pthread_thread_id();
  stack.os_tid = internal::os_thread_id();
  stack.keys = {kKeyBase + 10, kKeyBase + 11};
  stack.frame_addresses = {0x10, 0x11};
  internal::add_initial_stack(stack);
  b->append_compact(now_ticks(), internal::kCompactReturnBits);  // f11 returns
  b->append_compact(now_ticks(), bits(0));                       // f0
  b->append(now_ticks(), internal::pack_word(internal::EventKind::kPyCall, kKeyBase + 1));  // f1
  for (size_t i = 0; i < 6 * kChunkEvents; ++i) {
    b->append_compact(now_ticks(), bits(2));
    b->append_compact(now_ticks(), internal::kCompactReturnBits);
  }
  b->append_compact(now_ticks(), bits(3));
  b->append_compact(now_ticks(), internal::kCompactReturnBits);
  b->append_compact(now_ticks(), internal::kCompactReturnBits);  // f1 returns
  Trace t = replay(*disable_profiler(), fake_python_resolver());
  expect_well_formed(t);
  EXPECT_GT(t.dropped_events, 0u);
  const TraceEvent& f11 = only_event(t, "f11");
  EXPECT_FALSE(f11.open_at_stop) << "its return was in a recycled chunk, and still counts";
  const TraceEvent& f10 = only_event(t, "f10");
  EXPECT_TRUE(f10.open_at_stop);
  const TraceEvent& f0 = only_event(t, "f0");
  const TraceEvent& f1 = only_event(t, "f1");
  EXPECT_TRUE(f0.open_at_stop);
  EXPECT_FALSE(f1.open_at_stop);
  EXPECT_EQ(name_of(t, t.events[size_t(f1.parent)]), "f0");
  EXPECT_EQ(name_of(t, t.events[size_t(f0.parent)]), "f10");
  const size_t f3 = find_events(t, "f3").at(0);
  EXPECT_EQ(ancestors(t, f3), (std::vector<std::string>{"f1", "f0", "f10"}));
  EXPECT_LT(f1.start_ns, t.events[find_events(t, "f2").front()].start_ns);
}

}  // namespace
}  // namespace framescope_test
