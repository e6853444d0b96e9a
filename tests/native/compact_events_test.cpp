// tests/native/compact_events_test.cpp: 8-byte compact Python events: pairing, interleaving
// with ordinary events, bases across chunks and long gaps, limits, concurrent snapshots, replay.
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "chunk_pool.h"
#include "framescope/internal/thread_buffer.h"
#include "session_impl.h"
#include "test_support.h"

namespace framescope_test {
namespace {

using internal::ChunkPool;
using internal::ThreadBuffer;

class CompactEventsTest : public CoreTest {};

struct Recorder {
  ThreadBuffer* buffer = nullptr;
  uint64_t epoch = 0;
  std::vector<uint64_t> bits;  // compact call bits per fake function

  Recorder() {
    buffer = internal::current_buffer();
    epoch = internal::g_session_epoch.load();
  }
  uint64_t call_bits(size_t f) {
    while (bits.size() <= f) {
      uint32_t index = internal::register_compact_key(epoch, kKeyBase + bits.size());
      EXPECT_NE(index, internal::kNoCompactIndex);
      bits.push_back(internal::compact_call_bits(index));
    }
    return bits[f];
  }
  void call(size_t f, uint64_t ticks) { buffer->append_compact(ticks, call_bits(f)); }
  void ret(uint64_t ticks) { buffer->append_compact(ticks, internal::kCompactReturnBits); }
};

Trace stop_with_fake_keys() { return replay(*disable_profiler(), fake_python_resolver()); }

SessionConfig no_marks() {
  SessionConfig cfg;
  cfg.start_stop_marks = false;
  return cfg;
}

std::vector<std::string> names_in_order(const Trace& t) {
  std::vector<std::string> out;
  for (const TraceEvent& e : t.events) out.emplace_back(name_of(t, e));
  return out;
}

TEST_F(CompactEventsTest, CallsAndReturnsReplayIntoATreeAtEightBytesEach) {
  enable_profiler(no_marks());
  Recorder r;
  ASSERT_NE(r.buffer, nullptr);
  const uint64_t t0 = now_ticks();
  r.call(0, t0 + 10);  // f0
  r.call(1, t0 + 20);  //   f1
  r.ret(t0 + 30);
  r.call(2, t0 + 40);  //   f2: its pair slot stays half full until the return
  r.ret(t0 + 50);
  r.ret(t0 + 60);
  RawTracePtr raw = disable_profiler();
  RawTraceStats stats = raw_trace_stats(*raw);
  Trace t = replay(*raw, fake_python_resolver());
  expect_well_formed(t);
  ASSERT_EQ(names_in_order(t), (std::vector<std::string>{"f0", "f1", "f2"}));
  EXPECT_EQ(t.events[1].parent, 0);
  EXPECT_EQ(t.events[2].parent, 0);
  for (const TraceEvent& e : t.events) {
    EXPECT_FALSE(e.open_at_stop);
    EXPECT_EQ(e.category, EventCategory::kPythonFunction);
  }
  EXPECT_EQ(t.events[0].start_ns, raw->clock.to_ns(t0 + 10));
  EXPECT_EQ(t.events[0].dur_ns, raw->clock.to_ns(t0 + 60) - raw->clock.to_ns(t0 + 10));
  EXPECT_EQ(t.events[2].dur_ns, raw->clock.to_ns(t0 + 50) - raw->clock.to_ns(t0 + 40));
  // six events in three pair slots, after one base slot
  EXPECT_EQ(stats.events, 6u);
  EXPECT_EQ(stats.bytes, 4 * sizeof(internal::RawEvent));
  EXPECT_EQ(t.recorded_events, 6u);
}

TEST_F(CompactEventsTest, OrdinaryEventsCloseThePairAndKeepTheOrder) {
  enable_profiler(no_marks());
  Recorder r;
  r.call(0, now_ticks());  // f0
  {
    FRAMESCOPE_RANGE("range_in_f0");  // an ordinary slot right after f0's half-full pair
    r.call(1, now_ticks());           // f1: a new pair, not f0's second half
    r.ret(now_ticks());
  }
  mark("after_range");
  r.ret(now_ticks());
  Trace t = stop_with_fake_keys();
  expect_well_formed(t);
  ASSERT_EQ(names_in_order(t),
            (std::vector<std::string>{"f0", "range_in_f0", "f1", "after_range"}));
  EXPECT_EQ(t.events[1].parent, 0);
  EXPECT_EQ(t.events[2].parent, 1);
  EXPECT_EQ(t.events[3].parent, 0);
  for (const TraceEvent& e : t.events) EXPECT_FALSE(e.open_at_stop);
}

TEST_F(CompactEventsTest, GapsBeyondTheDeltaWindowGetANewBase) {
  enable_profiler(no_marks());
  Recorder r;
  const uint64_t t0 = now_ticks();
  const uint64_t gap = internal::kCompactDeltaLimit + 12345;
  r.call(0, t0);
  r.call(1, t0 + gap);  // beyond 36 bits of delta from the first base
  r.ret(t0 + gap + 7);
  r.ret(t0 + 2 * gap);
  RawTracePtr raw = disable_profiler();
  raw->stop_ticks = t0 + 3 * gap;  // the fake times lie in the future
  Trace t = replay(*raw, fake_python_resolver());
  ASSERT_EQ(names_in_order(t), (std::vector<std::string>{"f0", "f1"}));
  EXPECT_EQ(t.events[0].dur_ns, raw->clock.to_ns(t0 + 2 * gap) - raw->clock.to_ns(t0));
  EXPECT_EQ(t.events[1].start_ns, raw->clock.to_ns(t0 + gap));
  EXPECT_EQ(t.events[1].dur_ns, raw->clock.to_ns(t0 + gap + 7) - raw->clock.to_ns(t0 + gap));
  EXPECT_FALSE(t.events[0].open_at_stop);
}

TEST_F(CompactEventsTest, ManyChunksOfMixedEventsReplayCompletely) {
  enable_profiler(no_marks());
  Recorder r;
  constexpr size_t kCalls = 3 * ChunkPool::kChunkEvents + 101;
  for (size_t i = 0; i < kCalls; ++i) {
    r.call(i % 3, now_ticks());
    if (i % 997 == 0) {
      FRAMESCOPE_RANGE("odd_one");  // shifts pairs against chunk ends (padding, 2-slot bases)
    }
    r.ret(now_ticks());
  }
  Trace t = stop_with_fake_keys();
  expect_well_formed(t);
  size_t calls = 0, ranges = 0;
  for (const TraceEvent& e : t.events) {
    EXPECT_FALSE(e.open_at_stop);
    if (e.category == EventCategory::kPythonFunction) ++calls;
    if (name_of(t, e) == "odd_one") {
      ++ranges;
      EXPECT_GE(e.parent, 0) << "the range nests inside its Python call";
    }
  }
  EXPECT_EQ(calls, kCalls);
  EXPECT_EQ(ranges, (kCalls + 996) / 997);
  EXPECT_EQ(t.recorded_events, 2 * kCalls + 2 * ranges);
  EXPECT_EQ(t.dropped_events, 0u);
}

TEST_F(CompactEventsTest, KeepNewestRecyclesChunksOfCompactEvents) {
  SessionConfig cfg = no_marks();
  cfg.memory_limit_bytes = 2 * ChunkPool::kChunkBytes;
  cfg.on_limit = LimitPolicy::kKeepNewest;
  enable_profiler(cfg);
  Recorder r;
  constexpr size_t kCalls = 5 * ChunkPool::kChunkEvents;
  for (size_t i = 0; i < kCalls; ++i) {
    r.call(i == kCalls - 1 ? 7 : i % 3, now_ticks());
    r.ret(now_ticks());
  }
  Trace t = stop_with_fake_keys();
  expect_well_formed(t);
  EXPECT_GT(t.dropped_events, 0u);
  EXPECT_EQ(find_events(t, "f7").size(), 1u) << "the newest call is kept";
  EXPECT_LE(t.recorded_events, 2 * 2 * ChunkPool::kChunkEvents);
  for (const TraceEvent& e : t.events) EXPECT_NE(name_of(t, e), "<unknown python function>");
}

TEST_F(CompactEventsTest, StopPolicyDropsCompactEventsAtTheLimit) {
  SessionConfig cfg = no_marks();
  cfg.memory_limit_bytes = ChunkPool::kChunkBytes;
  enable_profiler(cfg);
  Recorder r;
  for (size_t i = 0; i < 3 * ChunkPool::kChunkEvents; ++i) {
    r.call(i % 3, now_ticks());
    r.ret(now_ticks());
  }
  Trace t = stop_with_fake_keys();
  expect_well_formed(t);
  EXPECT_GT(t.dropped_events, 0u);
  EXPECT_GT(t.recorded_events, ChunkPool::kChunkEvents) << "the chunk holds pairs";
  EXPECT_LE(t.recorded_events, 2 * ChunkPool::kChunkEvents);
}

TEST_F(CompactEventsTest, StopWhileAnotherThreadAppendsSeesWholeEvents) {
  // The second half of a pair is written after its slot was published; a concurrent stop must
  // see it or the empty half, never a torn value (TSan checks the access pattern).
  enable_profiler(no_marks());
  const uint64_t epoch = internal::g_session_epoch.load();
  const uint64_t f0 = internal::compact_call_bits(internal::register_compact_key(epoch, kKeyBase));
  std::atomic<bool> started{false}, done{false};
  std::thread writer([&] {
    ThreadBuffer* b = internal::current_buffer();
    ASSERT_NE(b, nullptr);
    while (!done.load()) {
      b->append_compact(now_ticks(), f0);
      b->append_compact(now_ticks(), internal::kCompactReturnBits);
      started.store(true);
    }
  });
  while (!started.load()) std::this_thread::yield();
  Trace t = stop_with_fake_keys();
  done.store(true);
  writer.join();
  expect_well_formed(t);
  EXPECT_GT(find_events(t, "f0").size(), 0u);
  for (const TraceEvent& e : t.events) EXPECT_EQ(name_of(t, e), "f0");
}

TEST_F(CompactEventsTest, KeysRegisterOnlyInTheActiveSession) {
  EXPECT_EQ(internal::register_compact_key(1, kKeyBase), internal::kNoCompactIndex);
  enable_profiler(no_marks());
  const uint64_t epoch = internal::g_session_epoch.load();
  EXPECT_EQ(internal::register_compact_key(epoch + 1, kKeyBase), internal::kNoCompactIndex);
  EXPECT_EQ(internal::register_compact_key(epoch, kKeyBase), 0u);
  EXPECT_EQ(internal::register_compact_key(epoch, kKeyBase + 1), 1u);
  disable_profiler();
  EXPECT_EQ(internal::register_compact_key(epoch, kKeyBase), internal::kNoCompactIndex);
}

// dropped_events counts events, as recorded_events does, whatever the policy and the kind of
// event: every event produced is either recorded or dropped. Before, the stop policy counted a
// range whose begin was refused as one dropped event (its end was not counted), and keep-newest
// counted the slots of a recycled chunk (a pair slot holds two compact events).
struct Workload {
  const char* name;
  size_t events_per_iteration;
  void (*run)(Recorder& r, size_t i);
};

const Workload kWorkloads[] = {
    {"python calls", 2,
     [](Recorder& r, size_t i) {
       r.call(i % 3, now_ticks());
       r.ret(now_ticks());
     }},
    {"scoped ranges", 2, [](Recorder&, size_t) { FRAMESCOPE_RANGE("scoped"); }},
    {"record_function", 2, [](Recorder&, size_t) { RecordFunction rf("static"); }},
    {"dynamic names", 2,
     [](Recorder&, size_t) {
       RecordFunction rf;
       rf.before(std::string_view("dynamic"));
     }},
    {"mixed", 7,
     [](Recorder& r, size_t i) {
       r.call(i % 3, now_ticks());
       {
         FRAMESCOPE_RANGE("inside");
         if (i % 2) mark("mark");
         r.call(4, now_ticks());
         r.ret(now_ticks());
       }
       if (i % 2 == 0) mark("mark");
       r.ret(now_ticks());
     }},
};

TEST_F(CompactEventsTest, DroppedEventsCountEventsLikeRecordedEvents) {
  for (LimitPolicy policy : {LimitPolicy::kStopRecording, LimitPolicy::kKeepNewest}) {
    for (const Workload& w : kWorkloads) {
      SCOPED_TRACE(std::string(w.name) +
                   (policy == LimitPolicy::kKeepNewest ? ", keep newest" : ", stop"));
      SessionConfig cfg = no_marks();
      cfg.memory_limit_bytes = 2 * ChunkPool::kChunkBytes;
      cfg.on_limit = policy;
      enable_profiler(cfg);
      Recorder r;
      constexpr size_t kIterations = 4 * ChunkPool::kChunkEvents;  // far beyond two chunks
      // A call and a range open across the whole run: keep-newest carries their begins (kept,
      // so not dropped) through every recycled chunk.
      r.call(5, now_ticks());
      {
        FRAMESCOPE_RANGE("enclosing");
        for (size_t i = 0; i < kIterations; ++i) w.run(r, i);
      }
      r.ret(now_ticks());
      Trace t = stop_with_fake_keys();
      expect_well_formed(t);
      EXPECT_GT(t.dropped_events, 0u);
      EXPECT_EQ(t.recorded_events + t.dropped_events, 4 + w.events_per_iteration * kIterations);
      if (policy == LimitPolicy::kKeepNewest) {
        EXPECT_FALSE(find_events(t, "enclosing").empty()) << "carried, so recorded";
      }
    }
  }
}

TEST_F(CompactEventsTest, DroppedEndOnAnotherThreadIsCountedToo) {
  // Ranges ended on another thread: a recorded one (its end kept by the session) and, once the
  // buffer is full, one whose begin was dropped (its end counted dropped on the begin's buffer).
  SessionConfig cfg = no_marks();
  cfg.memory_limit_bytes = ChunkPool::kChunkBytes;
  enable_profiler(cfg);
  auto kept = std::make_unique<RecordFunction>();
  kept->before("kept_async");
  for (size_t i = 0; i < ChunkPool::kChunkEvents; ++i) {
    FRAMESCOPE_RANGE("flood");
  }
  auto dropped = std::make_unique<RecordFunction>();
  dropped->before("dropped_async");
  std::thread([&] {
    kept->end();
    dropped->end();
  }).join();
  Trace t = stop_with_fake_keys();
  expect_well_formed(t);
  EXPECT_TRUE(only_event(t, "kept_async").async_end);
  EXPECT_TRUE(find_events(t, "dropped_async").empty());
  EXPECT_EQ(t.recorded_events + t.dropped_events, 2 + 2 * ChunkPool::kChunkEvents + 2);
}

}  // namespace
}  // namespace framescope_test
