// tests/native/trace_workload.h: a recorded session with every kind of event, and a visitor that
// logs a replay as text, shared by the stored-trace, streaming and writer tests.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "framescope/stored_trace.h"
#include "test_support.h"

namespace framescope_test {

/// Records `iterations` rounds on the calling thread and on two workers: nested static ranges,
/// ranges with dynamic names and inputs, marks, memory samples, and one range ended on another
/// thread. With `stream_path`, the session streams there (with a small memory limit).
inline RawTracePtr record_workload(int iterations, const std::string& stream_path = {},
                                   size_t memory_limit = size_t(1) << 30) {
  SessionConfig cfg;
  cfg.record_shapes = true;
  cfg.profile_memory = true;
  cfg.stream_path = stream_path;
  cfg.memory_limit_bytes = memory_limit;
  enable_profiler(cfg);
  auto body = [iterations](int who) {
    for (int i = 0; i < iterations; ++i) {
      FRAMESCOPE_RANGE("outer");
      {
        FRAMESCOPE_RANGE("inner");
        RecordFunction dynamic;
        dynamic.before("dyn" + std::to_string(who) + "-" + std::to_string(i % 5),
                       {RangeInput::of_shape({i % 3 + 1, 4}, "float"), RangeInput::of_int(i)});
      }
      if (i % 10 == 0) mark("mark" + std::to_string(i % 3));
      if (i % 25 == 0) record_memory(reinterpret_cast<void*>(uintptr_t(0x1000 + i)), 64, i, 0);
    }
  };
  std::unique_ptr<RecordFunction> async;
  std::thread a([&] { body(1); });
  std::thread b([&] {
    async = std::make_unique<RecordFunction>(RecordScope::kUserScope);
    async->before("ended elsewhere");
    body(2);
  });
  body(0);
  a.join();
  b.join();
  async->end();
  return disable_profiler();
}

/// Logs every visitor call as one line ("B 12 p=3 d=2 s=outer ..."), to compare replays.
class LogVisitor final : public TraceVisitor {
 public:
  std::vector<std::string> log;
  void begin_trace(const TraceView& v) override {
    view_ = &v;
    log.push_back("trace " + std::to_string(v.threads.size()) + " " + std::to_string(v.start_ns));
  }
  void begin_thread(uint32_t t) override { log.push_back("thread " + std::to_string(t)); }
  void slice_begin(const Slice& s) override { log.push_back("B " + text(s)); }
  void slice_end(const Slice& s) override { log.push_back("E " + text(s)); }
  void instant(const Slice& s) override { log.push_back("I " + text(s)); }
  void async_slice(const Slice& s) override { log.push_back("A " + text(s)); }
  void memory(const MemorySample& m) override {
    log.push_back("M " + std::to_string(m.time_ns) + " " + std::to_string(m.address));
  }
  void end_thread(uint32_t t) override { log.push_back("end " + std::to_string(t)); }
  void end_trace() override { log.push_back("end trace"); }

 private:
  std::string text(const Slice& s) const {
    return std::to_string(s.index) + " p=" + std::to_string(s.parent) +
           " d=" + std::to_string(s.depth) + " t=" + std::to_string(s.thread) +
           " at=" + std::to_string(s.start_ns) + " dur=" + std::to_string(s.dur_ns) +
           " s=" + view_->symbols.at(s.symbol).name + " det=" + std::to_string(s.detail) +
           (s.open_at_stop ? " open" : "");
  }
  const TraceView* view_ = nullptr;
};

inline std::vector<std::string> replay_log(const TraceSource& source) {
  LogVisitor v;
  source.visit(v);
  return v.log;
}

}  // namespace framescope_test
