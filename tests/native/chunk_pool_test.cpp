// tests/native/chunk_pool_test.cpp: the chunk pool's refill thread maps chunks ahead of the
// threads that record, runs only while a session does, and never in a fork child.
#include <dirent.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "chunk_pool.h"
#include "test_support.h"

namespace framescope_test {
namespace {

using internal::ChunkPool;
using internal::RawEvent;

class ChunkPoolTest : public CoreTest {};

// Threads of this process now named "framescope-pool" (/proc/self/task/*/comm). Counted by name:
// a sanitizer may start threads of its own (TSan's background thread).
int refill_threads() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  if (!d) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string name;
    std::getline(comm, name);
    if (name == "framescope-pool") ++n;
  }
  closedir(d);
  return n;
}

SessionConfig without_sampler() {
  SessionConfig cfg;
  cfg.cpu_sample_period_ns = 0;  // its thread would be counted too
  return cfg;
}

// Takes `n` full chunks one at a time, letting the refill thread catch up after each (as it does
// while a thread fills a chunk). Returns false when it did not within 10 s.
bool take_chunks_with_refills(std::vector<RawEvent*>& taken, size_t n) {
  ChunkPool& pool = ChunkPool::instance();
  for (size_t i = 0; i < n; ++i) {
    RawEvent* c = pool.acquire();
    if (!c) return false;
    taken.push_back(c);
    if (!pool.wait_until_refilled(10000)) return false;
  }
  return true;
}

TEST_F(ChunkPoolTest, RefillThreadMapsChunksAheadWhileASessionRuns) {
  ChunkPool& pool = ChunkPool::instance();
  enable_profiler(without_sampler());
  const ChunkPool::Stats before = pool.stats();
  EXPECT_GE(before.free_chunks, (SessionConfig{}.prefault_bytes) / ChunkPool::kChunkBytes);
  std::vector<RawEvent*> taken;
  // More than the pool held: every chunk beyond it was mapped by the refill thread.
  const size_t n = before.free_chunks + 3 * ChunkPool::kRefillToChunks;
  ASSERT_TRUE(take_chunks_with_refills(taken, n));
  const ChunkPool::Stats after = pool.stats();
  EXPECT_EQ(after.mapped_on_demand, before.mapped_on_demand) << "a taker mapped a chunk itself";
  EXPECT_GE(after.mapped_ahead, before.mapped_ahead + 3 * ChunkPool::kRefillToChunks);
  EXPECT_GE(after.free_chunks, ChunkPool::kRefillBelowChunks);
  // The chunks are mapped and writable end to end.
  for (RawEvent* c : taken) {
    c[0] = RawEvent{};
    c[ChunkPool::kChunkEvents - 1] = RawEvent{};
  }
  disable_profiler();
  for (RawEvent* c : taken) pool.release(c);
}

TEST_F(ChunkPoolTest, MapsNoMoreAheadThanTheTakerMayStillTake) {
  ChunkPool& pool = ChunkPool::instance();
  enable_profiler(without_sampler());
  std::vector<RawEvent*> taken;
  // Every free chunk taken by a taker with no room left: nothing is mapped ahead for it.
  while (pool.stats().free_chunks > 0) taken.push_back(pool.acquire(ChunkPool::kChunkEvents, 0));
  ASSERT_TRUE(pool.wait_until_refilled(0));
  EXPECT_EQ(pool.stats().free_chunks, 0u);
  // Room for three more chunks: three are mapped ahead, not kRefillToChunks.
  taken.push_back(pool.acquire(ChunkPool::kChunkEvents, 3 * ChunkPool::kChunkBytes));
  ASSERT_TRUE(pool.wait_until_refilled(10000));
  EXPECT_EQ(pool.stats().free_chunks, 3u);
  for (int i = 0; i < 3; ++i) taken.push_back(pool.acquire(ChunkPool::kChunkEvents, 0));
  ASSERT_TRUE(pool.wait_until_refilled(10000));
  EXPECT_EQ(pool.stats().free_chunks, 0u);
  // Room without end: kRefillToChunks.
  taken.push_back(pool.acquire());
  ASSERT_TRUE(pool.wait_until_refilled(10000));
  EXPECT_EQ(pool.stats().free_chunks, ChunkPool::kRefillToChunks);
  disable_profiler();
  for (RawEvent* c : taken) {
    ASSERT_NE(c, nullptr);
    pool.release(c);
  }
}

TEST_F(ChunkPoolTest, ASessionMapsNoChunkBeyondItsMemoryLimit) {
  ChunkPool& pool = ChunkPool::instance();
  std::vector<RawEvent*> taken;
  while (pool.stats().free_chunks > 0) taken.push_back(pool.acquire());
  const ChunkPool::Stats before = pool.stats();
  SessionConfig cfg = without_sampler();
  cfg.memory_limit_bytes = 2 * ChunkPool::kChunkBytes;
  enable_profiler(cfg);
  // The start faults in two chunks (the limit), not prefault_bytes' 8 MiB.
  EXPECT_EQ(pool.stats().free_chunks, 2u);
  // Recorded to the limit: the thread's small chunks (4, 16, 64 KiB), then one full chunk, then
  // smaller ones; with less than a chunk of room left, nothing is mapped ahead.
  for (int i = 0; i < 100000; ++i) {
    FRAMESCOPE_RANGE("r");
  }
  ASSERT_TRUE(pool.wait_until_refilled(10000));
  const ChunkPool::Stats after = pool.stats();
  EXPECT_EQ(after.mapped_ahead - before.mapped_ahead, 2u);
  EXPECT_EQ(after.mapped_on_demand, before.mapped_on_demand);
  EXPECT_EQ(after.free_chunks, 1u);
  Trace t = stop_profiler();
  EXPECT_GT(t.dropped_events, 0u) << "the limit was reached";
  for (RawEvent* c : taken) pool.release(c);
}

TEST_F(ChunkPoolTest, NoThreadOutlivesTheSession) {
  ASSERT_EQ(refill_threads(), 0);
  enable_profiler(without_sampler());
  EXPECT_EQ(refill_threads(), 1);
  {
    FRAMESCOPE_RANGE("work");
  }
  Trace t = stop_profiler();
  EXPECT_EQ(refill_threads(), 0);
  EXPECT_EQ(find_events(t, "work").size(), 1u);
}

TEST_F(ChunkPoolTest, BetweenSessionsChunksAreMappedOnDemand) {
  ChunkPool& pool = ChunkPool::instance();
  std::vector<RawEvent*> taken;
  const ChunkPool::Stats before = pool.stats();
  const size_t n = before.free_chunks + 2;
  for (size_t i = 0; i < n; ++i) taken.push_back(pool.acquire());
  for (RawEvent* c : taken) ASSERT_NE(c, nullptr);
  EXPECT_TRUE(pool.wait_until_refilled(0)) << "no refill is asked for without a session";
  EXPECT_EQ(pool.stats().mapped_on_demand, before.mapped_on_demand + 2);
  for (RawEvent* c : taken) pool.release(c);
}

TEST_F(ChunkPoolTest, AForkChildMapsItsChunksOnDemandWithoutAThread) {
  enable_profiler(without_sampler());
  ASSERT_EQ(refill_threads(), 1);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: only the forking thread, and no refill thread is started, for the session that
    // goes on nor for a new one. No gtest macros (not fork-safe): exit codes say what failed.
    ChunkPool& pool = ChunkPool::instance();
    if (refill_threads() != 0) _exit(10);
    if (pool.stats().mapped_ahead != 0 || pool.stats().mapped_on_demand != 0) _exit(11);
    std::vector<RawEvent*> taken;
    const size_t n = pool.stats().free_chunks + 3;
    for (size_t i = 0; i < n; ++i) taken.push_back(pool.acquire());
    for (RawEvent* c : taken) {
      if (!c) _exit(12);
    }
    if (!pool.wait_until_refilled(0)) _exit(13);  // nothing was asked of a thread
    if (pool.stats().mapped_on_demand != 3) _exit(14);
    if (refill_threads() != 0) _exit(15);
    stop_profiler();
    enable_profiler(without_sampler());
    {
      FRAMESCOPE_RANGE("second_child_session");
    }
    if (refill_threads() != 0) _exit(16);
    Trace t = stop_profiler();
    if (find_events(t, "second_child_session").size() != 1) _exit(17);
    for (RawEvent* c : taken) pool.release(c);
    _exit(0);
  }
  EXPECT_EQ(wait_child(pid, 60), 0) << "-1: the fork child hung; else its failed check";
  EXPECT_EQ(refill_threads(), 1) << "the parent's refill thread still runs";
  // ... and still maps ahead.
  std::vector<RawEvent*> taken;
  ASSERT_TRUE(take_chunks_with_refills(taken, ChunkPool::instance().stats().free_chunks + 2));
  disable_profiler();
  for (RawEvent* c : taken) ChunkPool::instance().release(c);
}

}  // namespace
}  // namespace framescope_test
