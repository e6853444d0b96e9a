// cpp/export/speedscope.cpp: speedscope file format writer: an evented profile per thread.
//
// {"$schema": ..., "shared": {"frames": [{name, file?, line?}]}, "profiles": [{"type":
// "evented", name, unit, startValue, endValue, events: [{"type": "O"|"C", at, frame}]}]}
// (speedscope's src/lib/file-format-spec.ts). Frames are the trace's symbols; `at` is in
// nanoseconds from the trace start. Events nest strictly (NestingAdapter).
#include <string>
#include <vector>

#include "framescope/chrome_trace.h"
#include "framescope/writers.h"
#include "nesting_adapter.h"
#include "text_buffer.h"

namespace framescope {
namespace exporters {

namespace {

class SpeedscopeWriter final : public TraceVisitor {
 public:
  SpeedscopeWriter(OutputSink& out, int64_t base) : out_(out), base_(base) {}

  void begin_trace(const TraceView& v) override {
    view_ = &v;
    std::string& b = out_.raw();
    out_.put("{\"$schema\":\"https://www.speedscope.app/file-format-schema.json\",");
    out_.put("\"exporter\":\"framescope\",\"name\":\"framescope trace\",\"activeProfileIndex\":0,");
    out_.put("\"shared\":{\"frames\":[");
    for (size_t i = 0; i < v.symbols.size(); ++i) {
      const Symbol& s = v.symbols[i];
      if (i) out_.put(',');
      out_.put("{\"name\":\"");
      append_json_escaped(b, s.name);
      out_.put('"');
      if (!s.file.empty() && s.file != "~") {
        out_.put(",\"file\":\"");
        append_json_escaped(b, s.file);
        out_.put("\",\"line\":");
        out_.put_int(s.line);
      }
      out_.put('}');
      out_.maybe_flush();
    }
    out_.put("]},\"profiles\":[");
  }
  void begin_thread(uint32_t thread) override {
    if (thread_count_++) out_.put(',');
    const ThreadInfo& th = view_->threads[thread];
    out_.put("{\"type\":\"evented\",\"name\":\"");
    if (th.name.empty()) {
      out_.put("thread");
    } else {
      append_json_escaped(out_.raw(), th.name);
    }
    out_.put(" (");
    out_.put_int(th.pid);
    out_.put('/');
    out_.put_uint(th.os_tid);
    out_.put(")\",\"unit\":\"nanoseconds\",\"events\":[");
    first_ = true;
    start_ = end_ = -1;
  }
  void slice_begin(const Slice& s) override { event('O', s.symbol, s.start_ns); }
  void slice_end(const Slice& s) override { event('C', s.symbol, s.start_ns + s.dur_ns); }
  void end_thread(uint32_t) override {
    out_.put("],\"startValue\":");
    out_.put_int(start_ < 0 ? 0 : start_);
    out_.put(",\"endValue\":");
    out_.put_int(end_ < 0 ? 0 : end_);
    out_.put('}');
  }
  void end_trace() override {
    out_.put("]}\n");
    out_.flush();
  }

 private:
  void event(char type, uint32_t frame, int64_t t) {
    int64_t at = t - base_;
    if (at < last_at_ && !first_) at = last_at_;  // `at` must not decrease within a profile
    last_at_ = at;
    if (start_ < 0) start_ = at;
    end_ = at;
    // Assembled on the stack and appended once (at most ~60 bytes).
    char buf[80];
    CharWriter w{buf};
    if (!first_) w.put(',');
    first_ = false;
    w.put("{\"type\":\"");
    w.put(type);
    w.put("\",\"at\":");
    w.put_int(at);
    w.put(",\"frame\":");
    w.put_uint(frame);
    w.put('}');
    out_.put(std::string_view(buf, size_t(w.p - buf)));
    out_.maybe_flush();
  }

  TextBuffer out_;
  int64_t base_;
  const TraceView* view_ = nullptr;
  size_t thread_count_ = 0;
  bool first_ = true;
  int64_t start_ = -1, end_ = -1, last_at_ = 0;
};

}  // namespace
}  // namespace exporters

void write_speedscope(const TraceSource& source, OutputSink& out) {
  exporters::SpeedscopeWriter w(out, source.time_base_ns());
  exporters::NestingAdapter nested(w);
  source.visit(nested);
}

}  // namespace framescope
