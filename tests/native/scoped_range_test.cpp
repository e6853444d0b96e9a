// tests/native/scoped_range_test.cpp: ScopedRange (FRAMESCOPE_RANGE): its modes and the cases
// where its inline end cannot be used (a changed thread slot, a session change mid-scope).
#include <memory>
#include <string>
#include <vector>

#include "chunk_pool.h"
#include "test_support.h"

namespace framescope_test {
namespace {

class ScopedRangeTest : public CoreTest {};

CallbackHandle add_name_recorder(std::vector<std::string>* names, RecordScope only) {
  return add_global_callback(
      RecordFunctionCallback([names](const RecordFunction& rf) -> std::unique_ptr<ObserverContext> {
        names->emplace_back(rf.name());
        return nullptr;
      }).scopes({only}));
}

TEST_F(ScopedRangeTest, InertWithoutConsumersActiveWithASession) {
  {
    ScopedRange r("nobody");
    EXPECT_FALSE(r.is_active());
  }
  enable_profiler();
  {
    ScopedRange r("recorded");
    EXPECT_TRUE(r.is_active());
  }
  Trace t = stop_profiler();
  EXPECT_EQ(find_events(t, "recorded").size(), 1u);
  EXPECT_TRUE(find_events(t, "nobody").empty());
}

TEST_F(ScopedRangeTest, ObservedRangeRunsCallbacksAndIsRecorded) {
  std::vector<std::string> names;
  CallbackHandle h = add_name_recorder(&names, RecordScope::kUserScope);
  Trace t = record([] {
    ScopedRange user("observed_user", RecordScope::kUserScope);
    EXPECT_TRUE(user.is_active());
    FRAMESCOPE_RANGE("function_scope");  // recorded, not observed (scope filter)
  });
  remove_callback(h);
  EXPECT_EQ(names, std::vector<std::string>{"observed_user"});
  expect_well_formed(t);
  EXPECT_EQ(only_event(t, "function_scope").parent, int64_t(find_events(t, "observed_user")[0]));
}

TEST_F(ScopedRangeTest, FilteredOutWithoutSessionIsInert) {
  std::vector<std::string> names;
  CallbackHandle h = add_name_recorder(&names, RecordScope::kUserScope);
  {
    ScopedRange r("wrong_scope", RecordScope::kFunction);
    EXPECT_FALSE(r.is_active()) << "no session and no observer wants kFunction";
  }
  remove_callback(h);
  EXPECT_TRUE(names.empty());
}

TEST_F(ScopedRangeTest, ScopeSpanningARestartEndsOnlyInTheFirstSession) {
  Trace first, second;
  enable_profiler();
  {
    FRAMESCOPE_RANGE("spans_restart");
    first = stop_profiler();
    enable_profiler();
    {
      FRAMESCOPE_RANGE("in_second");
    }
  }  // the end belongs to the stopped session: dropped, the second session's buffer untouched
  second = stop_profiler();
  EXPECT_TRUE(only_event(first, "spans_restart").open_at_stop);
  EXPECT_TRUE(find_events(second, "spans_restart").empty());
  EXPECT_EQ(find_events(second, "in_second").size(), 1u);
  expect_well_formed(second);
  for (const TraceEvent& e : second.events) EXPECT_FALSE(e.open_at_stop);
}

TEST_F(ScopedRangeTest, EndAfterTheSlotWasInvalidatedStillLandsInItsSession) {
  Trace t = record([] {
    FRAMESCOPE_RANGE("slot_moved");
    internal::invalidate_thread_slot();  // what a ThreadLocalStateGuard does to this thread
  });
  expect_well_formed(t);
  const TraceEvent& e = only_event(t, "slot_moved");
  EXPECT_FALSE(e.open_at_stop);
  EXPECT_FALSE(e.async_end);
}

TEST_F(ScopedRangeTest, BeginDroppedAtTheLimitRecordsNoEnd) {
  SessionConfig cfg;
  cfg.memory_limit_bytes = internal::ChunkPool::kChunkBytes;  // one chunk, then stop recording
  size_t inert = 0;
  Trace t = record(
      [&] {
        for (size_t i = 0; i < 2 * internal::ChunkPool::kChunkEvents; ++i) {
          ScopedRange r("flood");
          inert += r.is_active() ? 0 : 1;
        }
      },
      cfg);
  EXPECT_GT(inert, 0u) << "once the buffer is full, begins are dropped and ranges stay inert";
  expect_well_formed(t);
  EXPECT_GT(t.dropped_events, 0u);
}

}  // namespace
}  // namespace framescope_test
