// tests/native/trace_test.cpp: Trace interning, merge, and per-symbol stats of a materialized
// trace.
#include <map>
#include <sstream>
#include <thread>

#include "framescope/key_averages.h"
#include "test_support.h"

namespace framescope_test {
namespace {

class TraceTest : public CoreTest {};

std::vector<SymbolStats> stats_of(const Trace& t) {
  return compute_stats(MaterializedSource(t), t.symbols.size());
}

/// A small hand-built trace: root(0..100) > child(10..40) > grandchild(20..30); root2(200..250).
Trace handmade(int64_t pid = 1) {
  Trace t;
  t.threads.push_back(ThreadInfo{pid, 11, 111, 1, "main"});
  uint32_t root = t.intern(sym("root"));
  uint32_t child = t.intern(sym("child"));
  uint32_t grand = t.intern(sym("grandchild"));
  const EventCategory op = EventCategory::kCpuOp;
  t.events.push_back(ev(0, 100, -1, root, 0, op));
  t.events.push_back(ev(10, 30, 0, child, 1, op));
  t.events.push_back(ev(20, 10, 1, grand, 2, op));
  t.events.push_back(ev(200, 50, -1, root, 0, op));
  t.start_ns = 0;
  t.stop_ns = 300;
  return t;
}

TEST_F(TraceTest, InternDeduplicatesByName) {
  Trace t;
  EXPECT_EQ(t.intern(sym("a")), 0u);
  EXPECT_EQ(t.intern(sym("b")), 1u);
  EXPECT_EQ(t.intern(sym("a")), 0u);
  EXPECT_EQ(t.symbols.size(), 2u);
}

TEST_F(TraceTest, CategoryNames) {
  EXPECT_STREQ(category_name(EventCategory::kPythonFunction), "python_function");
  EXPECT_STREQ(category_name(EventCategory::kCFunction), "python_function");
  EXPECT_STREQ(category_name(EventCategory::kCpuOp), "cpu_op");
  EXPECT_STREQ(category_name(EventCategory::kUserAnnotation), "user_annotation");
  EXPECT_STREQ(category_name(EventCategory::kMark), "cpu_instant_event");
}

TEST_F(TraceTest, StatsCountCallsInclusiveAndSelfTime) {
  Trace t = handmade();
  std::vector<SymbolStats> stats = stats_of(t);
  std::map<std::string, SymbolStats> by_name;
  for (const SymbolStats& s : stats) by_name[t.symbols[s.symbol].name] = s;
  EXPECT_EQ(by_name["root"].calls, 2u);
  EXPECT_EQ(by_name["root"].total_ns, 150);
  EXPECT_EQ(by_name["root"].self_ns, 120);
  EXPECT_EQ(by_name["child"].self_ns, 20);
  EXPECT_EQ(by_name["grandchild"].total_ns, 10);
  // sorted by self time, descending
  for (size_t i = 1; i < stats.size(); ++i) EXPECT_GE(stats[i - 1].self_ns, stats[i].self_ns);
}

TEST_F(TraceTest, StatsCountRecursionOnce) {
  Trace t;
  t.threads.push_back(ThreadInfo{});
  uint32_t f = t.intern(sym("f"));
  for (int d = 0; d < 3; ++d) {
    TraceEvent e;
    e.start_ns = d * 10;
    e.dur_ns = 100 - d * 20;
    e.parent = d - 1;
    e.symbol = f;
    e.depth = uint32_t(d);
    t.events.push_back(e);
  }
  auto stats = stats_of(t);
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].calls, 3u);
  EXPECT_EQ(stats[0].total_ns, 100) << "nested calls of one symbol count once";
  EXPECT_EQ(stats[0].self_ns, 100);
}

TEST_F(TraceTest, MergeRemapsSymbolsThreadsParentsAndTimes) {
  Trace a = handmade(1);
  Trace b;
  b.threads.push_back(ThreadInfo{2, 22, 222, 1, "other"});
  b.intern(sym("only_in_b"));
  b.intern(sym("child"));  // shared name, different index than in a
  TraceEvent e;
  e.start_ns = 5;
  e.dur_ns = 10;
  e.symbol = 0;
  e.category = EventCategory::kUserAnnotation;
  b.events.push_back(e);
  TraceEvent c = e;
  c.start_ns = 6;
  c.dur_ns = 2;
  c.parent = 0;
  c.symbol = 1;
  c.depth = 1;
  EventDetail det;
  det.seq_nr = 4;
  b.details.push_back(det);
  c.detail = 0;
  b.events.push_back(c);
  b.memory.push_back(MemorySample{7, 0, 0xabc, 16, 16, 32, -1});
  b.warnings.push_back("from b");
  b.start_ns = -50;
  b.stop_ns = 1000;
  b.dropped_events = 3;
  b.recorded_events = 9;
  a.details.push_back(EventDetail{});  // so that b's detail index must shift

  const size_t a_events = a.events.size();
  a.merge(b, /*offset_ns=*/1000);
  ASSERT_EQ(a.events.size(), a_events + 2);
  ASSERT_EQ(a.threads.size(), 2u);
  EXPECT_EQ(a.threads[1].pid, 2);
  const TraceEvent& m0 = a.events[a_events];
  const TraceEvent& m1 = a.events[a_events + 1];
  EXPECT_EQ(a.symbols[m0.symbol].name, "only_in_b");
  EXPECT_EQ(a.symbols[m1.symbol].name, "child");
  EXPECT_EQ(m1.symbol, a.events[1].symbol) << "shared names are interned once";
  EXPECT_EQ(m0.thread, 1u);
  EXPECT_EQ(m0.start_ns, 1005);
  EXPECT_EQ(m1.parent, int64_t(a_events));
  EXPECT_EQ(m1.detail, 1u);
  EXPECT_EQ(a.details[m1.detail].seq_nr, 4);
  ASSERT_EQ(a.memory.size(), 1u);
  EXPECT_EQ(a.memory[0].time_ns, 1007);
  EXPECT_EQ(a.memory[0].thread, 1u);
  EXPECT_EQ(a.start_ns, 0);
  EXPECT_EQ(a.stop_ns, 2000);
  EXPECT_EQ(a.dropped_events, 3u);
  EXPECT_EQ(a.recorded_events, 9u);
  EXPECT_EQ(a.warnings, std::vector<std::string>{"from b"});
  expect_well_formed(a);
}

TEST_F(TraceTest, MergeWithItself) {
  Trace t = handmade();
  t.memory.push_back(MemorySample{5, 0, 1, 2, 3, 4, -1});
  t.details.push_back(EventDetail{});
  t.warnings.push_back("w");
  const size_t events = t.events.size();
  t.merge(t, 1000);
  ASSERT_EQ(t.events.size(), 2 * events);
  EXPECT_EQ(t.threads.size(), 2u);
  EXPECT_EQ(t.memory.size(), 2u);
  EXPECT_EQ(t.details.size(), 2u);
  EXPECT_EQ(t.warnings.size(), 2u);
  EXPECT_EQ(t.events[events].start_ns, t.events[0].start_ns + 1000);
  EXPECT_EQ(t.events[events + 1].parent, int64_t(events));
  expect_well_formed(t);
}

TEST_F(TraceTest, MergeIntoEmptyTakesTheOtherWindow) {
  Trace empty;
  Trace b = handmade();
  b.start_ns = 500;
  b.stop_ns = 900;
  empty.merge(b);
  EXPECT_EQ(empty.start_ns, 500);
  EXPECT_EQ(empty.stop_ns, 900);
  EXPECT_EQ(empty.events.size(), b.events.size());
}

TEST_F(TraceTest, MergeOfRealSessionsKeepsBothTrees) {
  Trace a = record([] {
    FRAMESCOPE_RANGE("a_outer");
    FRAMESCOPE_RANGE("a_inner");
  });
  Trace b = record([] {
    std::thread th([] {
      FRAMESCOPE_RANGE("b_outer");
      FRAMESCOPE_RANGE("b_inner");
    });
    th.join();
  });
  Trace merged = a;
  merged.merge(b);
  expect_well_formed(merged);
  EXPECT_EQ(merged.events.size(), a.events.size() + b.events.size());
  EXPECT_EQ(merged.threads.size(), a.threads.size() + b.threads.size());
  const TraceEvent& inner = only_event(merged, "b_inner");
  EXPECT_EQ(name_of(merged, merged.events[size_t(inner.parent)]), "b_outer");
  EXPECT_EQ(find_events(merged, "__start_profile").size(), 2u);
}

TEST_F(TraceTest, ExtremeHandMadeTimesDoNotOverflow) {
  // Hand-made traces can hold anything; compute_stats() and the writer must not overflow (UBSan).
  Trace t = handmade();
  t.events[0].start_ns = INT64_MIN + 1;
  t.events[0].dur_ns = INT64_MAX;
  t.events[3].start_ns = INT64_MAX - 1;
  t.events[3].dur_ns = INT64_MAX;
  t.memory.push_back(MemorySample{INT64_MAX, 0, 0, 1, 1, 1, -1});
  t.stop_ns = INT64_MAX;
  EXPECT_NO_THROW((void)stats_of(t));
  std::ostringstream out;
  EXPECT_NO_THROW(write_chrome_trace(t, out));
}

}  // namespace
}  // namespace framescope_test
