// tests/native/snapshot_test.cpp: copies of a running session (the flight recorder's dump).
#include <thread>

#include "chunk_pool.h"
#include "framescope/stored_trace.h"
#include "test_support.h"

namespace framescope_test {
namespace {

class SnapshotTest : public CoreTest {};

size_t count_named(const Trace& t, const std::string& name) {
  size_t n = 0;
  for (const TraceEvent& e : t.events) n += t.symbols[e.symbol].name == name;
  return n;
}

TEST_F(SnapshotTest, CopiesWhatWasRecordedAndTheSessionGoesOn) {
  EXPECT_THROW(snapshot_profiler(), SessionError);
  enable_profiler();
  {
    ScopedRange a("before");
  }
  Trace snap;
  {
    ScopedRange open_range("open");
    snap = materialize(StoredTrace::from_raw(std::move(*snapshot_profiler())));
    EXPECT_TRUE(profiler_enabled());
    ScopedRange b("after");
  }
  const Trace full = materialize(StoredTrace::from_raw(std::move(*disable_profiler())));
  EXPECT_EQ(count_named(snap, "before"), 1u);
  EXPECT_EQ(count_named(snap, "after"), 0u);
  ASSERT_EQ(count_named(snap, "open"), 1u);
  for (const TraceEvent& e : snap.events) {
    if (snap.symbols[e.symbol].name == "open") {
      EXPECT_TRUE(e.open_at_stop);
    }
  }
  EXPECT_EQ(count_named(full, "before"), 1u);
  EXPECT_EQ(count_named(full, "after"), 1u);
  EXPECT_EQ(count_named(full, "open"), 1u);
}

TEST_F(SnapshotTest, KeepNewestGivesALateThreadAChunkBeyondTheLimit) {
  SessionConfig c;
  c.on_limit = LimitPolicy::kKeepNewest;
  c.memory_limit_bytes = 2 * internal::ChunkPool::kChunkBytes;
  enable_profiler(c);
  for (size_t i = 0; i < 4 * internal::ChunkPool::kChunkEvents; ++i) {
    ScopedRange r("filler");  // the main thread alone fills the limit and recycles
  }
  std::thread late([] { ScopedRange r("late_thread"); });
  late.join();
  const Trace snap = materialize(StoredTrace::from_raw(std::move(*snapshot_profiler())));
  const Trace full = materialize(StoredTrace::from_raw(std::move(*disable_profiler())));
  EXPECT_EQ(count_named(snap, "late_thread"), 1u);
  EXPECT_EQ(count_named(full, "late_thread"), 1u);
  EXPECT_GT(full.dropped_events, 0u);
  EXPECT_LT(count_named(full, "filler"), 4 * internal::ChunkPool::kChunkEvents);
}

}  // namespace
}  // namespace framescope_test
