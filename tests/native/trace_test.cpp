// tests/native/trace_test.cpp: Trace interning, merge, stats, and the binary serialize round trip.
#include <cstring>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "test_support.h"

namespace framescope_test {
namespace {

class TraceTest : public CoreTest {};

/// A small hand-built trace: root(0..100) > child(10..40) > grandchild(20..30); root2(200..250).
Trace handmade(int64_t pid = 1) {
  Trace t;
  t.threads.push_back(ThreadInfo{pid, 11, 111, 1, "main"});
  uint32_t root = t.intern(sym("root"));
  uint32_t child = t.intern(sym("child"));
  uint32_t grand = t.intern(sym("grandchild"));
  auto ev = [](int64_t start, int64_t dur, int64_t parent, uint32_t symbol, uint32_t depth) {
    TraceEvent e;
    e.start_ns = start;
    e.dur_ns = dur;
    e.parent = parent;
    e.symbol = symbol;
    e.depth = depth;
    e.category = EventCategory::kCpuOp;
    return e;
  };
  t.events.push_back(ev(0, 100, -1, root, 0));
  t.events.push_back(ev(10, 30, 0, child, 1));
  t.events.push_back(ev(20, 10, 1, grand, 2));
  t.events.push_back(ev(200, 50, -1, root, 0));
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
  std::vector<SymbolStats> stats = t.stats();
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
  auto stats = t.stats();
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

// ---- serialize / deserialize ------------------------------------------------------------------

void expect_same(const Trace& a, const Trace& b) {
  ASSERT_EQ(a.symbols.size(), b.symbols.size());
  for (size_t i = 0; i < a.symbols.size(); ++i) {
    EXPECT_EQ(a.symbols[i].name, b.symbols[i].name);
    EXPECT_EQ(a.symbols[i].file, b.symbols[i].file);
    EXPECT_EQ(a.symbols[i].line, b.symbols[i].line);
    EXPECT_EQ(a.symbols[i].function, b.symbols[i].function);
  }
  ASSERT_EQ(a.events.size(), b.events.size());
  for (size_t i = 0; i < a.events.size(); ++i) {
    const TraceEvent &x = a.events[i], &y = b.events[i];
    EXPECT_EQ(x.start_ns, y.start_ns);
    EXPECT_EQ(x.dur_ns, y.dur_ns);
    EXPECT_EQ(x.parent, y.parent);
    EXPECT_EQ(x.symbol, y.symbol);
    EXPECT_EQ(x.thread, y.thread);
    EXPECT_EQ(x.depth, y.depth);
    EXPECT_EQ(x.detail, y.detail);
    EXPECT_EQ(x.category, y.category);
    EXPECT_EQ(x.async_end, y.async_end);
    EXPECT_EQ(x.open_at_stop, y.open_at_stop);
  }
  ASSERT_EQ(a.threads.size(), b.threads.size());
  for (size_t i = 0; i < a.threads.size(); ++i) {
    EXPECT_EQ(a.threads[i].pid, b.threads[i].pid);
    EXPECT_EQ(a.threads[i].os_tid, b.threads[i].os_tid);
    EXPECT_EQ(a.threads[i].pthread_id, b.threads[i].pthread_id);
    EXPECT_EQ(a.threads[i].logical_tid, b.threads[i].logical_tid);
    EXPECT_EQ(a.threads[i].name, b.threads[i].name);
  }
  ASSERT_EQ(a.details.size(), b.details.size());
  for (size_t i = 0; i < a.details.size(); ++i) {
    EXPECT_EQ(a.details[i].handle, b.details[i].handle);
    EXPECT_EQ(a.details[i].seq_nr, b.details[i].seq_nr);
    EXPECT_EQ(a.details[i].flops, b.details[i].flops);
    ASSERT_EQ(a.details[i].inputs.size(), b.details[i].inputs.size());
    for (size_t j = 0; j < a.details[i].inputs.size(); ++j) {
      const RangeInput &p = a.details[i].inputs[j], &q = b.details[i].inputs[j];
      EXPECT_EQ(p.kind, q.kind);
      EXPECT_EQ(p.int_value, q.int_value);
      EXPECT_EQ(p.double_value, q.double_value);
      EXPECT_EQ(p.text, q.text);
      EXPECT_EQ(p.shape, q.shape);
    }
  }
  ASSERT_EQ(a.memory.size(), b.memory.size());
  for (size_t i = 0; i < a.memory.size(); ++i) {
    EXPECT_EQ(a.memory[i].time_ns, b.memory[i].time_ns);
    EXPECT_EQ(a.memory[i].thread, b.memory[i].thread);
    EXPECT_EQ(a.memory[i].address, b.memory[i].address);
    EXPECT_EQ(a.memory[i].bytes, b.memory[i].bytes);
    EXPECT_EQ(a.memory[i].total_allocated, b.memory[i].total_allocated);
    EXPECT_EQ(a.memory[i].total_reserved, b.memory[i].total_reserved);
    EXPECT_EQ(a.memory[i].device, b.memory[i].device);
  }
  EXPECT_EQ(a.warnings, b.warnings);
  EXPECT_EQ(a.start_ns, b.start_ns);
  EXPECT_EQ(a.stop_ns, b.stop_ns);
  EXPECT_EQ(a.dropped_events, b.dropped_events);
  EXPECT_EQ(a.recorded_events, b.recorded_events);
}

Trace rich_session_trace() {
  SessionConfig cfg;
  cfg.record_shapes = true;
  cfg.profile_memory = true;
  cfg.with_flops = true;
  int x = 0;
  Trace t = record(
      [&] {
        FRAMESCOPE_RANGE("outer");
        RecordFunction rf(RecordScope::kUserScope);
        rf.before("aten::mm",
                  {RangeInput::of_shape({2, 2}, "float"), RangeInput::of_shape({2, 2}),
                   RangeInput::of_double(0.5), RangeInput::of_string("s"), RangeInput{}},
                  3);
        for (int i = 0; i < 40; ++i) record_memory(&x, 8 + i, 8 * i, 1024, i % 2);
        mark("a mark");
        std::thread th([] { FRAMESCOPE_RANGE("on_thread"); });
        th.join();
      },
      cfg);
  t.warnings.push_back("a warning");
  t.threads[0].name = "main thread";
  t.symbols[0].file = "file.py";
  t.symbols[0].line = 12;
  return t;
}

TEST_F(TraceTest, SerializeRoundTrip) {
  Trace t = rich_session_trace();
  ASSERT_EQ(t.memory.size(), 40u);
  std::string bytes = t.serialize();
  Trace back;
  ASSERT_NO_THROW(back = Trace::deserialize(bytes));
  expect_same(t, back);
  // the deserialized trace interns like the original
  EXPECT_EQ(back.intern(sym("outer")), t.intern(sym("outer")));
  EXPECT_EQ(back.serialize(), bytes);
}

TEST_F(TraceTest, SerializeRoundTripOfEmptyAndHandmadeTraces) {
  expect_same(Trace{}, Trace::deserialize(Trace{}.serialize()));
  Trace h = handmade();
  expect_same(h, Trace::deserialize(h.serialize()));
}

TEST_F(TraceTest, DeserializedTracesMerge) {
  Trace a = record([] { FRAMESCOPE_RANGE("local"); });
  Trace remote = Trace::deserialize(rich_session_trace().serialize());
  a.merge(remote, 10);
  expect_well_formed(a);
  EXPECT_EQ(find_events(a, "aten::mm").size(), 1u);
  EXPECT_EQ(find_events(a, "local").size(), 1u);
}

TEST_F(TraceTest, MalformedInputThrowsRuntimeError) {
  EXPECT_THROW(Trace::deserialize(""), std::runtime_error);
  EXPECT_THROW(Trace::deserialize("FSTRACE"), std::runtime_error);
  EXPECT_THROW(Trace::deserialize("NOTATRACE-------------------------"), std::runtime_error);
  std::string good = rich_session_trace().serialize();
  // every truncation fails cleanly
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_THROW(Trace::deserialize(std::string_view(good).substr(0, n)), std::runtime_error)
        << "prefix of " << n << " bytes";
  }
  // trailing garbage
  EXPECT_THROW(Trace::deserialize(good + "x"), std::runtime_error);
  // a huge count right after the header
  std::string huge = good;
  uint64_t big = ~uint64_t(0) / 2;
  std::memcpy(&huge[8 + 32], &big, sizeof big);  // symbol count
  EXPECT_THROW(Trace::deserialize(huge), std::runtime_error);
}

TEST_F(TraceTest, OutOfRangeReferencesAreRejected) {
  Trace h = handmade();
  auto bad_after = [&](auto mutate) {
    Trace copy = h;
    mutate(copy);
    std::string bytes = copy.serialize();
    EXPECT_THROW(Trace::deserialize(bytes), std::runtime_error);
  };
  bad_after([](Trace& t) { t.events[1].symbol = 99; });
  bad_after([](Trace& t) { t.events[1].thread = 5; });
  bad_after([](Trace& t) { t.events[1].parent = 3; });  // a parent after its child
  bad_after([](Trace& t) { t.events[1].parent = -7; });
  bad_after([](Trace& t) { t.events[1].detail = 0; });  // no details
  bad_after([](Trace& t) { t.events[1].category = EventCategory(200); });
  bad_after([](Trace& t) { t.memory.push_back(MemorySample{0, 9, 0, 0, 0, 0, 0}); });
  bad_after([](Trace& t) { t.events[1].dur_ns = -2; });
  bad_after([](Trace& t) { t.events[1].start_ns = INT64_MAX; });
  bad_after([](Trace& t) { t.events[1].dur_ns = INT64_MAX; });
  bad_after([](Trace& t) { t.stop_ns = INT64_MIN; });
  bad_after([](Trace& t) { t.memory.push_back(MemorySample{INT64_MIN, 0, 0, 0, 0, 0, 0}); });
}

TEST_F(TraceTest, ExtremeHandMadeTimesDoNotOverflow) {
  // Hand-made traces can hold anything; stats() and the writer must not overflow (UBSan).
  Trace t = handmade();
  t.events[0].start_ns = INT64_MIN + 1;
  t.events[0].dur_ns = INT64_MAX;
  t.events[3].start_ns = INT64_MAX - 1;
  t.events[3].dur_ns = INT64_MAX;
  t.memory.push_back(MemorySample{INT64_MAX, 0, 0, 1, 1, 1, -1});
  t.stop_ns = INT64_MAX;
  EXPECT_NO_THROW((void)t.stats());
  std::ostringstream out;
  EXPECT_NO_THROW(write_chrome_trace(t, out));
}

TEST_F(TraceTest, CorruptedBytesNeverCrash) {
  // Random byte flips: deserialize either throws std::runtime_error or returns a trace whose
  // references are all in range (checked by writing it, which indexes everything).
  std::string good = rich_session_trace().serialize();
  std::mt19937 rng(12345);
  int rejected = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bytes = good;
    int flips = 1 + int(rng() % 4);
    for (int f = 0; f < flips; ++f) bytes[rng() % bytes.size()] ^= char(1 + rng() % 255);
    try {
      Trace t = Trace::deserialize(bytes);
      std::ostringstream out;
      write_chrome_trace(t, out);
      (void)t.stats();
    } catch (const std::runtime_error&) {
      ++rejected;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "unexpected exception type: " << e.what();
    }
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace framescope_test
