// tests/native/trace_processes_test.cpp: a stored trace's process table, pid separation on
// merge, and both through the .fstrace round trip and the writers.
#include <algorithm>
#include <string>

#include "framescope/stored_trace.h"
#include "framescope/writers.h"
#include "test_support.h"

namespace framescope_test {
namespace {

class TraceProcessesTest : public CoreTest {};

/// A stored trace of one session with one range on this thread.
StoredTrace recorded(const char* name) {
  enable_profiler({});
  {
    ScopedRange r(name);
  }
  return StoredTrace::from_raw(std::move(*disable_profiler()));
}

ProcessInfo process(int64_t pid, std::string name) {
  ProcessInfo p;
  p.pid = pid;
  p.name = std::move(name);
  p.labels = {"python train.py", "rank 1"};
  p.sort_index = 7;
  p.metadata = "{\"rank\": 1}";
  return p;
}

std::string chrome_json(const StoredTrace& t) {
  StringSink sink;
  write_format(ExportFormat::kChromeJson, t, sink);
  return sink.out;
}

TEST_F(TraceProcessesTest, WithProcessAddsOrReplacesTheEntryOfItsPid) {
  StoredTrace t = recorded("a");
  const int64_t pid = t.threads().at(0).pid;
  StoredTrace named = t.with_process(process(pid, "rank 1"));
  EXPECT_TRUE(t.processes().empty());  // the original is unchanged
  ASSERT_EQ(named.processes().size(), 1u);
  StoredTrace renamed = named.with_process(process(pid, "rank 2"));
  ASSERT_EQ(renamed.processes().size(), 1u);
  EXPECT_EQ(renamed.processes()[0].name, "rank 2");
}

TEST_F(TraceProcessesTest, ProcessTableSurvivesSerialization) {
  StoredTrace t = recorded("a");
  const int64_t pid = t.threads().at(0).pid;
  StoredTrace back = StoredTrace::deserialize(t.with_process(process(pid, "rank 1")).serialize());
  ASSERT_EQ(back.processes().size(), 1u);
  const ProcessInfo& p = back.processes()[0];
  EXPECT_EQ(p.pid, pid);
  EXPECT_EQ(p.name, "rank 1");
  EXPECT_EQ(p.labels, (std::vector<std::string>{"python train.py", "rank 1"}));
  EXPECT_EQ(p.sort_index, 7);
  EXPECT_EQ(p.metadata, "{\"rank\": 1}");
}

TEST_F(TraceProcessesTest, MergeSeparatesClashingPidsAndTids) {
  // Two traces of this process stand for two hosts whose pids and tids happen to be equal.
  StoredTrace a = recorded("a");
  StoredTrace b = recorded("b");
  const int64_t pid = a.threads().at(0).pid;
  a = a.with_process(process(pid, "rank 0"));
  b = b.with_process(process(pid, "rank 1"));
  StoredTrace joined = a.merged(b, 0, false);
  EXPECT_EQ(joined.threads()[0].pid, joined.threads()[1].pid);  // kept: same process
  ASSERT_EQ(joined.processes().size(), 1u);                     // this trace's entry wins

  StoredTrace apart = a.merged(b, 5, true);
  ASSERT_EQ(apart.threads().size(), 2u);
  const ThreadInfo& mine = apart.threads()[0];
  const ThreadInfo& theirs = apart.threads()[1];
  EXPECT_EQ(mine.pid, pid);
  EXPECT_NE(theirs.pid, pid);
  EXPECT_NE(theirs.os_tid, mine.os_tid);
  ASSERT_EQ(apart.processes().size(), 2u);
  EXPECT_EQ(apart.processes()[1].pid, theirs.pid);
  EXPECT_EQ(apart.processes()[1].name, "rank 1");
  // A main thread's tid equals its pid: it is renumbered the same way.
  if (a.threads()[0].os_tid == uint64_t(pid)) {
    EXPECT_EQ(theirs.os_tid, uint64_t(theirs.pid));
  }

  // The separation and the table are saved with the merged trace.
  StoredTrace back = StoredTrace::deserialize(apart.serialize());
  ASSERT_EQ(back.threads().size(), 2u);
  EXPECT_EQ(back.threads()[1].pid, theirs.pid);
  EXPECT_EQ(back.threads()[1].os_tid, theirs.os_tid);
  EXPECT_EQ(back.processes().size(), 2u);
  EXPECT_EQ(back.start_ns(), apart.start_ns());
}

TEST_F(TraceProcessesTest, ShiftedCopyKeepsTheTable) {
  StoredTrace t = recorded("a");
  t = t.with_process(process(t.threads().at(0).pid, "rank 1"));
  StoredTrace shifted = StoredTrace().merged(t, 1000);
  EXPECT_EQ(shifted.start_ns(), t.start_ns() + 1000);
  EXPECT_EQ(shifted.processes().size(), 1u);
}

TEST_F(TraceProcessesTest, ChromeJsonNamesLabelsAndOrdersProcesses) {
  StoredTrace t = recorded("a");
  const int64_t pid = t.threads().at(0).pid;
  const std::string pid_text = std::to_string(pid);
  std::string plain = chrome_json(t);
  EXPECT_NE(plain.find("\"args\":{\"name\":\"python " + pid_text + "\"}"), std::string::npos);
  std::string named = chrome_json(t.with_process(process(pid, "rank \"1\"")));
  EXPECT_NE(named.find("\"name\":\"process_name\",\"pid\":" + pid_text +
                       ",\"tid\":0,\"args\":{\"name\":\"rank \\\"1\\\"\"}"),
            std::string::npos)
      << named.substr(0, 600);
  EXPECT_NE(named.find("\"args\":{\"labels\":\"python train.py,rank 1\"}"), std::string::npos);
  EXPECT_NE(named.find("\"args\":{\"sort_index\":7}"), std::string::npos);
}

TEST_F(TraceProcessesTest, MalformedProcessTablesAreRejected) {
  StoredTrace t = recorded("a");
  const int64_t pid = t.threads().at(0).pid;
  std::string bytes = t.with_process(process(pid, "x")).serialize();
  // Truncating inside the process table record.
  EXPECT_THROW(StoredTrace::deserialize(std::string_view(bytes).substr(0, bytes.size() - 20)),
               TraceFormatError);
  // Two tables.
  std::string plain = t.serialize();
  std::string table = bytes.substr(plain.size());
  EXPECT_THROW(StoredTrace::deserialize(bytes + table), TraceFormatError);
}

}  // namespace
}  // namespace framescope_test
