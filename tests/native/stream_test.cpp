// tests/native/stream_test.cpp: streaming capture (SessionConfig::stream_path): chunks written
// while the session runs, back-pressure at the memory limit, exiting threads, errors, fork.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "trace_workload.h"

namespace framescope_test {
namespace {

class StreamTest : public CoreTest {
 protected:
  std::string temp_path(const char* name) {
    return ::testing::TempDir() + "/fs_stream_" + std::to_string(getpid()) + "_" + name;
  }
};

std::map<std::string, size_t> name_counts(const Trace& t) {
  std::map<std::string, size_t> out;
  for (const TraceEvent& e : t.events) ++out[t.symbols[e.symbol].name];
  return out;
}

off_t file_size(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 ? st.st_size : -1;
}

TEST_F(StreamTest, StreamedTraceHoldsWhatAnInMemoryOneDoes) {
  const int n = 6000;  // ~100k events per thread: many chunks each
  Trace in_memory = materialize(StoredTrace::from_raw(std::move(*record_workload(n))));
  const std::string path = temp_path("a.fstrace");
  // Four chunks (1 MiB) for three threads: chunks go to the file all the time, and threads wait
  // for the writer to give one back.
  RawTracePtr raw = record_workload(n, path, size_t(1) << 20);
  EXPECT_EQ(file_size(path), -1);  // a temporary until the trace is completed
  StoredTrace streamed = StoredTrace::from_raw(std::move(*raw));
  EXPECT_GT(file_size(path), off_t(3) << 20);  // three times the buffers, at least
  EXPECT_EQ(streamed.dropped_events(), 0u);
  Trace t = materialize(streamed);
  expect_well_formed(t);
  EXPECT_EQ(name_counts(t), name_counts(in_memory));
  EXPECT_EQ(t.memory.size(), in_memory.memory.size());
  EXPECT_EQ(t.details.size(), in_memory.details.size());
  // The detail of the last dynamic range of a thread: its inputs came through the hand-offs.
  const TraceEvent& last = t.events[find_events(t, "dyn1-4").back()];
  ASSERT_NE(last.detail, UINT32_MAX);
  EXPECT_EQ(t.details[last.detail].inputs.at(1).int_value, n - 1);
  EXPECT_TRUE(only_event(t, "ended elsewhere").async_end);
  // The file is the trace.
  EXPECT_EQ(replay_log(StoredTrace::load(path)), replay_log(streamed));
  std::remove(path.c_str());
}

// Resident size (KiB) of this process's mappings of a file whose path ends with `name` (from
// /proc/self/smaps), or -1 when it is not mapped.
long mapped_rss_kb(const std::string& name) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  long total = -1;
  bool in_file = false;
  while (std::getline(smaps, line)) {
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find(' ') != std::string::npos && line.find(':') > line.find(' ')) {
      // a mapping's header line: "start-end perms offset dev inode   path"
      in_file = line.size() >= name.size() &&
                line.compare(line.size() - name.size(), name.size(), name) == 0;
      if (in_file && total < 0) total = 0;
    } else if (in_file && line.rfind("Rss:", 0) == 0) {
      total += std::stol(line.substr(4));
    }
  }
  return total;
}

// Counts the replay's events and samples the file mapping's resident size as it goes.
struct RssSampler : TraceVisitor {
  std::string name;
  uint64_t events = 0;
  long max_rss_kb = 0;
  explicit RssSampler(std::string n) : name(std::move(n)) {}
  void count() {
    if (++events % 200000 == 0) max_rss_kb = std::max(max_rss_kb, mapped_rss_kb(name));
  }
  void slice_end(const Slice&) override { count(); }
  void instant(const Slice&) override { count(); }
  void async_slice(const Slice&) override { count(); }
};

TEST_F(StreamTest, LoadAndReplayOfABigStreamedFileReleaseItsPages) {
  // A streamed file past kReleasePagesFrom (64 MiB of slots), in ~330 chunks of 256 KiB on two
  // threads: reading it must not leave its pages resident. (Releasing only the whole pages
  // inside each chunk once left one or two pages per chunk mapped: RSS that grew with the file,
  // 50 MB for a 2.4 GB stream.)
  const std::string name = "fs_stream_" + std::to_string(getpid()) + "_big.fstrace";
  const std::string path = temp_path("big.fstrace");
  const int ranges = 1300000;  // per thread; two slots each
  SessionConfig cfg;
  cfg.stream_path = path;
  cfg.memory_limit_bytes = size_t(8) << 20;
  enable_profiler(cfg);
  auto work = [] {
    for (int i = 0; i < ranges; ++i) FRAMESCOPE_RANGE("r");
  };
  std::thread a(work), b(work);
  a.join();
  b.join();
  StoredTrace loaded = StoredTrace::from_raw(std::move(*disable_profiler()));
  ASSERT_GT(file_size(path), off_t(72) << 20);
  ASSERT_EQ(loaded.dropped_events(), 0u);
  const long after_load = mapped_rss_kb(name);
  ASSERT_GE(after_load, 0) << "the loaded trace is not a mapping of " << path;
  EXPECT_LE(after_load, 256) << "KiB of the file resident after the load";
  RssSampler v(name);
  loaded.visit(v);
  EXPECT_EQ(v.events, uint64_t(2) * ranges + 2);  // and the session's start and stop marks
  EXPECT_LE(mapped_rss_kb(name), 256) << "KiB of the file resident after a replay";
  EXPECT_LE(v.max_rss_kb, 16 << 10) << "KiB of the file resident during the replay";

  // The same bytes owned by anything but a file mapping are read in place and never released
  // (MADV_DONTNEED would zero anonymous memory).
  auto bytes = std::make_shared<std::string>();
  {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream ss;
    ss << in.rdbuf();
    *bytes = ss.str();
  }
  const size_t hash = std::hash<std::string>()(*bytes);
  {
    StoredTrace copy = StoredTrace::deserialize(*bytes, bytes);
    RssSampler w(name);
    copy.visit(w);
    EXPECT_EQ(w.events, v.events);
  }
  EXPECT_EQ(std::hash<std::string>()(*bytes), hash);
  std::remove(path.c_str());
}

TEST_F(StreamTest, ThreadsThatExitHandOverTheirChunks) {
  const std::string path = temp_path("exit.fstrace");
  SessionConfig cfg;
  cfg.stream_path = path;
  cfg.memory_limit_bytes = size_t(2) << 20;  // 8 chunks for 40 threads: only if they hand over
  enable_profiler(cfg);
  for (int k = 0; k < 40; ++k) {
    std::thread([] {
      for (int i = 0; i < 100; ++i) FRAMESCOPE_RANGE("short-lived");
    }).join();
  }
  Trace t = materialize(StoredTrace::from_raw(std::move(*disable_profiler())));
  EXPECT_EQ(find_events(t, "short-lived").size(), 4000u);
  EXPECT_EQ(t.dropped_events, 0u);
  EXPECT_EQ(t.threads.size(), 41u);
  std::remove(path.c_str());
}

TEST_F(StreamTest, ReplayAlsoCompletesTheFile) {
  const std::string path = temp_path("replay.fstrace");
  Trace t = replay(*record_workload(100, path));  // the plain C++ API: replay() of the raw trace
  EXPECT_EQ(find_events(t, "outer").size(), 300u);
  EXPECT_EQ(StoredTrace::load(path).event_count(), t.events.size());
  std::remove(path.c_str());
}

TEST_F(StreamTest, BadStreamsAreRefusedBeforeAnythingRuns) {
  SessionConfig cfg;
  cfg.stream_path = "/nonexistent-dir/x.fstrace";
  try {
    enable_profiler(cfg);
    FAIL() << "no error";
  } catch (const OutputError& e) {
    EXPECT_EQ(e.error_code(), ENOENT);
  }
  EXPECT_FALSE(profiler_enabled());
  cfg.stream_path = temp_path("keep.fstrace");
  cfg.on_limit = LimitPolicy::kKeepNewest;
  EXPECT_THROW(enable_profiler(cfg), SessionError);
  EXPECT_FALSE(profiler_enabled());
  EXPECT_EQ(file_size(cfg.stream_path), -1);
}

TEST_F(StreamTest, DroppingAnUnfinishedStreamLeavesNoFile) {
  const std::string path = temp_path("dropped.fstrace");
  {
    RawTracePtr raw = record_workload(100, path);
  }  // never completed
  EXPECT_EQ(file_size(path), -1);
  // No temporary left behind either.
  const std::string dir = ::testing::TempDir();
  std::unique_ptr<FILE, int (*)(FILE*)> ls(
      popen(("ls -a '" + dir + "' | grep -c 'fs_stream_" + std::to_string(getpid()) +
             "_dropped.*tmp' || true")
                .c_str(),
            "r"),
      pclose);
  char buf[32] = {};
  ASSERT_TRUE(fgets(buf, sizeof buf, ls.get()));
  EXPECT_EQ(std::string(buf), "0\n");
}

TEST_F(StreamTest, ForkedChildLeavesTheParentsStreamAlone) {
  const std::string path = temp_path("fork.fstrace");
  SessionConfig cfg;
  cfg.stream_path = path;
  cfg.memory_limit_bytes = size_t(1) << 20;
  enable_profiler(cfg);
  for (int i = 0; i < 50000; ++i) FRAMESCOPE_RANGE("before fork");
  const pid_t pid = fork();
  if (pid == 0) {
    // The writer thread does not exist here: recording (well past the memory limit) must not
    // wait for it, and the stop must not join it or touch the parent's file.
    for (int i = 0; i < 200000; ++i) FRAMESCOPE_RANGE("in child");
    RawTracePtr raw = disable_profiler();
    StoredTrace t = StoredTrace::from_raw(std::move(*raw));
    _exit(materialize(t).events.empty() ? 2 : 0);
  }
  ASSERT_GT(pid, 0);
  for (int i = 0; i < 50000; ++i) FRAMESCOPE_RANGE("after fork");
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  Trace t = materialize(StoredTrace::from_raw(std::move(*disable_profiler())));
  EXPECT_EQ(find_events(t, "before fork").size(), 50000u);
  EXPECT_EQ(find_events(t, "after fork").size(), 50000u);
  EXPECT_TRUE(find_events(t, "in child").empty());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace framescope_test
