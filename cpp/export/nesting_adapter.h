// cpp/export/nesting_adapter.h: makes a replay strictly nested for formats that need it.
#pragma once

#include <vector>

#include "framescope/trace_visitor.h"

namespace framescope::exporters {

/// Forwards a replay to `target` with slice_begin/slice_end strictly nested per thread. The one
/// case where a replay does not nest -- a range left open across the return of the frame it
/// began in, so that an enclosing slice ends first -- is forwarded as a split: the slices above
/// the ending one end with it and begin again at once (same index and symbol), so every piece is
/// where it ran and nothing is lost. slice_end always reports start_ns + dur_ns as the end time.
class NestingAdapter final : public TraceVisitor {
 public:
  explicit NestingAdapter(TraceVisitor& target) : t_(target) {}
  void begin_trace(const TraceView& v) override { t_.begin_trace(v); }
  void begin_thread(uint32_t th) override {
    stack_.clear();
    t_.begin_thread(th);
  }
  void slice_begin(const Slice& s) override {
    stack_.push_back(s);
    t_.slice_begin(s);
  }
  void slice_end(const Slice& s) override {
    size_t i = stack_.size();
    while (i-- > 0) {
      if (stack_[i].index == s.index) break;
    }
    if (i >= stack_.size()) return;
    const int64_t end = s.start_ns + s.dur_ns;
    std::vector<Slice> above(stack_.begin() + long(i) + 1, stack_.end());
    for (size_t k = above.size(); k-- > 0;) t_.slice_end(ended(above[k], end, false));
    t_.slice_end(ended(stack_[i], end, s.open_at_stop));
    stack_.resize(i);
    for (Slice& a : above) {
      a.start_ns = end;
      a.depth = uint32_t(stack_.size());
      stack_.push_back(a);
      t_.slice_begin(a);
    }
  }
  void instant(const Slice& s) override { t_.instant(s); }
  void async_slice(const Slice& s) override { t_.async_slice(s); }
  void memory(const MemorySample& m) override { t_.memory(m); }
  void end_thread(uint32_t th) override { t_.end_thread(th); }
  void end_trace() override { t_.end_trace(); }

 private:
  static Slice ended(Slice s, int64_t end, bool at_stop) {
    s.dur_ns = end > s.start_ns ? end - s.start_ns : 0;
    s.open_at_stop = at_stop;
    return s;
  }
  TraceVisitor& t_;
  std::vector<Slice> stack_;
};

}  // namespace framescope::exporters
