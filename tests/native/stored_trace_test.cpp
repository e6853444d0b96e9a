// tests/native/stored_trace_test.cpp: StoredTrace: the replay's contract, the stepped replay
// (ReplayCursor), the .fstrace form (serialize, deserialize, load), merging, bad files.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "framescope/key_averages.h"
#include "trace_part.h"
#include "trace_workload.h"

namespace framescope_test {
namespace {

class StoredTraceTest : public CoreTest {
 protected:
  void SetUp() override { stored_ = StoredTrace::from_raw(std::move(*record_workload(200))); }
  std::string temp_path(const char* name) {
    return ::testing::TempDir() + "/fs_stored_" + std::to_string(getpid()) + "_" + name;
  }
  StoredTrace stored_;
};

// The order rules of trace_visitor.h, checked on a real recording.
TEST_F(StoredTraceTest, ReplayFollowsTheVisitorContract) {
  struct Checker final : TraceVisitor {
    int traces = 0, open_threads = 0;
    uint64_t next_index = 0, reported = 0;
    std::map<uint64_t, Slice> open;
    std::vector<uint32_t> threads;
    void begin_trace(const TraceView&) override { ++traces; }
    void begin_thread(uint32_t t) override {
      EXPECT_EQ(open_threads++, 0);
      threads.push_back(t);
    }
    void slice_begin(const Slice& s) override {
      take(s);
      EXPECT_EQ(s.dur_ns, 0);
      if (s.parent >= 0) {
        EXPECT_TRUE(open.count(uint64_t(s.parent))) << s.index;
      }
      EXPECT_EQ(s.depth, open.size());
      open[s.index] = s;
    }
    void slice_end(const Slice& s) override {
      ASSERT_TRUE(open.count(s.index));
      EXPECT_EQ(open[s.index].start_ns, s.start_ns);
      EXPECT_GE(s.dur_ns, 0);
      open.erase(s.index);
    }
    void instant(const Slice& s) override {
      take(s);
      EXPECT_EQ(s.dur_ns, -1);
    }
    void async_slice(const Slice& s) override {
      take(s);
      EXPECT_TRUE(s.async_end);
    }
    void end_thread(uint32_t t) override {
      EXPECT_EQ(--open_threads, 0);
      EXPECT_EQ(threads.back(), t);
      EXPECT_TRUE(open.empty());
    }
    void take(const Slice& s) {
      EXPECT_EQ(s.index, next_index++);
      ++reported;
    }
  } c;
  stored_.visit(c);
  EXPECT_EQ(c.traces, 1);
  EXPECT_EQ(c.threads.size(), 3u);
  EXPECT_EQ(c.reported, stored_.event_count());
  Trace t = materialize(stored_);
  expect_well_formed(t);
  EXPECT_EQ(find_events(t, "outer").size(), 600u);
  EXPECT_EQ(find_events(t, "inner").size(), 600u);
  EXPECT_EQ(find_events(t, "dyn2-3").size(), 40u);
  EXPECT_EQ(find_events(t, "mark0").size(), 3u * 7);
  EXPECT_EQ(t.memory.size(), 3u * 8);
  const TraceEvent& async = only_event(t, "ended elsewhere");
  EXPECT_TRUE(async.async_end);
  // Inputs came through with their ranges.
  const TraceEvent& dyn = t.events[find_events(t, "dyn0-4")[0]];
  ASSERT_NE(dyn.detail, UINT32_MAX);
  ASSERT_EQ(t.details[dyn.detail].inputs.size(), 2u);
  EXPECT_EQ(t.details[dyn.detail].inputs[0].shape, (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(t.details[dyn.detail].inputs[1].int_value, 4);
}

TEST_F(StoredTraceTest, CursorReplaysExactlyWhatVisitDoes) {
  const std::vector<std::string> whole = replay_log(stored_);
  for (uint64_t budget : {uint64_t(1), uint64_t(3), uint64_t(64), uint64_t(1) << 40}) {
    LogVisitor v;
    ReplayCursor cursor(stored_, v);
    int steps = 0;
    while (cursor.advance(budget)) ++steps;
    EXPECT_FALSE(cursor.advance(budget));  // done stays done
    EXPECT_EQ(v.log, whole) << "budget " << budget;
    if (budget == 1) {
      EXPECT_GT(steps, 1000);
    }
  }
}

TEST_F(StoredTraceTest, CursorIsDoneAfterTheVisitorThrows) {
  struct Thrower final : TraceVisitor {
    int n = 0;
    void slice_begin(const Slice&) override {
      if (++n == 10) throw std::runtime_error("visitor failed");
    }
  } v;
  ReplayCursor cursor(stored_, v);
  EXPECT_THROW(
      {
        while (cursor.advance(4)) {
        }
      },
      std::runtime_error);
  EXPECT_FALSE(cursor.advance(4));
  EXPECT_EQ(v.n, 10);
  Thrower again;
  EXPECT_THROW(stored_.visit(again), std::runtime_error);
}

TEST_F(StoredTraceTest, SerializedFormReplaysTheSame) {
  const std::vector<std::string> whole = replay_log(stored_);
  const std::string bytes = stored_.serialize();
  EXPECT_EQ(replay_log(StoredTrace::deserialize(bytes)), whole);
  // In place: the slots are read from the buffer itself.
  auto owned = std::make_shared<std::string>(bytes);
  StoredTrace in_place = StoredTrace::deserialize(*owned, owned);
  EXPECT_EQ(replay_log(in_place), whole);
  EXPECT_EQ(in_place.recorded_events(), stored_.recorded_events());
  const std::string path = temp_path("roundtrip.fstrace");
  {
    auto sink = open_file_output(path);
    stored_.serialize(*sink);
    sink->commit();
  }
  EXPECT_EQ(replay_log(StoredTrace::load(path)), whole);
  // Serializing a loaded trace gives the same bytes.
  EXPECT_TRUE(StoredTrace::load(path).serialize() == bytes);
  std::remove(path.c_str());
}

TEST_F(StoredTraceTest, LoadErrorsNameThePath) {
  try {
    StoredTrace::load("/nonexistent-dir/x.fstrace");
    FAIL() << "no error";
  } catch (const OutputError& e) {
    EXPECT_EQ(e.error_code(), ENOENT);
    EXPECT_EQ(e.path(), "/nonexistent-dir/x.fstrace");
  }
  const std::string path = temp_path("garbage.fstrace");
  std::ofstream(path) << "not a trace at all, just some text";
  EXPECT_THROW(StoredTrace::load(path), TraceFormatError);
  std::ofstream(path, std::ios::trunc).close();  // empty
  EXPECT_THROW(StoredTrace::load(path), TraceFormatError);
  std::remove(path.c_str());
  EXPECT_THROW(StoredTrace::load(std::string("a\0b", 3)), std::invalid_argument);
}

// A loaded file truncated under its mapping (issue 31): a read of the slots past the new end
// does not die of SIGBUS (the guard maps zeros there), and every reader then says what happened.
TEST_F(StoredTraceTest, LoadedFileTruncatedUnderTheMapping) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizers own SIGBUS (and keep a handler installed later from running).
  GTEST_SKIP() << "SIGBUS is the sanitizer's";
#endif
  const std::string path = temp_path("truncated.fstrace");
  {
    auto sink = open_file_output(path);
    stored_.serialize(*sink);
    sink->commit();
  }
  StoredTrace loaded = StoredTrace::load(path);
  EXPECT_NO_THROW(loaded.check_files());
  ASSERT_EQ(::truncate(path.c_str(), 0), 0);
  // Read every slot directly, as a replay between its checks would.
  uint64_t sum = 0;
  for (const auto& ref : loaded.parts()) {
    for (const auto& th : ref.part->threads) {
      for (const auto& run : th.runs) {
        for (uint64_t i = 0; i < run.count; ++i) sum += run.slots[i].word;
      }
    }
  }
  EXPECT_EQ(sum, 0u) << "the truncated pages read as zeros";
  EXPECT_THROW(loaded.check_files(), OutputError);
  EXPECT_THROW(replay_log(loaded), OutputError);
  EXPECT_THROW(loaded.serialize(), OutputError);
  std::remove(path.c_str());
}

TEST_F(StoredTraceTest, LoadedFileRewrittenInPlaceOrReplaced) {
  const std::string path = temp_path("rewritten.fstrace");
  const std::string bytes = stored_.serialize();
  std::ofstream(path, std::ios::binary) << bytes;
  StoredTrace loaded = StoredTrace::load(path);
  const std::vector<std::string> whole = replay_log(loaded);
  // Replaced by a rename: the mapping keeps the old file's bytes.
  const std::string other = temp_path("other.fstrace");
  std::ofstream(other, std::ios::binary)
      << StoredTrace::from_raw(std::move(*record_workload(3))).serialize();
  ASSERT_EQ(std::rename(other.c_str(), path.c_str()), 0);
  EXPECT_EQ(replay_log(loaded), whole);
  // Rewritten in place (same inode): an error, not the other file's events.
  StoredTrace again = StoredTrace::load(path);
  usleep(20000);  // a later modification time on file systems with coarse timestamps
  std::ofstream(path, std::ios::binary | std::ios::in | std::ios::out) << "FSTRACE2";
  EXPECT_THROW(replay_log(again), OutputError);
  std::remove(path.c_str());
}

TEST_F(StoredTraceTest, LoadRefusesADirectoryAndReadsAPipe) {
  try {
    StoredTrace::load(::testing::TempDir());
    FAIL() << "no error";
  } catch (const OutputError& e) {
    EXPECT_EQ(e.error_code(), EISDIR);
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos) << e.what();
  }
  const std::string bytes = stored_.serialize();
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::thread writer([&] {
    size_t off = 0;
    while (off < bytes.size()) {
      const ssize_t n = ::write(fds[1], bytes.data() + off, bytes.size() - off);
      if (n <= 0) break;
      off += size_t(n);
    }
    ::close(fds[1]);
  });
  StoredTrace piped = StoredTrace::load("/proc/self/fd/" + std::to_string(fds[0]));
  writer.join();
  ::close(fds[0]);
  EXPECT_EQ(replay_log(piped), replay_log(stored_));
}

TEST_F(StoredTraceTest, TruncatedAndMutatedFilesFailCleanly) {
  const std::string bytes = stored_.serialize();
  // Every truncation that cuts a record fails; none crashes (sanitizers watch the reads).
  for (size_t n = 0; n < bytes.size(); n += 1 + n / 7) {
    EXPECT_THROW(StoredTrace::deserialize(bytes.substr(0, n)), TraceFormatError) << n;
  }
  std::mt19937 rng(7);
  int accepted = 0;
  for (int round = 0; round < 300; ++round) {
    std::string m = bytes;
    for (int k = 0; k < 4; ++k) m[rng() % m.size()] = char(rng());
    try {
      StoredTrace t = StoredTrace::deserialize(m);
      // Whatever was accepted replays and materializes within its tables.
      Trace mt = materialize(t);
      for (const TraceEvent& e : mt.events) {
        ASSERT_LT(e.symbol, mt.symbols.size());
        ASSERT_LT(e.thread, mt.threads.size());
        if (e.detail != UINT32_MAX) {
          ASSERT_LT(e.detail, mt.details.size());
        }
      }
      ++accepted;
    } catch (const TraceFormatError&) {
    }
  }
  EXPECT_GT(accepted, 0);  // most flips land in slots, which any value may fill
}

TEST_F(StoredTraceTest, MergedTracesKeepBothPartsShiftedByTheOffset) {
  StoredTrace other = StoredTrace::from_raw(std::move(*record_workload(50)));
  const int64_t offset = 1000000000;
  StoredTrace merged = stored_.merged(other, offset);
  EXPECT_EQ(merged.event_count(), stored_.event_count() + other.event_count());
  EXPECT_EQ(merged.threads().size(), 6u);
  Trace a = materialize(stored_), b = materialize(other), m = materialize(merged);
  expect_well_formed(m);
  EXPECT_EQ(m.events[a.events.size()].start_ns, b.events[0].start_ns + offset);
  EXPECT_EQ(find_events(m, "outer").size(), 600u + 150u);
  // Parts are shared, not copied: the original is unchanged.
  EXPECT_EQ(stored_.event_count(), a.events.size());
  // Offsets that would overflow are clamped, never wrapped.
  StoredTrace far = merged.merged(other, INT64_MAX).merged(other, INT64_MAX);
  for (const TraceEvent& e : materialize(far).events) {
    EXPECT_LE(e.start_ns, kMaxReportedTimeNs);
    EXPECT_GE(e.start_ns, -kMaxReportedTimeNs);
  }
}

TEST_F(StoredTraceTest, ConcurrentReadersSeeTheSameReplay) {
  const std::vector<std::string> whole = replay_log(stored_);
  std::vector<std::thread> readers;
  std::atomic<int> same{0};
  for (int i = 0; i < 4; ++i) {
    readers.emplace_back([&] {
      for (int k = 0; k < 5; ++k) same += replay_log(stored_) == whole;
    });
  }
  for (auto& r : readers) r.join();
  EXPECT_EQ(same.load(), 20);
}

TEST_F(StoredTraceTest, StatsMatchTheMaterializedTrace) {
  const Trace t = materialize(stored_);
  std::vector<SymbolStats> a = compute_stats(stored_, stored_.symbols().size());
  std::vector<SymbolStats> b = compute_stats(MaterializedSource(t), t.symbols.size());
  ASSERT_EQ(a.size(), b.size());
  std::map<uint32_t, SymbolStats> by;
  for (const SymbolStats& s : b) by[s.symbol] = s;
  for (const SymbolStats& s : a) {
    EXPECT_EQ(s.calls, by[s.symbol].calls) << stored_.symbols()[s.symbol].name;
    EXPECT_EQ(s.total_ns, by[s.symbol].total_ns);
    EXPECT_EQ(s.self_ns, by[s.symbol].self_ns);
  }
}

}  // namespace
}  // namespace framescope_test
