// tests/native/record_function_test.cpp: ranges recorded by sessions: nesting, names, async ends.
#include <atomic>
#include <memory>
#include <thread>

#include "framescope/internal/thread_buffer.h"
#include "test_support.h"

namespace framescope_test {
namespace {

class RecordFunctionTest : public CoreTest {};

TEST_F(RecordFunctionTest, InertWhenNothingConsumesRanges) {
  ASSERT_FALSE(profiler_enabled());
  EXPECT_EQ(internal::g_range_consumers.load(), 0);
  RecordFunction rf("nobody_listens");
  EXPECT_FALSE(rf.is_active());
  EXPECT_FALSE(rf.needs_inputs());
  EXPECT_EQ(rf.handle(), 0u);
}

TEST_F(RecordFunctionTest, SessionCountsAsConsumer) {
  enable_profiler();
  EXPECT_EQ(internal::g_range_consumers.load(), 1);
  {
    RecordFunction rf("in_session");
    EXPECT_TRUE(rf.is_active());
  }
  stop_profiler();
  EXPECT_EQ(internal::g_range_consumers.load(), 0);
}

TEST_F(RecordFunctionTest, NestedRangesFormATree) {
  Trace t = record([] {
    FRAMESCOPE_RANGE("outer");
    {
      FRAMESCOPE_RANGE("first");
    }
    {
      FRAMESCOPE_RANGE("second");
      {
        FRAMESCOPE_RANGE("innermost");
      }
    }
  });
  expect_well_formed(t);
  ASSERT_EQ(count_ranges(t), 4u);
  auto outer = find_events(t, "outer");
  auto first = find_events(t, "first");
  auto second = find_events(t, "second");
  auto innermost = find_events(t, "innermost");
  ASSERT_EQ(outer.size(), 1u);
  ASSERT_EQ(first.size(), 1u);
  ASSERT_EQ(second.size(), 1u);
  ASSERT_EQ(innermost.size(), 1u);
  const TraceEvent& o = t.events[outer[0]];
  EXPECT_EQ(o.depth, 0u);
  EXPECT_EQ(o.category, EventCategory::kCpuOp);
  EXPECT_EQ(t.events[first[0]].parent, int64_t(outer[0]));
  EXPECT_EQ(t.events[second[0]].parent, int64_t(outer[0]));
  EXPECT_EQ(t.events[innermost[0]].parent, int64_t(second[0]));
  EXPECT_EQ(t.events[innermost[0]].depth, 2u);
  // siblings in order, not overlapping
  const TraceEvent& f = t.events[first[0]];
  const TraceEvent& s = t.events[second[0]];
  EXPECT_LE(f.start_ns + f.dur_ns, s.start_ns);
  for (const TraceEvent& e : t.events) {
    EXPECT_FALSE(e.async_end);
    EXPECT_FALSE(e.open_at_stop);
  }
}

TEST_F(RecordFunctionTest, ScopesMapToCategoriesAndDynamicNamesAreCopied) {
  Trace t = record([] {
    FRAMESCOPE_USER_RANGE("user");
    std::string dynamic = "dyn_";
    dynamic += std::to_string(42);
    RecordFunction rf(RecordScope::kFunction);
    rf.before(std::string_view(dynamic));
    dynamic.assign("clobbered");  // the range must have copied its name
    rf.end();
    RecordFunction custom(RecordScope::kCustom0);
    custom.before("custom");
  });
  expect_well_formed(t);
  EXPECT_EQ(only_event(t, "user").category, EventCategory::kUserAnnotation);
  EXPECT_EQ(only_event(t, "dyn_42").category, EventCategory::kCpuOp);
  EXPECT_EQ(only_event(t, "custom").category, EventCategory::kOther);
  EXPECT_TRUE(find_events(t, "clobbered").empty());
  EXPECT_EQ(only_event(t, "dyn_42").parent, int64_t(find_events(t, "user")[0]));
}

TEST_F(RecordFunctionTest, SeqNrAndInputsGoToDetails) {
  SessionConfig cfg;
  cfg.record_shapes = true;
  cfg.with_flops = true;
  Trace t = record(
      [] {
        RecordFunction rf;
        EXPECT_TRUE(rf.needs_inputs());
        rf.before("aten::mm",
                  {RangeInput::of_shape({2, 3}, "float"), RangeInput::of_shape({3, 4}),
                   RangeInput::of_int(7)},
                  /*seq_nr=*/11);
        RecordFunction rf2;
        rf2.before("with_seq", /*seq_nr=*/5);
      },
      cfg);
  const TraceEvent& mm = only_event(t, "aten::mm");
  ASSERT_NE(mm.detail, UINT32_MAX);
  const EventDetail& d = t.details[mm.detail];
  EXPECT_EQ(d.seq_nr, 11);
  ASSERT_EQ(d.inputs.size(), 3u);
  EXPECT_EQ(d.inputs[0].kind, RangeInput::Kind::kShape);
  EXPECT_EQ(d.inputs[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(d.inputs[0].text, "float");
  EXPECT_EQ(d.inputs[2].int_value, 7);
  EXPECT_EQ(d.flops, 2 * 2 * 4 * 3);
  const TraceEvent& ws = only_event(t, "with_seq");
  ASSERT_NE(ws.detail, UINT32_MAX);
  EXPECT_EQ(t.details[ws.detail].seq_nr, 5);
  EXPECT_EQ(t.details[ws.detail].handle, 0u);
}

TEST_F(RecordFunctionTest, InputsAreDroppedWithoutRecordShapes) {
  Trace t = record([] {
    RecordFunction rf;
    EXPECT_FALSE(rf.needs_inputs());
    rf.before("op", {RangeInput::of_shape({2, 2})});
  });
  const TraceEvent& op = only_event(t, "op");
  EXPECT_EQ(op.detail, UINT32_MAX);
}

TEST_F(RecordFunctionTest, EndIsIdempotentAndBeforeOnlyStartsOnce) {
  Trace t = record([] {
    RecordFunction rf;
    rf.before("once");
    rf.before("twice");  // ignored: already started
    rf.end();
    rf.end();
    RecordFunction never_started;  // active but never started: records nothing
  });
  EXPECT_EQ(find_events(t, "once").size(), 1u);
  EXPECT_TRUE(find_events(t, "twice").empty());
  EXPECT_EQ(count_ranges(t), 1u);
}

TEST_F(RecordFunctionTest, AsyncEndOnAnotherThread) {
  Trace t = record([] {
    FRAMESCOPE_RANGE("parent");
    auto rf = std::make_unique<RecordFunction>(RecordScope::kUserScope);
    rf->before("async_op");
    uint64_t starter = rf->thread_id();
    EXPECT_EQ(starter, current_thread_id());
    std::thread ender([&] {
      EXPECT_NE(current_thread_id(), starter);
      rf->end();
    });
    ender.join();
    rf.reset();
    FRAMESCOPE_RANGE("after_async");  // a sibling, not a child of the async range
  });
  expect_well_formed(t);
  auto async = find_events(t, "async_op");
  ASSERT_EQ(async.size(), 1u);
  const TraceEvent& a = t.events[async[0]];
  EXPECT_TRUE(a.async_end);
  EXPECT_FALSE(a.open_at_stop);
  EXPECT_GE(a.dur_ns, 0);
  const TraceEvent& parent = only_event(t, "parent");
  EXPECT_EQ(a.thread, parent.thread) << "an async range stays on the thread that started it";
  EXPECT_EQ(a.parent, int64_t(find_events(t, "parent")[0]));
  const TraceEvent& after = only_event(t, "after_async");
  EXPECT_EQ(after.parent, int64_t(find_events(t, "parent")[0]));
  EXPECT_EQ(after.depth, 1u);
}

TEST_F(RecordFunctionTest, AsyncEndAfterTheStartingThreadExited) {
  std::unique_ptr<RecordFunction> rf;
  Trace t = record([&] {
    std::thread starter([&] {
      FRAMESCOPE_RANGE("starter_root");
      rf = std::make_unique<RecordFunction>();
      rf->before("outlives_its_thread");
    });
    starter.join();  // the starting thread is gone
    rf->end();
  });
  rf.reset();
  expect_well_formed(t);
  const TraceEvent& e = only_event(t, "outlives_its_thread");
  EXPECT_TRUE(e.async_end);
  EXPECT_FALSE(e.open_at_stop);
  EXPECT_EQ(e.thread, only_event(t, "starter_root").thread);
}

TEST_F(RecordFunctionTest, SameThreadEndAfterThreadStateChangeIsNotAsync) {
  // Pushing debug info (or installing a ThreadLocalState) mid-range must not turn the range's
  // end on its own thread into an async end.
  struct Info : DebugInfoBase {};
  Trace t = record([] {
    FRAMESCOPE_RANGE("spans_guard");
    DebugInfoGuard guard(DebugInfoKind::kTestInfo, std::make_shared<Info>());
    FRAMESCOPE_RANGE("inside_guard");
  });
  expect_well_formed(t);
  const TraceEvent& outer = only_event(t, "spans_guard");
  EXPECT_FALSE(outer.async_end);
  EXPECT_FALSE(outer.open_at_stop);
  const TraceEvent& inner = only_event(t, "inside_guard");
  EXPECT_FALSE(inner.async_end);
  EXPECT_EQ(inner.parent, int64_t(find_events(t, "spans_guard")[0]));
}

TEST_F(RecordFunctionTest, RangeStillOpenAtStopIsClosedAtStop) {
  enable_profiler();
  auto rf = std::make_unique<RecordFunction>();
  rf->before("left_open");
  Trace t = stop_profiler();
  rf.reset();  // ends after the session: nothing recorded, no crash
  const TraceEvent& e = only_event(t, "left_open");
  EXPECT_TRUE(e.open_at_stop);
  EXPECT_EQ(e.start_ns + e.dur_ns, t.stop_ns);
}

TEST_F(RecordFunctionTest, RangeSpanningTwoSessionsDoesNotLeakIntoTheSecond) {
  enable_profiler();
  auto rf = std::make_unique<RecordFunction>();
  rf->before("from_first");
  Trace first = stop_profiler();
  enable_profiler();
  {
    FRAMESCOPE_RANGE("in_second");  // re-attaches this thread to the new session
  }
  rf.reset();  // must not touch the first session's (released) buffer
  Trace second = stop_profiler();
  EXPECT_EQ(find_events(first, "from_first").size(), 1u);
  EXPECT_TRUE(find_events(second, "from_first").empty());
  EXPECT_EQ(find_events(second, "in_second").size(), 1u);
  expect_well_formed(second);
}

TEST_F(RecordFunctionTest, RangeStartedBeforeSessionIsNotRecorded) {
  auto rf = std::make_unique<RecordFunction>("before_session");
  EXPECT_FALSE(rf->is_active());
  enable_profiler();
  rf.reset();
  Trace t = stop_profiler();
  EXPECT_TRUE(find_events(t, "before_session").empty());
  EXPECT_EQ(count_ranges(t), 0u);
}

TEST_F(RecordFunctionTest, ManyRangesSpanSeveralChunks) {
  constexpr int kN = 50000;  // 100k events: several 16k-event chunks
  Trace t = record([] {
    FRAMESCOPE_RANGE("root");
    for (int i = 0; i < kN; ++i) {
      FRAMESCOPE_RANGE("leaf");
    }
  });
  expect_well_formed(t);
  EXPECT_EQ(t.dropped_events, 0u);
  auto leaves = find_events(t, "leaf");
  ASSERT_EQ(leaves.size(), size_t(kN));
  int64_t root = int64_t(find_events(t, "root")[0]);
  for (size_t i : leaves) ASSERT_EQ(t.events[i].parent, root);
  EXPECT_GE(t.recorded_events, uint64_t(2 * kN + 2));
}

TEST_F(RecordFunctionTest, ThreadsRecordConcurrentlyOnTheirOwnThreads) {
  constexpr int kThreads = 4;
  constexpr int kRanges = 2000;
  Trace t = record([] {
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([] {
        for (int j = 0; j < kRanges; ++j) {
          FRAMESCOPE_RANGE("worker_outer");
          FRAMESCOPE_RANGE("worker_inner");
        }
      });
    }
    for (auto& th : threads) th.join();
  });
  expect_well_formed(t);
  auto outer = find_events(t, "worker_outer");
  auto inner = find_events(t, "worker_inner");
  ASSERT_EQ(outer.size(), size_t(kThreads * kRanges));
  ASSERT_EQ(inner.size(), size_t(kThreads * kRanges));
  for (size_t i : inner) {
    const TraceEvent& e = t.events[i];
    ASSERT_GE(e.parent, 0);
    EXPECT_EQ(name_of(t, t.events[size_t(e.parent)]), "worker_outer");
  }
  std::set<uint32_t> thread_ids;
  for (size_t i : outer) thread_ids.insert(t.events[i].thread);
  EXPECT_EQ(thread_ids.size(), size_t(kThreads));
  std::set<uint64_t> os_tids;
  for (uint32_t th : thread_ids) os_tids.insert(t.threads[th].os_tid);
  EXPECT_EQ(os_tids.size(), size_t(kThreads));
}

TEST_F(RecordFunctionTest, ThreadIdsAreStablePerThreadAndDistinct) {
  uint64_t mine = current_thread_id();
  EXPECT_NE(mine, 0u);
  EXPECT_EQ(current_thread_id(), mine);
  uint64_t other = 0;
  std::thread th([&] { other = current_thread_id(); });
  th.join();
  EXPECT_NE(other, 0u);
  EXPECT_NE(other, mine);
}

}  // namespace
}  // namespace framescope_test
