// tests/native/stream_test.cpp: streaming capture (SessionConfig::stream_path): chunks written
// while the session runs, back-pressure at the memory limit, exiting threads, errors, fork.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <map>

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
