// tests/native/chrome_trace_test.cpp: the Chrome trace JSON writer, checked by parsing its output.
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <sstream>
#include <thread>

#include "framescope/output.h"
#include "framescope/trace_visitor.h"
#include "framescope/writers.h"
#include "json_checker.h"
#include "test_support.h"

namespace framescope_test {
namespace {

using json_checker::Value;

class ChromeTraceTest : public CoreTest {};

std::string to_json(const Trace& t) {
  std::ostringstream out;
  write_chrome_trace(t, out);
  return out.str();
}

/// Parses a µs literal with exactly three decimals into integer ns (fails the test otherwise).
int64_t us_literal_to_ns(const std::string& s) {
  static const std::regex kFormat(R"(^-?[0-9]+\.[0-9]{3}$)");
  EXPECT_TRUE(std::regex_match(s, kFormat)) << "'" << s << "' is not µs with 3 decimals";
  bool negative = !s.empty() && s[0] == '-';
  std::string digits = s.substr(negative ? 1 : 0);
  size_t dot = digits.find('.');
  if (dot == std::string::npos) return 0;
  int64_t v = std::stoll(digits.substr(0, dot)) * 1000 + std::stoll(digits.substr(dot + 1));
  return negative ? -v : v;
}

struct Parsed {
  Value doc;
  const std::vector<Value>* events = nullptr;
  int64_t base = 0;
};

Parsed parse_trace(const std::string& text) {
  Parsed p;
  p.doc = json_checker::parse(text);
  EXPECT_TRUE(p.doc.is(Value::Type::kObject));
  const Value& evs = p.doc.at("traceEvents");
  EXPECT_TRUE(evs.is(Value::Type::kArray));
  p.events = &evs.items;
  const Value& base = p.doc.at("baseTimeNanoseconds");
  EXPECT_TRUE(base.is(Value::Type::kNumber));
  EXPECT_EQ(base.text.find_first_of(".eE"), std::string::npos) << "base must be an integer";
  p.base = std::stoll(base.text);
  return p;
}

/// Checks that "X" slices nest properly per (pid, tid): sorted by start (longer first on ties),
/// each slice either lies inside the enclosing one or starts after it ended.
void expect_x_slices_nest(const Parsed& p) {
  std::map<std::pair<std::string, std::string>, std::vector<std::pair<int64_t, int64_t>>> by_tid;
  for (const Value& e : *p.events) {
    if (e.at("ph").text != "X") continue;
    int64_t ts = us_literal_to_ns(e.at("ts").text);
    int64_t dur = us_literal_to_ns(e.at("dur").text);
    EXPECT_GE(dur, 0);
    by_tid[{e.at("pid").text, e.at("tid").text}].push_back({ts, ts + dur});
  }
  for (auto& [tid, slices] : by_tid) {
    std::sort(slices.begin(), slices.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<int64_t> open_ends;
    for (const auto& [start, end] : slices) {
      while (!open_ends.empty() && open_ends.back() <= start) open_ends.pop_back();
      if (!open_ends.empty()) {
        EXPECT_LE(end, open_ends.back())
            << "slice [" << start << ", " << end << ") overlaps its parent on tid " << tid.second;
      }
      open_ends.push_back(end);
    }
  }
}

std::vector<const Value*> events_with(const Parsed& p, std::string_view ph,
                                      std::string_view name = {}) {
  std::vector<const Value*> out;
  for (const Value& e : *p.events) {
    if (e.at("ph").text != ph) continue;
    if (!name.empty() && e.at("name").text != name) continue;
    out.push_back(&e);
  }
  return out;
}

// ---- escaping --------------------------------------------------------------------------------

std::string escaped(std::string_view s) {
  std::string out;
  append_json_escaped(out, s);
  return out;
}

TEST_F(ChromeTraceTest, AppendJsonEscapedHandlesEveryClassOfCharacter) {
  EXPECT_EQ(escaped("plain"), "plain");
  EXPECT_EQ(escaped("a\"b"), "a\\\"b");
  EXPECT_EQ(escaped("back\\slash"), "back\\\\slash");
  EXPECT_EQ(escaped("n\nr\rt\t"), "n\\nr\\rt\\t");
  EXPECT_EQ(escaped(std::string_view("\x00\x01\x1f", 3)), "\\u0000\\u0001\\u001f");
  EXPECT_EQ(escaped("\x7f"), "\\u007f");
  EXPECT_EQ(escaped("caf\xc3\xa9"), "caf\xc3\xa9");                        // é kept as UTF-8
  EXPECT_EQ(escaped("\xf0\x9f\x98\x80"), "\xf0\x9f\x98\x80");              // emoji kept
  EXPECT_EQ(escaped("\xff"), "\\ufffd");                                   // not a lead byte
  EXPECT_EQ(escaped("\x80"), "\\ufffd");                                   // lone continuation
  EXPECT_EQ(escaped("\xc0\xaf"), "\\ufffd\\ufffd");                        // overlong '/'
  EXPECT_EQ(escaped("\xed\xa0\x80"), "\\ufffd\\ufffd\\ufffd");             // UTF-16 surrogate
  EXPECT_EQ(escaped("\xf4\x90\x80\x80"), "\\ufffd\\ufffd\\ufffd\\ufffd");  // > U+10FFFF
  EXPECT_EQ(escaped("x\xe2\x82"), "x\\ufffd\\ufffd");                      // truncated at the end
  EXPECT_EQ(escaped("\xe2\x82y"), "\\ufffd\\ufffdy");                      // truncated mid-string
  std::string appended = "keep:";
  append_json_escaped(appended, "\"");
  EXPECT_EQ(appended, "keep:\\\"") << "appends, does not overwrite";
}

TEST_F(ChromeTraceTest, HostileNamesSurviveARoundTripThroughJson) {
  struct Case {
    std::string name;
    std::string decoded;
  };
  const std::vector<Case> cases = {
      {"quote\"inside", "quote\"inside"},
      {"\"", "\""},
      {"trailing backslash\\", "trailing backslash\\"},
      {"\\\"\\\\", "\\\"\\\\"},
      {"newline\nand\ttab", "newline\nand\ttab"},
      {std::string("nul\0byte", 8), std::string("nul\0byte", 8)},
      {"bell\x07 esc\x1b del\x7f", "bell\x07 esc\x1b del\x7f"},
      {"emoji \xf0\x9f\x94\xa5 ok", "emoji \xf0\x9f\x94\xa5 ok"},
      {"invalid \xff\xfe utf8", "invalid \xef\xbf\xbd\xef\xbf\xbd utf8"},
      {"truncated \xe2\x82", "truncated \xef\xbf\xbd\xef\xbf\xbd"},
      {"</script><script>alert(1)</script>", "</script><script>alert(1)</script>"},
      {"{\"ph\": \"X\"}, ", "{\"ph\": \"X\"}, "},
      {"", ""},
  };
  Trace t = record([&] {
    for (const Case& c : cases) {
      RecordFunction rf;
      rf.before(std::string_view(c.name));
    }
    mark("mark \"with\" quotes\\ \x01");
  });
  t.threads.at(0).name = "thread \"name\" \xff";
  t.warnings.push_back("warning with \"quotes\" and \n newline");
  std::string text = to_json(t);
  Parsed p;
  ASSERT_NO_THROW(p = parse_trace(text)) << text.substr(0, 2000);
  std::multiset<std::string> names;
  for (const Value& e : *p.events) {
    if (e.at("ph").text == "X") names.insert(e.at("name").text);
  }
  for (const Case& c : cases) {
    EXPECT_EQ(names.count(c.decoded), 1u) << "name not found after decoding: " << c.decoded;
  }
  EXPECT_EQ(events_with(p, "i", "mark \"with\" quotes\\ \x01").size(), 1u);
  bool thread_name_found = false;
  for (const Value* m : events_with(p, "M", "thread_name")) {
    if (m->at("args").at("name").text == "thread \"name\" \xef\xbf\xbd") thread_name_found = true;
  }
  EXPECT_TRUE(thread_name_found);
  const Value& warnings = p.doc.at("otherData").at("warnings");
  ASSERT_FALSE(warnings.items.empty());
  EXPECT_EQ(warnings.items.back().text, "warning with \"quotes\" and \n newline");
}

// ---- torch's readers ---------------------------------------------------------------------------

// A hand-made thread: run (Python) > outer_range > nn.Module: Linear (Python) > forward (Python)
// > aten::add, and a Python heap sample.
Trace torch_shaped_trace() {
  Trace t;
  t.threads.push_back(ThreadInfo{1, 11, 0, 0, "main", {}});
  const uint32_t run = t.intern(Symbol{"main.py(1): run", "main.py", 1, "run"});
  const uint32_t range = t.intern(Symbol{"outer_range", "", 0, "outer_range"});
  const uint32_t module = t.intern(Symbol{"nn.Module: Linear", "", 0, "nn.Module: Linear"});
  const uint32_t forward = t.intern(Symbol{"lib.py(5): forward", "lib.py", 5, "forward"});
  const uint32_t op = t.intern(Symbol{"aten::add", "", 0, "aten::add"});
  auto add = [&](int64_t start, int64_t dur, int64_t parent, uint32_t sym, EventCategory c) {
    TraceEvent e;
    e.start_ns = 1000 + start;
    e.dur_ns = dur;
    e.parent = parent;
    e.symbol = sym;
    e.depth = uint32_t(parent + 1);
    e.category = c;
    t.events.push_back(e);
  };
  add(0, 100, -1, run, EventCategory::kPythonFunction);
  add(10, 80, 0, range, EventCategory::kUserAnnotation);
  add(20, 60, 1, module, EventCategory::kPythonFunction);
  add(25, 50, 2, forward, EventCategory::kPythonFunction);
  add(30, 10, 3, op, EventCategory::kCpuOp);
  t.memory.push_back(MemorySample{1050, 0, 0, 64, 64, 0, kPythonAllocatorDevice});
  t.start_ns = 1000;
  t.stop_ns = 1100;
  return t;
}

const Value* event_named(const Parsed& p, const std::string& name) {
  for (const Value& e : *p.events) {
    if (e.at("ph").text == "X" && e.at("name").text == name) return &e;
  }
  ADD_FAILURE() << name << " not found";
  return nullptr;
}

TEST_F(ChromeTraceTest, PythonParentIdsNameTheNearestPythonFrameAndModulesHaveIds) {
  const Trace t = torch_shaped_trace();
  Parsed p = parse_trace(to_json(t));
  const Value* run = event_named(p, "main.py(1): run");
  const Value* module = event_named(p, "nn.Module: Linear");
  const Value* forward = event_named(p, "lib.py(5): forward");
  ASSERT_TRUE(run && module && forward);
  EXPECT_TRUE(run->at("args").at("Python parent id").is(Value::Type::kNull));
  // the range between them is skipped, as torch's python tracer links frames
  EXPECT_EQ(module->at("args").at("Python parent id").text, run->at("args").at("Python id").text);
  EXPECT_EQ(forward->at("args").at("Python parent id").text,
            module->at("args").at("Python id").text);
  EXPECT_EQ(module->at("args").at("Python module id").text, "0");
  EXPECT_EQ(forward->at("args").find("Python module id"), nullptr);
  // the plain export keeps the Python heap as a counter alone
  EXPECT_TRUE(events_with(p, "i", "[memory]").empty());
}

TEST_F(ChromeTraceTest, TheExportForTorchsReadersAddsMembersMemoryInstantsAndWallBase) {
  const Trace t = torch_shaped_trace();
  const Parsed plain = parse_trace(to_json(t));
  StringSink sink;
  write_chrome_json(MaterializedSource(t), sink, "\"traceName\":\"x.json\",\n\"k\":[1],\n",
                    1'000'000);
  const Parsed p = parse_trace(sink.out);
  EXPECT_EQ(p.doc.at("traceName").text, "x.json");
  EXPECT_EQ(p.doc.at("k").items.size(), 1u);
  EXPECT_EQ(p.doc.at("schemaVersion").text, "1");
  EXPECT_TRUE(p.doc.at("deviceProperties").is(Value::Type::kArray));
  EXPECT_EQ(p.base, plain.base + 1'000'000);
  auto memory = events_with(p, "i", "[memory]");
  ASSERT_EQ(memory.size(), 1u);
  const Value& args = memory[0]->at("args");
  EXPECT_EQ(args.at("Device Type").text, "0");
  EXPECT_EQ(args.at("Bytes").text, "64");
  EXPECT_EQ(args.at("Total Allocated").text, "64");
  EXPECT_NE(args.find("Addr"), nullptr);
  EXPECT_NE(args.find("Total Reserved"), nullptr);
  EXPECT_NE(args.find("Device Id"), nullptr);
}

TEST_F(ChromeTraceTest, ModuleInstancesHaveTheirNumberAsModuleId) {
  // the tracer names torch's module calls per instance ("Linear_12"): that number is the id
  Trace t = torch_shaped_trace();
  t.symbols[t.events[2].symbol].name = "nn.Module: Linear_12";
  Parsed p = parse_trace(to_json(t));
  const Value* module = event_named(p, "nn.Module: Linear_12");
  ASSERT_TRUE(module);
  EXPECT_EQ(module->at("args").at("Python module id").text, "12");
}

TEST_F(ChromeTraceTest, TensorMemoryLeavesOutThePythonHeapsInstants) {
  // beside torch's tensor memory (a sample with an address, device -1), the Python heap's
  // samples stay a counter: as "[memory]" instants they would mix into the tensor curve
  Trace t = torch_shaped_trace();
  t.memory.push_back(MemorySample{1060, 0, 0x1000, 4096, 4096, 0, -1});
  StringSink sink;
  write_chrome_json(MaterializedSource(t), sink, "", 0, /*python_heap_instants=*/false);
  const Parsed p = parse_trace(sink.out);
  auto memory = events_with(p, "i", "[memory]");
  ASSERT_EQ(memory.size(), 1u);
  EXPECT_EQ(memory[0]->at("args").at("Bytes").text, "4096");
  EXPECT_EQ(memory[0]->at("args").at("Addr").text, "4096");
  EXPECT_EQ(memory[0]->at("args").find("Python heap"), nullptr);
}

// ---- layout ----------------------------------------------------------------------------------

TEST_F(ChromeTraceTest, SlicesNestPerThreadWithTimesRelativeToTheBase) {
  Trace t = record([] {
    FRAMESCOPE_RANGE("main_outer");
    {
      FRAMESCOPE_USER_RANGE("main_inner");
      mark("main_mark");
    }
    std::thread th([] {
      FRAMESCOPE_RANGE("worker_outer");
      for (int i = 0; i < 3; ++i) {
        FRAMESCOPE_RANGE("worker_inner");
      }
    });
    th.join();
  });
  Parsed p = parse_trace(to_json(t));
  expect_x_slices_nest(p);
  EXPECT_EQ(p.doc.at("schemaVersion").text, "1");
  EXPECT_EQ(p.doc.at("otherData").at("profiler").text, "framescope");
  // Every slice maps back to its event exactly: base + ts == start_ns, dur == dur_ns.
  size_t checked = 0;
  for (const Value& e : *p.events) {
    const std::string& ph = e.at("ph").text;
    if (ph != "X" && ph != "i") continue;
    const Value* args = e.find("args");
    if (!args || !args->find("Ev Idx")) continue;
    size_t idx = size_t(std::stoull(args->at("Ev Idx").text));
    ASSERT_LT(idx, t.events.size());
    const TraceEvent& ev = t.events[idx];
    EXPECT_EQ(e.at("name").text, name_of(t, ev));
    EXPECT_EQ(p.base + us_literal_to_ns(e.at("ts").text), ev.start_ns);
    if (ph == "X") {
      EXPECT_EQ(us_literal_to_ns(e.at("dur").text), ev.dur_ns);
      EXPECT_EQ(e.at("cat").text, category_name(ev.category));
    }
    EXPECT_EQ(e.at("tid").text, std::to_string(t.threads[ev.thread].os_tid));
    ++checked;
  }
  EXPECT_EQ(checked, t.events.size());
  EXPECT_LE(p.base, t.start_ns);
  EXPECT_EQ(events_with(p, "X", "worker_inner").size(), 3u);
  EXPECT_EQ(events_with(p, "X", "main_inner")[0]->at("cat").text, "user_annotation");
  EXPECT_EQ(events_with(p, "X", "main_outer")[0]->at("cat").text, "cpu_op");
}

TEST_F(ChromeTraceTest, MetadataNamesProcessesAndThreads) {
  Trace t = record([] {
    FRAMESCOPE_RANGE("a");
    std::thread th([] { FRAMESCOPE_RANGE("b"); });
    th.join();
  });
  Parsed p = parse_trace(to_json(t));
  auto procs = events_with(p, "M", "process_name");
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_FALSE(procs[0]->at("args").at("name").text.empty());
  std::set<std::string> named_tids;
  for (const Value* m : events_with(p, "M", "thread_name")) named_tids.insert(m->at("tid").text);
  EXPECT_EQ(events_with(p, "M", "thread_sort_index").size(), t.threads.size());
  for (const Value& e : *p.events) {
    if (e.at("ph").text == "X") {
      EXPECT_EQ(named_tids.count(e.at("tid").text), 1u);
    }
  }
  EXPECT_EQ(named_tids.size(), 2u);
}

TEST_F(ChromeTraceTest, MarksAreInstantsAndMemoryIsACounter) {
  SessionConfig cfg;
  cfg.profile_memory = true;
  int x = 0;
  Trace t = record(
      [&] {
        mark("user_mark");
        record_memory(&x, 100, 100, 200);
        record_memory(&x, -100, 0, 200);
      },
      cfg);
  Parsed p = parse_trace(to_json(t));
  for (std::string_view m : {"__start_profile", "user_mark", "__stop_profile"}) {
    auto found = events_with(p, "i", m);
    ASSERT_EQ(found.size(), 1u) << m;
    EXPECT_EQ(found[0]->at("s").text, "t");
    EXPECT_EQ(found[0]->find("dur"), nullptr);
  }
  auto counters = events_with(p, "C", "Memory");
  ASSERT_EQ(counters.size(), 2u);
  EXPECT_EQ(counters[0]->at("args").at("Total Allocated").text, "100");
  EXPECT_EQ(counters[1]->at("args").at("Total Allocated").text, "0");
  EXPECT_EQ(counters[1]->at("args").at("Total Reserved").text, "200");
  auto samples = events_with(p, "i", "[memory]");
  ASSERT_EQ(samples.size(), 2u);
  EXPECT_EQ(samples[0]->at("args").at("Bytes").text, "100");
  EXPECT_EQ(samples[1]->at("args").at("Bytes").text, "-100");
  EXPECT_EQ(samples[0]->at("args").at("Addr").text, std::to_string(reinterpret_cast<uint64_t>(&x)));
  EXPECT_EQ(p.base + us_literal_to_ns(counters[0]->at("ts").text), t.memory[0].time_ns);
  EXPECT_EQ(events_with(p, "i", "Record Window End").size(), 1u);
}

TEST_F(ChromeTraceTest, AsyncRangesDoNotBreakNesting) {
  // A range ended on another thread after its parent closed: its slice would overlap the
  // parent's end, so it must not be exported as a nested "X" slice of its thread.
  std::unique_ptr<RecordFunction> async;
  Trace t = record([&] {
    {
      FRAMESCOPE_RANGE("parent");
      async = std::make_unique<RecordFunction>();
      async->before("async_op");
    }
    {
      FRAMESCOPE_RANGE("later_sibling");
    }
    std::thread th([&] { async->end(); });
    th.join();
  });
  async.reset();
  const TraceEvent& a = only_event(t, "async_op");
  ASSERT_TRUE(a.async_end);
  Parsed p = parse_trace(to_json(t));
  expect_x_slices_nest(p);
  // The async range is still in the trace, with its full duration.
  int64_t begin_ns = 0, end_ns = 0;
  int found = 0;
  for (const Value& e : *p.events) {
    if (e.at("name").text != "async_op") continue;
    ++found;
    const std::string& ph = e.at("ph").text;
    if (ph == "b") begin_ns = us_literal_to_ns(e.at("ts").text);
    if (ph == "e") end_ns = us_literal_to_ns(e.at("ts").text);
    if (ph == "X") {
      begin_ns = us_literal_to_ns(e.at("ts").text);
      end_ns = begin_ns + us_literal_to_ns(e.at("dur").text);
    }
  }
  EXPECT_GE(found, 1);
  EXPECT_EQ(p.base + begin_ns, a.start_ns);
  EXPECT_EQ(end_ns - begin_ns, a.dur_ns);
}

TEST_F(ChromeTraceTest, DetailsBecomeArgs) {
  SessionConfig cfg;
  cfg.record_shapes = true;
  cfg.with_flops = true;
  uint64_t handle = 0;
  add_global_callback(RecordFunctionCallback([&](const RecordFunction& rf) {
                        handle = rf.handle();
                        return nullptr;
                      }).needs_ids());
  Trace t = record(
      [] {
        RecordFunction rf;
        rf.before("aten::mm",
                  {RangeInput::of_shape({2, 3}), RangeInput::of_shape({3, 5}, "double"),
                   RangeInput::of_int(1)},
                  9);
      },
      cfg);
  Parsed p = parse_trace(to_json(t));
  auto mm = events_with(p, "X", "aten::mm");
  ASSERT_EQ(mm.size(), 1u);
  const Value& args = mm[0]->at("args");
  EXPECT_EQ(args.at("Record function id").text, std::to_string(handle));
  EXPECT_EQ(args.at("Sequence number").text, "9");
  EXPECT_EQ(args.at("flops").text, std::to_string(2 * 2 * 5 * 3));
  const Value& dims = args.at("Input Dims");
  ASSERT_EQ(dims.items.size(), 3u);
  ASSERT_EQ(dims.items[1].items.size(), 2u);
  EXPECT_EQ(dims.items[1].items[1].text, "5");
  EXPECT_TRUE(dims.items[2].items.empty());
  const Value& types = args.at("Input type");
  EXPECT_EQ(types.items[0].text, "Tensor");
  EXPECT_EQ(types.items[1].text, "double");
  EXPECT_EQ(types.items[2].text, "Scalar");
}

TEST_F(ChromeTraceTest, LargeTracesStayValid) {
  // More than the writer's 1 MiB internal buffer.
  Trace t = record([] {
    for (int i = 0; i < 20000; ++i) {
      FRAMESCOPE_RANGE("many");
    }
  });
  std::string text = to_json(t);
  EXPECT_GT(text.size(), size_t(2) << 20);
  Parsed p = parse_trace(text);
  EXPECT_EQ(events_with(p, "X", "many").size(), 20000u);
  expect_x_slices_nest(p);
}

TEST_F(ChromeTraceTest, EmptyAndMergedTraces) {
  Parsed empty = parse_trace(to_json(Trace{}));
  EXPECT_EQ(empty.base, 0);

  Trace a = record([] { FRAMESCOPE_RANGE("from_a"); });
  Trace b = record([] { FRAMESCOPE_RANGE("from_b"); });
  for (auto& th : b.threads) th.pid += 1;  // as if from another process
  a.merge(b);
  Parsed p = parse_trace(to_json(a));
  EXPECT_EQ(events_with(p, "M", "process_name").size(), 2u);
  ASSERT_EQ(events_with(p, "X", "from_b").size(), 1u);
  EXPECT_NE(events_with(p, "X", "from_b")[0]->at("pid").text,
            events_with(p, "X", "from_a")[0]->at("pid").text);
  expect_x_slices_nest(p);
}

TEST_F(ChromeTraceTest, WriteFailuresThrow) {
  Trace t = record([] { FRAMESCOPE_RANGE("x"); });
  try {
    write_chrome_trace(t, std::string("/nonexistent-dir/framescope/trace.json"));
    FAIL() << "no exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/framescope/trace.json"),
              std::string::npos)
        << e.what();
  }
  std::ostringstream bad;
  bad.setstate(std::ios::badbit);
  EXPECT_THROW(write_chrome_trace(t, bad), std::runtime_error);
}

TEST_F(ChromeTraceTest, WritesAFile) {
  Trace t = record([] { FRAMESCOPE_RANGE("to_file"); });
  std::string path = ::testing::TempDir() + "framescope_chrome_trace_test.json";
  write_chrome_trace(t, path);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  Parsed p = parse_trace(ss.str());
  EXPECT_EQ(events_with(p, "X", "to_file").size(), 1u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace framescope_test

namespace framescope_test {
namespace {

TEST_F(ChromeTraceTest, RecordProfileWritesOnStopOrDestruction) {
  std::string path = ::testing::TempDir() + "framescope_record_profile_test.json";
  {
    RecordProfile profile(path);
    EXPECT_TRUE(profiler_enabled());
    EXPECT_THROW(RecordProfile(path + ".2"), SessionError);
    FRAMESCOPE_RANGE("profiled");
  }
  EXPECT_FALSE(profiler_enabled());
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  Parsed p = parse_trace(ss.str());
  EXPECT_EQ(events_with(p, "X", "profiled").size(), 1u);
  std::remove(path.c_str());

  RecordProfile bad("/nonexistent-dir/framescope/profile.json");
  EXPECT_THROW(bad.stop(), std::runtime_error);
  EXPECT_FALSE(profiler_enabled());
  EXPECT_NO_THROW(bad.stop()) << "stop is idempotent";
}

}  // namespace
}  // namespace framescope_test
