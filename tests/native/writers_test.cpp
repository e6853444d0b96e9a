// tests/native/writers_test.cpp: every writer over a recorded trace, read back by a small decoder
// of its format (the Python tests use the real readers: Perfetto's protos, pstats.Stats...):
// what it holds matches the replay; gzip and atomic files; extreme hand-made traces.
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "framescope/writers.h"
#include "gzip_output.h"
#include "json_checker.h"
#include "trace_workload.h"

namespace framescope_test {
namespace {

using json_checker::parse;
using json_checker::Value;

class WritersTest : public CoreTest {
 protected:
  void SetUp() override {
    stored_ = StoredTrace::from_raw(std::move(*record_workload(150)));
    trace_ = materialize(stored_);
  }
  std::string write(ExportFormat f) {
    StringSink sink;
    write_format(f, stored_, sink);
    return sink.out;
  }
  size_t slices() const {
    size_t n = 0;
    for (const TraceEvent& e : trace_.events) n += e.dur_ns >= 0 && !e.async_end;
    return n;
  }
  size_t instants() const {
    size_t n = 0;
    for (const TraceEvent& e : trace_.events) n += e.dur_ns < 0;
    return n;
  }
  std::string temp_path(const char* name) {
    return ::testing::TempDir() + "/fs_writers_" + std::to_string(getpid()) + "_" + name;
  }
  StoredTrace stored_;
  Trace trace_;
};

// ---- protobuf wire format (enough to walk a Perfetto trace) -----------------------------------
struct Field {
  uint32_t number;
  uint32_t wire;
  uint64_t value;          // varint / fixed
  std::string_view bytes;  // length-delimited
};

bool read_varint(std::string_view& in, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64 && !in.empty(); shift += 7) {
    const uint8_t b = uint8_t(in[0]);
    in.remove_prefix(1);
    v |= uint64_t(b & 0x7f) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

std::vector<Field> fields(std::string_view in) {
  std::vector<Field> out;
  while (!in.empty()) {
    uint64_t tag;
    if (!read_varint(in, tag)) throw std::runtime_error("bad tag");
    Field f{uint32_t(tag >> 3), uint32_t(tag & 7), 0, {}};
    if (f.wire == 0) {
      if (!read_varint(in, f.value)) throw std::runtime_error("bad varint");
    } else if (f.wire == 1 || f.wire == 5) {
      const size_t n = f.wire == 1 ? 8 : 4;
      if (in.size() < n) throw std::runtime_error("truncated fixed");
      in.remove_prefix(n);
    } else if (f.wire == 2) {
      uint64_t n;
      if (!read_varint(in, n) || n > in.size()) throw std::runtime_error("bad length");
      f.bytes = in.substr(0, n);
      in.remove_prefix(n);
    } else {
      throw std::runtime_error("wire type " + std::to_string(f.wire));
    }
    out.push_back(f);
  }
  return out;
}

TEST_F(WritersTest, PerfettoPacketsHoldEverySlice) {
  const std::string pb = write(ExportFormat::kPerfetto);
  std::map<uint64_t, int> types;  // TrackEvent.type -> count
  size_t packets = 0, descriptors = 0;
  for (const Field& packet : fields(pb)) {
    ASSERT_EQ(packet.number, 1u);  // Trace.packet
    ASSERT_EQ(packet.wire, 2u);
    ++packets;
    for (const Field& f : fields(packet.bytes)) {
      if (f.number == 60) ++descriptors;  // track_descriptor
      if (f.number != 11) continue;       // track_event
      for (const Field& e : fields(f.bytes)) {
        if (e.number == 9) ++types[e.value];
      }
    }
  }
  size_t async = 0;
  for (const TraceEvent& e : trace_.events) async += e.async_end;
  EXPECT_EQ(types[1], slices() + async);          // SLICE_BEGIN
  EXPECT_EQ(types[2], slices() + async);          // SLICE_END
  EXPECT_EQ(types[3], instants());                // INSTANT
  EXPECT_EQ(types[4], 2 * trace_.memory.size());  // COUNTER: allocated and reserved
  EXPECT_GE(descriptors, 1 + trace_.threads.size());
  // Compact: about 13 bytes per begin or end of a slice here.
  EXPECT_LT(pb.size(), 24 * (2 * slices() + instants()) + 4096) << packets;
}

TEST_F(WritersTest, ChromeJsonParsesAndNests) {
  const Value doc = parse(write(ExportFormat::kChromeJson));
  const Value& events = doc.at("traceEvents");
  std::map<std::string, size_t> by_phase;
  std::map<std::string, size_t> names;
  for (const Value& e : events.items) {
    ++by_phase[e.at("ph").text];
    if (e.at("ph").text == "X") ++names[e.at("name").text];
  }
  EXPECT_EQ(by_phase["X"], slices());
  // marks, "[memory]" instants and "Record Window End"
  EXPECT_EQ(by_phase["i"], instants() + trace_.memory.size() + 1);
  EXPECT_EQ(by_phase["C"], trace_.memory.size());
  EXPECT_EQ(by_phase["b"], 1u);  // the range ended on another thread
  EXPECT_EQ(names["outer"], 450u);
  EXPECT_EQ(names["dyn1-2"], 30u);
  EXPECT_FALSE(doc.at("baseTimeNanoseconds").text.empty());
}

// asyncio Tasks' tracks (task_tracks.h): ranges named "asyncio.Task <name>" (what
// framescope._asyncio_tasks records for each step of a Task) become a track per Task and thread,
// its lifetime holding its steps, in Chrome JSON and Perfetto.
TEST_F(WritersTest, TaskStepsGetATrackPerTaskAndThread) {
  const Trace recorded = record([] {
    for (int i = 0; i < 3; ++i) {
      {
        RecordFunction a("asyncio.Task worker #1", RecordScope::kUserScope);
      }
      if (i < 2) RecordFunction b("asyncio.Task other #2", RecordScope::kUserScope);
    }
    std::thread([] {  // work the first Task handed to a thread (asyncio.to_thread)
      RecordFunction a("asyncio.Task worker #1", RecordScope::kUserScope);
    })
        .join();
  });
  const MaterializedSource source(recorded);
  StringSink json;
  write_chrome_json(source, json);
  std::map<std::string, std::vector<const Value*>> by_id;  // in file order
  const Value doc = parse(json.out);
  for (const Value& e : doc.at("traceEvents").items) {
    if (e.find("cat") && e.at("cat").text == "asyncio task") by_id[e.at("id").text].push_back(&e);
  }
  std::map<std::string, size_t> steps;  // track name -> steps
  for (const auto& [id, evs] : by_id) {
    ASSERT_GE(evs.size(), 4u) << id;
    const Value& life_b = *evs.front();
    const Value& life_e = *evs.back();
    EXPECT_EQ(life_b.at("ph").text, "b");
    EXPECT_EQ(life_e.at("ph").text, "e");
    EXPECT_EQ(life_b.at("name").text, life_e.at("name").text);
    EXPECT_EQ(life_b.at("ts").number(), evs[1]->at("ts").number());  // the first step's start
    for (size_t i = 1; i + 1 < evs.size(); ++i) {
      EXPECT_EQ(evs[i]->at("ph").text, i % 2 ? "b" : "e");
      EXPECT_EQ(evs[i]->at("name").text, "step");
    }
    EXPECT_EQ(life_e.at("args").at("steps").number(), double((evs.size() - 2) / 2));
    steps[life_b.at("name").text] = (evs.size() - 2) / 2;
  }
  ASSERT_EQ(steps.size(), 3u);
  EXPECT_EQ(steps["worker #1"], 3u);
  EXPECT_EQ(steps["other #2"], 2u);
  size_t elsewhere = 0;
  for (const auto& [name, n] : steps) {
    if (name.rfind("worker #1 on ", 0) == 0) elsewhere += n;
  }
  EXPECT_EQ(elsewhere, 1u);

  // Perfetto: a descriptor per track (under the process), a lifetime slice and one per step.
  StringSink pb;
  write_perfetto(source, pb);
  std::map<uint64_t, std::string> names;  // task track uuid -> name
  std::map<uint64_t, std::vector<std::string>> begins;
  std::map<uint64_t, size_t> ends;
  for (const Field& packet : fields(pb.out)) {
    for (const Field& f : fields(packet.bytes)) {
      if (f.number == 60) {  // track_descriptor
        uint64_t uuid = 0;
        std::string name;
        for (const Field& d : fields(f.bytes)) {
          if (d.number == 1) uuid = d.value;
          if (d.number == 2) name = std::string(d.bytes);
        }
        if (uuid >> 60 == 7) names[uuid] = name;
      } else if (f.number == 11) {  // track_event
        uint64_t track = 0, type = 0;
        std::string name;
        for (const Field& e : fields(f.bytes)) {
          if (e.number == 11) track = e.value;
          if (e.number == 9) type = e.value;
          if (e.number == 23) name = std::string(e.bytes);
        }
        if (track >> 60 != 7) continue;
        EXPECT_TRUE(names.count(track)) << "a descriptor precedes the track's events";
        if (type == 1) begins[track].push_back(name);
        if (type == 2) ++ends[track];
      }
    }
  }
  ASSERT_EQ(names.size(), 3u);
  for (const auto& [uuid, name] : names) {
    ASSERT_FALSE(begins[uuid].empty());
    EXPECT_EQ(begins[uuid].front(), name);  // the lifetime, then its steps
    EXPECT_EQ(begins[uuid].size() - 1, steps[name]) << name;
    EXPECT_EQ(ends[uuid], begins[uuid].size());
  }
}

TEST_F(WritersTest, SpeedscopeEventsBalancePerThread) {
  const Value doc = parse(write(ExportFormat::kSpeedscope));
  const size_t frames = doc.at("shared").at("frames").items.size();
  size_t opens = 0;
  for (const Value& p : doc.at("profiles").items) {
    EXPECT_EQ(p.at("type").text, "evented");
    std::vector<uint64_t> stack;
    double last = -1;
    for (const Value& e : p.at("events").items) {
      const double at = e.at("at").number();
      EXPECT_GE(at, last);
      last = at;
      const uint64_t frame = std::stoull(e.at("frame").text);
      ASSERT_LT(frame, frames);
      if (e.at("type").text == "O") {
        stack.push_back(frame);
        ++opens;
      } else {
        ASSERT_FALSE(stack.empty());
        EXPECT_EQ(stack.back(), frame);  // closes last-in, first-out
        stack.pop_back();
      }
    }
    EXPECT_TRUE(stack.empty());
  }
  EXPECT_EQ(opens, slices());
}

TEST_F(WritersTest, CollapsedStacksSumToEachThreadsSelfTime) {
  std::istringstream in(write(ExportFormat::kCollapsed));
  std::map<std::string, int64_t> per_root;
  std::string line;
  size_t lines = 0;
  while (std::getline(in, line)) {
    const size_t space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos) << line;
    per_root[line.substr(0, line.find(';'))] += std::stoll(line.substr(space + 1));
    ++lines;
  }
  EXPECT_GT(lines, 10u);
  EXPECT_EQ(per_root.size(), trace_.threads.size());
  // Each thread's top-level slices' total, in µs (the lines carry their rounding).
  std::map<uint32_t, int64_t> top_ns;
  for (const TraceEvent& e : trace_.events) {
    if (e.parent < 0 && e.dur_ns >= 0 && !e.async_end) top_ns[e.thread] += e.dur_ns;
  }
  int64_t total_lines = 0, total_top = 0;
  for (const auto& [root, us] : per_root) total_lines += us;
  for (const auto& [thread, ns] : top_ns) total_top += ns / 1000;
  EXPECT_NEAR(double(total_lines), double(total_top), double(trace_.threads.size()));
}

// ---- marshal (the subset pstats files use) ----------------------------------------------------
struct Marshal {
  std::string_view in;
  char type() {
    if (in.empty()) throw std::runtime_error("truncated marshal");
    const char t = char(in[0] & 0x7f);
    in.remove_prefix(1);
    return t;
  }
  uint32_t u32() {
    if (in.size() < 4) throw std::runtime_error("truncated u32");
    uint32_t v;
    std::memcpy(&v, in.data(), 4);
    in.remove_prefix(4);
    return v;
  }
  // Reads one value; returns a printable form of scalars and counts dict entries.
  std::string value(size_t* dict_entries = nullptr) {
    switch (type()) {
      case 'i':
        return std::to_string(int32_t(u32()));
      case 'g': {
        double d;
        if (in.size() < 8) throw std::runtime_error("truncated float");
        std::memcpy(&d, in.data(), 8);
        in.remove_prefix(8);
        return std::to_string(d);
      }
      case 'u': {
        const uint32_t n = u32();
        if (in.size() < n) throw std::runtime_error("truncated str");
        std::string s(in.substr(0, n));
        in.remove_prefix(n);
        return s;
      }
      case ')': {
        const uint8_t n = uint8_t(in.at(0));
        in.remove_prefix(1);
        std::string out = "(";
        for (uint8_t i = 0; i < n; ++i) out += value() + ",";
        return out + ")";
      }
      case '{': {
        size_t n = 0;
        while (!in.empty() && in[0] != '0') {
          value();
          value();
          ++n;
        }
        type();  // '0'
        if (dict_entries) *dict_entries = n;
        return "{" + std::to_string(n) + "}";
      }
      default:
        throw std::runtime_error("unexpected marshal type");
    }
  }
};

TEST_F(WritersTest, PstatsIsOneMarshalledDictWithAnEntryPerFunction) {
  const std::string bytes = write(ExportFormat::kPstats);
  Marshal m{bytes};
  size_t entries = 0;
  m.value(&entries);
  EXPECT_TRUE(m.in.empty());
  // Ranges are functions ('~', 0, name); marks are left out.
  std::set<std::string> named;
  for (const TraceEvent& e : trace_.events) {
    if (e.dur_ns >= 0) named.insert(trace_.symbols[e.symbol].name);
  }
  EXPECT_EQ(entries, named.size());
}

TEST_F(WritersTest, GzipRoundTripsAndFilesAreReplacedAtomically) {
  const std::string plain = write(ExportFormat::kChromeJson);
  const std::string path = temp_path("t.json.gz");
  {
    auto sink = open_file_output(path, true);
    write_format(ExportFormat::kChromeJson, stored_, *sink);
    sink->commit();
  }
  gzFile gz = gzopen(path.c_str(), "rb");
  ASSERT_NE(gz, nullptr);
  std::string back;
  char buf[1 << 16];
  int n;
  while ((n = gzread(gz, buf, sizeof buf)) > 0) back.append(buf, size_t(n));
  gzclose(gz);
  EXPECT_TRUE(back == plain);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_LT(size_t(st.st_size), plain.size() / 4);
  // A sink dropped without commit() leaves the old file as it was.
  {
    auto sink = open_file_output(path, true);
    sink->write("partial", 7);
  }
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  gz = gzopen(path.c_str(), "rb");
  n = gzread(gz, buf, 16);
  gzclose(gz);
  EXPECT_EQ(std::string(buf, size_t(n)), plain.substr(0, 16));
  std::remove(path.c_str());
  try {
    open_file_output("/nonexistent-dir/t.json");
    FAIL() << "no error";
  } catch (const OutputError& e) {
    EXPECT_EQ(e.error_code(), ENOENT);
    EXPECT_EQ(e.path(), "/nonexistent-dir/t.json");
  }
  EXPECT_THROW(open_file_output(std::string("a\0b", 3)), std::invalid_argument);
}

// Inflates one gzip member; fails the test unless it ends exactly at the end of `gz`.
std::string gunzip_one_member(const std::string& gz) {
  z_stream z{};
  EXPECT_EQ(inflateInit2(&z, 15 + 16), Z_OK);
  std::string out(gz.size() * 20 + 1024, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  z.avail_in = uInt(gz.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  EXPECT_EQ(inflate(&z, Z_FINISH), Z_STREAM_END);
  EXPECT_EQ(z.avail_in, 0u) << "bytes after the first gzip member";
  out.resize(z.total_out);
  inflateEnd(&z);
  return out;
}

TEST_F(WritersTest, ParallelGzipIsOneMemberWithTheRatioOfASequentialStream) {
  // 5.5 MB of trace text (blocks of 1 MiB cut it anywhere) plus some incompressible bytes.
  std::string text = write(ExportFormat::kChromeJson);
  while (text.size() < (size_t(11) << 19)) text += text;
  std::mt19937 rng(3);
  for (int i = 0; i < 100000; ++i) text.push_back(char(rng()));
  std::map<unsigned, size_t> sizes;
  for (unsigned workers : {0u, 1u, 3u}) {
    auto sink = std::make_unique<StringSink>();
    StringSink* raw = sink.get();
    auto gz = exporters::make_gzip_sink(std::move(sink), workers);
    // Writes of odd sizes, as a writer's blocks come.
    for (size_t at = 0; at < text.size();) {
      const size_t n = std::min(text.size() - at, size_t(rng() % 300000));
      gz->write(text.data() + at, n);
      at += n;
    }
    gz->commit();
    EXPECT_TRUE(gunzip_one_member(raw->out) == text) << workers << " workers";
    sizes[workers] = raw->out.size();
  }
  // One sequential level-1 stream of the same text, for the ratio.
  z_stream z{};
  ASSERT_EQ(deflateInit2(&z, 1, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string seq(deflateBound(&z, uLong(text.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(text.data());
  z.avail_in = uInt(text.size());
  z.next_out = reinterpret_cast<Bytef*>(seq.data());
  z.avail_out = uInt(seq.size());
  ASSERT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  const size_t sequential = z.total_out;
  deflateEnd(&z);
  EXPECT_EQ(sizes[0], sizes[3]);  // the same bytes whoever compresses
  EXPECT_LT(double(sizes[3]), 1.01 * double(sequential));
  // Empty input is a valid (empty) gzip file too.
  auto sink = std::make_unique<StringSink>();
  StringSink* raw = sink.get();
  auto gz = exporters::make_gzip_sink(std::move(sink), 2);
  gz->commit();
  EXPECT_EQ(gunzip_one_member(raw->out), "");
}

TEST_F(WritersTest, FormatsByPathAndName) {
  EXPECT_EQ(format_for_path("a.json"), ExportFormat::kChromeJson);
  EXPECT_EQ(format_for_path("a.json.gz"), ExportFormat::kChromeJson);
  EXPECT_EQ(format_for_path("a.speedscope.json"), ExportFormat::kSpeedscope);
  EXPECT_EQ(format_for_path("a.pftrace"), ExportFormat::kPerfetto);
  EXPECT_EQ(format_for_path("a.prof"), ExportFormat::kPstats);
  EXPECT_EQ(format_for_path("a.folded"), ExportFormat::kCollapsed);
  EXPECT_THROW(format_for_path("a.txt"), std::invalid_argument);
  EXPECT_EQ(format_for_path("a.speedscope.json.gz"), ExportFormat::kSpeedscope);
  EXPECT_EQ(parse_format("perfetto"), ExportFormat::kPerfetto);
  EXPECT_THROW(parse_format("excel"), std::invalid_argument);
  // The table both read: every name, alias and ending reaches its own format.
  size_t count = 0;
  const FormatNames* formats = export_formats(&count);
  ASSERT_EQ(count, 5u);
  for (size_t i = 0; i < count; ++i) {
    const FormatNames& f = formats[i];
    EXPECT_EQ(parse_format(f.name), f.format) << f.name;
    if (!f.alias.empty()) {
      EXPECT_EQ(parse_format(f.alias), f.format) << f.alias;
    }
    EXPECT_EQ(format_for_path("x" + std::string(f.extension)), f.format) << f.extension;
    for (std::string_view suffix : f.suffixes) {
      if (!suffix.empty()) {
        EXPECT_EQ(format_for_path("x" + std::string(suffix) + ".gz"), f.format);
      }
    }
  }
}

TEST_F(WritersTest, ExtremeHandMadeTracesAreWrittenWithoutOverflow) {
  // Any times at all (UBSan watches the arithmetic): every writer clamps through the replay.
  Trace t;
  t.threads.push_back(ThreadInfo{1, 2, 3, 4, "t"});
  Symbol s;
  s.name = s.function = "x";
  t.intern(s);
  auto ev = [](int64_t start, int64_t dur, int64_t parent, uint32_t depth) {
    TraceEvent e;
    e.start_ns = start;
    e.dur_ns = dur;
    e.parent = parent;
    e.depth = depth;
    return e;
  };
  t.events = {ev(INT64_MIN, INT64_MAX, -1, 0), ev(INT64_MIN + 5, INT64_MAX, 0, 1),
              ev(INT64_MAX, INT64_MAX, -1, 0), ev(0, -1, -1, 0)};
  t.memory.push_back(MemorySample{INT64_MIN, 0, 0, 1, INT64_MAX, INT64_MIN, 0});
  t.start_ns = INT64_MIN;
  t.stop_ns = INT64_MAX;
  MaterializedSource source(t);
  for (ExportFormat f : {ExportFormat::kChromeJson, ExportFormat::kPerfetto, ExportFormat::kPstats,
                         ExportFormat::kSpeedscope, ExportFormat::kCollapsed}) {
    StringSink sink;
    EXPECT_NO_THROW(write_format(f, source, sink)) << int(f);
    EXPECT_FALSE(sink.out.empty());
  }
  StringSink json;
  write_chrome_json(source, json);
  EXPECT_NO_THROW(parse(json.out));  // still valid JSON
}

}  // namespace
}  // namespace framescope_test

namespace framescope_test {
namespace {

TEST_F(WritersTest, CollapsedStacksFoldFramesDeeperThanTheLimit) {
  // One chain 5000 deep, every frame 2 µs of self time: written whole, the lines would hold
  // 12.5 M frames (the output grows with the square of the depth). Frames from depth 1000 on
  // fold into one "[deeper frames]" frame that keeps their self time.
  constexpr int64_t kDepth = 5000;
  Trace t;
  t.threads.push_back(ThreadInfo{1, 2, 3, 4, "deep"});
  Symbol s;
  s.name = s.function = "f";
  t.intern(s);
  for (int64_t i = 0; i < kDepth; ++i) {
    TraceEvent e;
    e.start_ns = i * 1000;
    e.dur_ns = (2 * kDepth - 2 * i) * 1000;
    e.parent = i - 1;
    e.depth = uint32_t(i);
    t.events.push_back(e);
  }
  t.start_ns = 0;
  t.stop_ns = 2 * kDepth * 1000;
  MaterializedSource source(t);
  StringSink sink;
  write_collapsed(source, sink);
  std::istringstream in(sink.out);
  std::string line;
  int64_t sum = 0, lines = 0;
  size_t deepest = 0;
  while (std::getline(in, line)) {
    ++lines;
    const size_t space = line.rfind(' ');
    ASSERT_NE(space, std::string::npos);
    sum += std::stoll(line.substr(space + 1));
    const std::string stack = line.substr(0, space);
    const size_t frames = size_t(std::count(stack.begin(), stack.end(), ';'));
    deepest = std::max(deepest, frames);
    if (frames == 1001) {
      EXPECT_EQ(stack.substr(stack.rfind(';') + 1), "[deeper frames]");
      EXPECT_EQ(std::stoll(line.substr(space + 1)), 2 * (kDepth - 1000));
    }
  }
  EXPECT_EQ(lines, 1001);
  EXPECT_EQ(deepest, 1001u);   // 1000 frames and the folded one, below the thread's root
  EXPECT_EQ(sum, 2 * kDepth);  // every frame's self time, in µs
  EXPECT_LT(sink.out.size(), 4u << 20);
}

}  // namespace
}  // namespace framescope_test
