// tests/native/key_averages_test.cpp: key averages over hand-made traces, CPU clock readings.
#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "cpu_sampler.h"
#include "framescope/key_averages.h"
#include "framescope/stored_trace.h"
#include "test_support.h"

namespace framescope_test {
namespace {

class KeyAveragesTest : public CoreTest {};

const KeyAverage& entry(const KeyAverages& k, const Trace& t, const std::string& name,
                        const std::vector<std::string>& stack = {}) {
  for (const KeyAverage& e : k.entries) {
    if (t.symbols[e.symbol].name != name) continue;
    if (!stack.empty()) {
      std::vector<std::string> names;
      for (uint32_t s : e.stack) names.push_back(t.symbols[s].name);
      if (names != stack) continue;
    }
    return e;
  }
  ADD_FAILURE() << "no entry " << name;
  static KeyAverage none;
  return none;
}

// f(0..100) > f(10..60) > g(20..30); g(70..90) under the outer f; a range r(40..50) in the inner f.
Trace recursive() {
  Trace t;
  t.threads.push_back(ThreadInfo{1, 11, 111, 1, "main"});
  const uint32_t f = t.intern(sym("f")), g = t.intern(sym("g")), r = t.intern(sym("r"));
  t.events = {ev(0, 100, -1, f, 0), ev(10, 50, 0, f, 1), ev(20, 10, 1, g, 2),
              ev(40, 10, 1, r, 2, EventCategory::kUserAnnotation), ev(70, 20, 0, g, 1)};
  t.start_ns = 0;
  t.stop_ns = 100;
  return t;
}

TEST_F(KeyAveragesTest, RecursionCountedOnceInTotalsSelfTimesExact) {
  const Trace t = recursive();
  const KeyAverages k = compute_key_averages(MaterializedSource(t));
  const KeyAverage& f = entry(k, t, "f");
  EXPECT_EQ(f.count, 2u);
  EXPECT_EQ(f.total_ns, 100);  // the inner call lies inside the outer one
  EXPECT_EQ(f.self_ns, (100 - 50 - 20) + (50 - 10 - 10));
  const KeyAverage& g = entry(k, t, "g");
  EXPECT_EQ(g.count, 2u);
  EXPECT_EQ(g.total_ns, 30);
  EXPECT_EQ(g.self_ns, 30);
  EXPECT_EQ(entry(k, t, "r").category, EventCategory::kUserAnnotation);
  ASSERT_EQ(k.threads.size(), 1u);
  EXPECT_EQ(k.threads[0].self_ns, 100);  // the thread's self times add up to its root
  EXPECT_FALSE(k.has_cpu);
  EXPECT_EQ(f.cpu_total_ns, -1);
  EXPECT_TRUE(f.top_level);
  EXPECT_FALSE(entry(k, t, "r").top_level);
}

// R(0..100) > p(5..95) > R(10..90) > f(20..80): a range nested alone (Python frames between are
// transparent) in a range of the same name, as `record_function("R")` around a function that
// opens "R" itself.
Trace nested_namesakes() {
  Trace t;
  t.threads.push_back(ThreadInfo{1, 11, 111, 1, "main"});
  const uint32_t r = t.intern(sym("R")), p = t.intern(sym("p")), f = t.intern(sym("f"));
  t.events = {ev(0, 100, -1, r, 0, EventCategory::kUserAnnotation), ev(5, 90, 0, p, 1),
              ev(10, 80, 1, r, 2, EventCategory::kUserAnnotation), ev(20, 60, 2, f, 3)};
  t.start_ns = 0;
  t.stop_ns = 100;
  return t;
}

TEST_F(KeyAveragesTest, RangeNestedAloneInItsNamesakeMergesAsTorchs) {
  const Trace t = nested_namesakes();
  KeyAverageOptions merge;
  merge.merge_nested_same_name = true;
  const KeyAverages plain = compute_key_averages(MaterializedSource(t));
  EXPECT_EQ(entry(plain, t, "R").count, 2u);  // every range that ran (the summary's view)
  const KeyAverages merged = compute_key_averages(MaterializedSource(t), merge);
  const KeyAverage& r = entry(merged, t, "R");
  EXPECT_EQ(r.count, 1u);
  EXPECT_EQ(r.total_ns, 100);
  EXPECT_EQ(r.self_ns, (100 - 90) + (80 - 60));  // the merged range's own time stays R's
  EXPECT_EQ(entry(merged, t, "p").self_ns, 10);
  EXPECT_EQ(merged.threads[0].self_ns, 100);

  // Grouped by the calling frame, the inner R has a key of its own ([p]); merged away, that key
  // counts nothing and its self time is the outer R's, whose key has no stack.
  merge.group_by_stack_n = 1;
  const KeyAverages grouped = compute_key_averages(MaterializedSource(t), merge);
  uint64_t calls = 0;
  for (const KeyAverage& e : grouped.entries) {
    if (t.symbols[e.symbol].name != "R") continue;
    calls += e.count;
    if (e.stack.empty()) {
      EXPECT_EQ(e.count, 1u);
      EXPECT_EQ(e.self_ns, 30);
      EXPECT_EQ(e.total_ns, 100);
    } else {
      EXPECT_EQ(e.count, 0u);
      EXPECT_EQ(e.self_ns, 0);
      EXPECT_EQ(e.total_ns, 0);
    }
  }
  EXPECT_EQ(calls, 1u);
  EXPECT_EQ(grouped.threads[0].self_ns, 100);
}

TEST_F(KeyAveragesTest, NamesakeRangesWithSiblingsStaySeparate) {
  // A(0..100) > [A(10..40), A(50..90)]; B(100..200) > [B(110..150), C(160..190)].
  Trace t;
  t.threads.push_back(ThreadInfo{1, 11, 111, 1, "main"});
  const uint32_t a = t.intern(sym("A")), b = t.intern(sym("B")), c = t.intern(sym("C"));
  const auto op = EventCategory::kCpuOp;
  t.events = {ev(0, 100, -1, a, 0, op),   ev(10, 30, 0, a, 1, op),  ev(50, 40, 0, a, 1, op),
              ev(100, 100, -1, b, 0, op), ev(110, 40, 3, b, 1, op), ev(160, 30, 3, c, 1, op)};
  t.start_ns = 0;
  t.stop_ns = 200;
  KeyAverageOptions merge;
  merge.merge_nested_same_name = true;
  const KeyAverages k = compute_key_averages(MaterializedSource(t), merge);
  EXPECT_EQ(entry(k, t, "A").count, 3u);
  EXPECT_EQ(entry(k, t, "B").count, 2u);
  EXPECT_EQ(entry(k, t, "C").count, 1u);
}

TEST_F(KeyAveragesTest, GroupByStackUsesTheEnclosingPythonFrames) {
  const Trace t = recursive();
  KeyAverageOptions o;
  o.group_by_stack_n = 2;
  const KeyAverages k = compute_key_averages(MaterializedSource(t), o);
  // r runs in the inner f, called from the outer f: innermost first.
  EXPECT_EQ(entry(k, t, "r", {"f", "f"}).count, 1u);
  EXPECT_EQ(entry(k, t, "g", {"f", "f"}).count, 1u);  // g(20..30)
  EXPECT_EQ(entry(k, t, "g", {"f"}).count, 1u);       // g(70..90), one frame above it
  EXPECT_EQ(entry(k, t, "f", {"f"}).count, 1u);
  size_t roots = 0;
  for (const KeyAverage& e : k.entries) roots += e.stack.empty();
  EXPECT_EQ(roots, 1u);  // the outer f
}

TEST_F(KeyAveragesTest, GroupByInputShapeAndFlops) {
  Trace t;
  t.threads.push_back(ThreadInfo{1, 11, 111, 1, "main"});
  const uint32_t mm = t.intern(sym("aten::mm"));
  EventDetail a, b;
  a.inputs = {RangeInput::of_shape({2, 3}), RangeInput::of_shape({3, 4})};
  a.flops = 48;
  b.inputs = {RangeInput::of_shape({5, 5}), RangeInput::of_int(1)};
  b.flops = 250;
  t.details = {a, b};
  t.events = {ev(0, 10, -1, mm, 0, EventCategory::kCpuOp),
              ev(20, 10, -1, mm, 0, EventCategory::kCpuOp),
              ev(40, 30, -1, mm, 0, EventCategory::kCpuOp)};
  t.events[0].detail = 0;
  t.events[1].detail = 0;
  t.events[2].detail = 1;
  t.stop_ns = 100;
  EXPECT_EQ(format_input_shapes(a.inputs), "[[2, 3], [3, 4]]");
  EXPECT_EQ(format_input_shapes(b.inputs), "[[5, 5], []]");
  const KeyAverages plain = compute_key_averages(MaterializedSource(t));
  ASSERT_EQ(plain.entries.size(), 1u);
  EXPECT_EQ(plain.entries[0].count, 3u);
  EXPECT_EQ(plain.entries[0].flops, 48 + 48 + 250);
  EXPECT_EQ(plain.entries[0].input_shapes, "");
  KeyAverageOptions o;
  o.group_by_input_shape = true;
  const KeyAverages k = compute_key_averages(MaterializedSource(t), o);
  ASSERT_EQ(k.entries.size(), 2u);
  EXPECT_EQ(k.entries[0].input_shapes, "[[2, 3], [3, 4]]");
  EXPECT_EQ(k.entries[0].count, 2u);
  EXPECT_EQ(k.entries[0].total_ns, 20);
  EXPECT_EQ(k.entries[1].input_shapes, "[[5, 5], []]");
  EXPECT_EQ(k.entries[1].total_ns, 30);
}

// Memory samples arrive among the events of a replay and go to the innermost open event.
TEST_F(KeyAveragesTest, MemoryAttributionInAReplay) {
  SessionConfig c;
  c.profile_memory = true;
  c.start_stop_marks = false;
  enable_profiler(c);
  {
    ScopedRange outer("outer");
    record_memory(nullptr, 7, 7);
    {
      ScopedRange inner("inner");
      record_memory(nullptr, 100, 107);
      record_memory(nullptr, -40, 67);
    }
  }
  const StoredTrace stored = StoredTrace::from_raw(std::move(*disable_profiler()));
  const KeyAverages k = compute_key_averages(stored);
  const Trace t = materialize(stored);
  EXPECT_EQ(entry(k, t, "inner").memory_self, 60);
  EXPECT_EQ(entry(k, t, "inner").memory_total, 60);
  EXPECT_EQ(entry(k, t, "outer").memory_self, 7);
  EXPECT_EQ(entry(k, t, "outer").memory_total, 67);
}

TEST_F(KeyAveragesTest, CpuTimeInterpolatedPerSliceAndNeverAboveWall) {
  Trace t = recursive();
  // The thread is on CPU from 0 to 50 (rate 1), then waits (rate 0) until 100.
  t.threads[0].cpu_samples = {{0, 1000}, {50, 1050}, {100, 1050}};
  const KeyAverages k = compute_key_averages(MaterializedSource(t));
  EXPECT_TRUE(k.has_cpu);
  const KeyAverage& f = entry(k, t, "f");
  EXPECT_EQ(f.cpu_total_ns, 50);
  // outer f self: 0..10 (10 on CPU) + 60..70 and 90..100 (none); inner f self: 10..60 minus g
  // and r (30 wall of which 10..20, 30..40 and 50..50 on CPU: 20 of 30; 50..60 none).
  EXPECT_EQ(f.cpu_self_ns, 10 + 20);
  const KeyAverage& g = entry(k, t, "g");
  EXPECT_EQ(g.cpu_total_ns, 10);  // 20..30 on CPU; 70..90 waiting
  EXPECT_EQ(k.threads[0].cpu_self_ns, 50);
  EXPECT_TRUE(k.threads[0].cpu_known);
}

// Replays `events` as a recorded trace's replay reports them: begins and ends in time order
// (a range left open across its frame's return ends after that frame), which a
// MaterializedSource, reporting by parent links, does not.
class TimeOrderedSource final : public TraceSource {
 public:
  explicit TimeOrderedSource(const Trace& t) : t_(t) {}
  uint64_t event_count() const override { return t_.events.size(); }
  int64_t time_base_ns() const override { return 0; }
  void visit(TraceVisitor& v) const override {
    const TraceView view{t_.symbols,  t_.threads, t_.details,        t_.warnings,
                         t_.start_ns, t_.stop_ns, t_.dropped_events, t_.recorded_events};
    v.begin_trace(view);
    v.begin_thread(0);
    std::vector<std::pair<int64_t, size_t>> order;  // (time, 2*i for a begin, 2*i+1 for an end)
    for (size_t i = 0; i < t_.events.size(); ++i) {
      order.emplace_back(t_.events[i].start_ns, 2 * i + 1);  // begins after ends at one time
      order.emplace_back(t_.events[i].start_ns + t_.events[i].dur_ns, 2 * i);
    }
    std::sort(order.begin(), order.end());
    for (const auto& [time, code] : order) {
      const size_t i = code / 2;
      const TraceEvent& e = t_.events[i];
      Slice s;
      s.index = i;
      s.parent = e.parent;
      s.start_ns = e.start_ns;
      s.symbol = e.symbol;
      s.depth = e.depth;
      s.category = e.category;
      s.dur_ns = (code & 1) ? 0 : e.dur_ns;
      if (code & 1) {
        v.slice_begin(s);
      } else {
        v.slice_end(s);
      }
    }
    v.end_thread(0);
    v.end_trace();
  }

 private:
  const Trace& t_;
};

TEST_F(KeyAveragesTest, RangeOutlivingItsFrameLeavesTheFramesSelfTime) {
  Trace t;
  t.threads.push_back(ThreadInfo{1, 11, 111, 1, "main"});
  const uint32_t f = t.intern(sym("f")), r = t.intern(sym("r"));
  t.events = {ev(0, 50, -1, f, 0), ev(10, 60, 0, r, 1, EventCategory::kUserAnnotation)};
  t.stop_ns = 100;
  const KeyAverages k = compute_key_averages(TimeOrderedSource(t));
  EXPECT_EQ(entry(k, t, "r").self_ns, 60);
  EXPECT_EQ(entry(k, t, "f").self_ns, 10);  // r covered f from 10 on
  EXPECT_EQ(k.threads[0].self_ns, 70);      // f's 50 and r's 20 beyond it: once each
}

// module(0..100) > opener(10..30) > x(15..80) > closer(50..75): a range opened in one function
// and closed in another after the first returned, on one thread. Each instant counts once, for
// the innermost open slice, so the self times add up to the thread's 100. Before, x's time
// after opener returned was module's self time as well.
TEST_F(KeyAveragesTest, RangeClosedAfterItsFrameReturnedCountsEachInstantOnce) {
  Trace t;
  t.threads.push_back(ThreadInfo{1, 11, 111, 1, "main"});
  const uint32_t m = t.intern(sym("module")), op = t.intern(sym("opener")), x = t.intern(sym("x")),
                 cl = t.intern(sym("closer"));
  t.events = {ev(0, 100, -1, m, 0), ev(10, 20, 0, op, 1),
              ev(15, 65, 1, x, 2, EventCategory::kUserAnnotation), ev(50, 25, 2, cl, 3)};
  t.stop_ns = 100;
  const KeyAverages k = compute_key_averages(TimeOrderedSource(t));
  EXPECT_EQ(entry(k, t, "module").self_ns, 100 - 20 - (80 - 30));
  EXPECT_EQ(entry(k, t, "opener").self_ns, 20 - (30 - 15));
  EXPECT_EQ(entry(k, t, "x").self_ns, 65 - 25);
  EXPECT_EQ(entry(k, t, "closer").self_ns, 25);
  EXPECT_EQ(k.threads[0].self_ns, 100);
  EXPECT_EQ(entry(k, t, "module").total_ns, 100);
  EXPECT_EQ(entry(k, t, "x").total_ns, 65);
}

// A range ended on another thread is an async span: its thread ran other slices meanwhile,
// which hold that time. Before, key_averages and stats() counted its duration as self time as
// well (summary percentages above 100%; "Self CPU time total" above the threads' time).
TEST_F(KeyAveragesTest, RangeEndedOnAnotherThreadHasNoSelfTime) {
  // f(0..100) > [async r(10..200), r(20..30), g(40..90)]
  Trace t;
  t.threads.push_back(ThreadInfo{1, 11, 111, 1, "main"});
  const uint32_t f = t.intern(sym("f")), g = t.intern(sym("g")), r = t.intern(sym("r"));
  t.events = {ev(0, 100, -1, f, 0), ev(10, 190, 0, r, 1, EventCategory::kUserAnnotation),
              ev(20, 10, 0, r, 1, EventCategory::kUserAnnotation), ev(40, 50, 0, g, 1)};
  t.events[1].async_end = true;
  t.stop_ns = 200;
  for (bool by_thread : {false, true}) {
    SCOPED_TRACE(by_thread ? "grouped by thread" : "plain");
    KeyAverageOptions o;
    o.group_by_thread = by_thread;
    const KeyAverages k = compute_key_averages(MaterializedSource(t), o);
    const KeyAverage* async = nullptr;
    const KeyAverage* sync = nullptr;
    int64_t self_sum = 0;
    for (const KeyAverage& e : k.entries) {
      self_sum += e.self_ns;
      if (e.symbol == r) (e.is_async ? async : sync) = &e;
    }
    ASSERT_NE(async, nullptr) << "an entry of its own";
    ASSERT_NE(sync, nullptr);
    EXPECT_EQ(async->count, 1u);
    EXPECT_EQ(async->total_ns, 190);
    EXPECT_EQ(async->self_ns, 0);
    EXPECT_EQ(sync->count, 1u);
    EXPECT_EQ(sync->self_ns, 10);
    EXPECT_EQ(entry(k, t, "f").self_ns, 100 - 10 - 50) << "the async span is not f's child time";
    ASSERT_EQ(k.threads.size(), 1u);
    EXPECT_EQ(k.threads[0].self_ns, 100);
    EXPECT_EQ(self_sum, k.threads[0].self_ns) << "self times add up to the thread's time";
  }
  // compute_stats(): a call and a total, no self time.
  {
    const std::vector<SymbolStats> stats = compute_stats(MaterializedSource(t), t.symbols.size());
    int64_t self_sum = 0;
    for (const SymbolStats& st : stats) {
      self_sum += st.self_ns;
      if (st.symbol == r) {
        EXPECT_EQ(st.calls, 2u);
        EXPECT_EQ(st.self_ns, 10);
      }
      if (st.symbol == f) {
        EXPECT_EQ(st.self_ns, 40);
      }
    }
    EXPECT_EQ(self_sum, 100);
  }
  (void)g;
}

TEST_F(KeyAveragesTest, RecordedRangeEndedOnAnotherThreadKeepsThreadTimesWhole) {
  std::unique_ptr<RecordFunction> rf;
  Trace t = record([&] {
    FRAMESCOPE_RANGE("root");
    rf = std::make_unique<RecordFunction>();
    rf->before("cross");
    {
      FRAMESCOPE_RANGE("meanwhile");
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::thread([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      rf->end();
    }).join();
  });
  rf.reset();
  expect_well_formed(t);
  const TraceEvent& cross = only_event(t, "cross");
  ASSERT_TRUE(cross.async_end);
  const KeyAverages k = compute_key_averages(MaterializedSource(t));
  const KeyAverage& c = entry(k, t, "cross");
  EXPECT_TRUE(c.is_async);
  EXPECT_EQ(c.self_ns, 0);
  EXPECT_EQ(c.total_ns, cross.dur_ns);
  int64_t self_sum = 0, thread_sum = 0;
  for (const KeyAverage& e : k.entries) self_sum += e.self_ns;
  for (const ThreadTotals& th : k.threads) thread_sum += th.self_ns;
  EXPECT_EQ(self_sum, thread_sum);
  EXPECT_EQ(entry(k, t, "root").self_ns + entry(k, t, "meanwhile").self_ns,
            only_event(t, "root").dur_ns);
}

TEST_F(KeyAveragesTest, GroupByThread) {
  Trace t = recursive();
  t.threads.push_back(ThreadInfo{1, 12, 112, 2, "worker"});
  t.events.push_back(ev(0, 30, -1, 1, 0));  // g on the second thread
  t.events.back().thread = 1;
  KeyAverageOptions o;
  o.group_by_thread = true;
  const KeyAverages k = compute_key_averages(MaterializedSource(t), o);
  int64_t g_main = -1, g_worker = -1;
  for (const KeyAverage& e : k.entries) {
    if (t.symbols[e.symbol].name != "g") continue;
    (e.thread == 0 ? g_main : g_worker) = e.total_ns;
  }
  EXPECT_EQ(g_main, 30);
  EXPECT_EQ(g_worker, 30);
  EXPECT_EQ(k.threads[1].self_ns, 30);
}

TEST_F(KeyAveragesTest, CpuTrackThinsCollinearReadingsAndKeepsBends) {
  internal::CpuTrack track;
  // busy for 100 readings (1 ns of CPU per tick), then idle for 100: three readings describe it.
  // (a reading a millisecond, far above the 20 µs tolerance)
  for (int64_t i = 0; i <= 100; ++i) track.add(uint64_t(1'000'000 * i), 1'000'000 * i);
  for (int64_t i = 101; i <= 200; ++i) track.add(uint64_t(1'000'000 * i), 100'000'000);
  const auto kept = track.finish();
  ASSERT_EQ(kept.size(), 3u);
  EXPECT_EQ(kept[0].ticks, 0u);
  EXPECT_EQ(kept[1].ticks, 100'000'000u);
  EXPECT_EQ(kept[2].ticks, 200'000'000u);
  EXPECT_EQ(kept[2].cpu_ns, 100'000'000);
  internal::CpuTrack noisy;  // within tolerance of a line: thinned to its ends
  for (int i = 0; i <= 50; ++i) noisy.add(uint64_t(1'000'000 * i), 500'000 * i + (i % 2) * 10'000);
  EXPECT_EQ(noisy.finish().size(), 2u);
  internal::CpuTrack backwards;
  backwards.add(10, 10);
  backwards.add(20, 5);  // CPU time never goes back: ignored
  backwards.add(5, 20);  // nor does time
  EXPECT_EQ(backwards.finish().size(), 1u);
}

TEST_F(KeyAveragesTest, CpuSamplerPeriodGrowsOnlyWhileRatesHold) {
  using internal::CpuSampler;
  const int64_t base = 4'000'000;
  // Unknown rates (a new thread, the first readings): the base period.
  EXPECT_EQ(CpuSampler::next_period(base, base, -1.0), base);
  EXPECT_EQ(CpuSampler::next_period(base, 4 * base, -1.0), base);
  // Steady: doubles up to 4x base, and stays there.
  EXPECT_EQ(CpuSampler::next_period(base, base, 0.0), 2 * base);
  EXPECT_EQ(CpuSampler::next_period(base, 2 * base, 0.0), 4 * base);
  EXPECT_EQ(CpuSampler::next_period(base, 4 * base, 0.0), 4 * base);
  // A change of rate r is allowed only while r x (the longer period) <= base: 1/2 then 1/4.
  EXPECT_EQ(CpuSampler::next_period(base, base, 0.5), 2 * base);
  EXPECT_EQ(CpuSampler::next_period(base, base, 0.6), base);
  EXPECT_EQ(CpuSampler::next_period(base, 2 * base, 0.25), 4 * base);
  EXPECT_EQ(CpuSampler::next_period(base, 2 * base, 0.3), base);
  EXPECT_EQ(CpuSampler::next_period(base, 4 * base, 0.3), base);
  // busy <-> blocked (a change of 1): back to base at once.
  EXPECT_EQ(CpuSampler::next_period(base, 4 * base, 1.0), base);
}

TEST_F(KeyAveragesTest, SessionReadsEveryRecordingThreadsCpuClock) {
  SessionConfig c;
  c.cpu_sample_period_ns = 1'000'000;
  enable_profiler(c);
  auto spin = [] {
    ScopedRange r("spin");
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
    volatile uint64_t x = 0;
    while (std::chrono::steady_clock::now() < end) x = x + 1;
  };
  auto sleep = [] {
    ScopedRange r("sleep");
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  };
  std::thread a(spin), b(sleep);
  a.join();
  b.join();
  const StoredTrace stored = StoredTrace::from_raw(std::move(*disable_profiler()));
  const Trace t = materialize(stored);
  const KeyAverages k = compute_key_averages(stored);
  ASSERT_TRUE(k.has_cpu);
  const KeyAverage& s = entry(k, t, "sleep");
  const KeyAverage& p = entry(k, t, "spin");
  // A sleeping thread uses next to no CPU, whatever the machine's load.
  EXPECT_LT(s.cpu_total_ns, s.total_ns / 4);
  EXPECT_GT(p.cpu_total_ns, 0);
  EXPECT_LE(p.cpu_total_ns, p.total_ns);
  for (const ThreadInfo& th : t.threads) {
    EXPECT_GE(th.cpu_samples.size(), 2u) << th.os_tid;  // a first and a last reading at least
    for (size_t i = 1; i < th.cpu_samples.size(); ++i) {
      EXPECT_GE(th.cpu_samples[i].time_ns, th.cpu_samples[i - 1].time_ns);
      EXPECT_GE(th.cpu_samples[i].cpu_ns, th.cpu_samples[i - 1].cpu_ns);
    }
  }
  // .fstrace keeps them.
  const StoredTrace back = StoredTrace::deserialize(stored.serialize());
  ASSERT_EQ(back.threads().size(), stored.threads().size());
  for (size_t i = 0; i < back.threads().size(); ++i) {
    EXPECT_EQ(back.threads()[i].cpu_samples.size(), stored.threads()[i].cpu_samples.size());
  }
  EXPECT_EQ(compute_key_averages(back).entries.size(), k.entries.size());
}

TEST_F(KeyAveragesTest, NoCpuReadingsWithoutSampling) {
  enable_profiler();
  {
    ScopedRange r("x");
  }
  const StoredTrace stored = StoredTrace::from_raw(std::move(*disable_profiler()));
  for (const ThreadInfo& th : stored.threads()) EXPECT_TRUE(th.cpu_samples.empty());
  EXPECT_FALSE(compute_key_averages(stored).has_cpu);
}

}  // namespace
}  // namespace framescope_test
