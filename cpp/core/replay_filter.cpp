// cpp/core/replay_filter.cpp: the replay-time filter: leaves short (min_duration_ns) and deep
// (max_depth) slices out of a replay, renumbering what is kept, and marks or folds host code
// (HostVisitor).
//
// Streaming, with a delay: whether a slice is kept is known only at its end (its duration), and
// a kept slice makes every slice around it kept (they are longer). So a slice's begin is held
// back until the slice or one inside it ends long enough; then the held begins are reported,
// outermost first. Marks, memory samples and ranges ended on another thread that happen while
// the innermost open slice is held are held with it, in order: every item held by a slice came
// before the begin of the open slice inside it (items during that one are held by it), so
// reporting a held slice's begin and then its items keeps the time order. A left-out slice
// hands its held items to the slice around it.
#include "framescope/replay_filter.h"

#include <vector>

namespace framescope {

namespace {

class FilteringVisitor final : public TraceVisitor {
 public:
  FilteringVisitor(TraceVisitor& d, const ReplayFilter& f) : d_(d), f_(f) {}

  void begin_trace(const TraceView& view) override { d_.begin_trace(view); }
  void begin_thread(uint32_t thread) override {
    stack_.clear();
    d_.begin_thread(thread);
  }
  void end_thread(uint32_t thread) override {
    // The replay closes every slice before the thread ends; anything still held goes out as is.
    while (!stack_.empty()) {
      Entry e = std::move(stack_.back());
      stack_.pop_back();
      hand_down(std::move(e.held));
    }
    d_.end_thread(thread);
  }
  void end_trace() override { d_.end_trace(); }

  void slice_begin(const Slice& s) override {
    Entry e;
    e.original = s;
    const uint32_t python_above = stack_.empty() ? 0 : stack_.back().python_depth;
    e.python_depth = python_above + (s.category == EventCategory::kPythonFunction ? 1 : 0);
    // max_depth counts Python frames: a frame with max_depth Python frames around it goes,
    // with everything inside it.
    e.too_deep = (!stack_.empty() && stack_.back().too_deep) ||
                 (f_.max_depth > 0 && s.category == EventCategory::kPythonFunction &&
                  python_above >= f_.max_depth);
    stack_.push_back(std::move(e));
  }

  void slice_end(const Slice& s) override {
    size_t i = stack_.size();
    while (i-- > 0) {
      if (stack_[i].original.index == s.index) break;
    }
    if (i >= stack_.size()) return;
    const bool innermost = i + 1 == stack_.size();
    // A slice with slices still open inside it (a range that outlived the frame it began in)
    // is kept: what is inside it is not decided yet.
    const bool keep =
        !stack_[i].too_deep && (!innermost || s.dur_ns >= f_.min_duration_ns || stack_[i].emitted);
    if (keep) {
      emit_up_to(i);
      Slice out = stack_[i].out;
      out.dur_ns = s.dur_ns;
      out.open_at_stop = s.open_at_stop;
      d_.slice_end(out);
      stack_.erase(stack_.begin() + long(i));
      return;
    }
    Entry e = std::move(stack_[i]);
    stack_.erase(stack_.begin() + long(i));
    hand_down(std::move(e.held));
  }

  void instant(const Slice& s) override { item(Item{Item::kInstant, s, {}}); }
  void async_slice(const Slice& s) override {
    if (s.dur_ns < f_.min_duration_ns || (!stack_.empty() && stack_.back().too_deep)) return;
    item(Item{Item::kAsync, s, {}});
  }
  void memory(const MemorySample& m) override { item(Item{Item::kMemory, {}, m}); }

 private:
  struct Item {
    enum Kind { kInstant, kAsync, kMemory } kind;
    Slice slice;
    MemorySample memory;
  };
  struct Entry {
    Slice original;
    Slice out;  // as reported (new index, parent, depth), once emitted
    bool emitted = false;
    bool too_deep = false;
    uint32_t python_depth = 0;
    std::vector<Item> held;
  };

  // The innermost open slice that was reported, or none.
  const Entry* innermost_emitted() const {
    for (size_t i = stack_.size(); i-- > 0;) {
      if (stack_[i].emitted) return &stack_[i];
    }
    return nullptr;
  }

  void item(Item it) {
    if (!stack_.empty() && !stack_.back().emitted) {
      stack_.back().held.push_back(std::move(it));
      return;
    }
    report(it);
  }

  // Items of a left-out slice: to the slice around it (held or reported).
  void hand_down(std::vector<Item> items) {
    for (Item& it : items) item(std::move(it));
  }

  void report(Item& it) {
    const Entry* parent = innermost_emitted();
    if (it.kind == Item::kMemory) {
      d_.memory(it.memory);
      return;
    }
    Slice s = it.slice;
    s.index = next_index_++;
    s.parent = parent ? int64_t(parent->out.index) : -1;
    s.depth = parent ? parent->out.depth + 1 : 0;
    if (it.kind == Item::kInstant) {
      d_.instant(s);
    } else {
      d_.async_slice(s);
    }
  }

  // Reports the held begins of stack_[0..i], outermost first, each followed by its held items.
  void emit_up_to(size_t i) {
    for (size_t k = 0; k <= i; ++k) {
      Entry& e = stack_[k];
      if (e.emitted) continue;
      const Entry* parent = innermost_emitted();
      e.out = e.original;
      e.out.index = next_index_++;
      e.out.parent = parent ? int64_t(parent->out.index) : -1;
      e.out.depth = parent ? parent->out.depth + 1 : 0;
      e.out.dur_ns = 0;
      e.out.open_at_stop = false;
      d_.slice_begin(e.out);
      e.emitted = true;
      std::vector<Item> held = std::move(e.held);
      e.held.clear();
      for (Item& it : held) report(it);
    }
  }

  TraceVisitor& d_;
  const ReplayFilter f_;
  std::vector<Entry> stack_;
  uint64_t next_index_ = 0;
};

// Marks (or folds) the slices of host code. A slice is host when its symbol's class is 1, or
// when its class is 2 (the standard library, a builtin) and the slice around it is host: the
// tokenize call of IPython's compiler is the kernel's time, the same call from the cell the
// cell's. One bool per open slice; the decision per symbol was made once by the reader.
class HostVisitor final : public TraceVisitor {
 public:
  HostVisitor(TraceVisitor& d, const ReplayFilter& f) : d_(d), f_(f) {}

  void begin_trace(const TraceView& view) override { d_.begin_trace(view); }
  void begin_thread(uint32_t thread) override {
    stack_.clear();
    d_.begin_thread(thread);
  }
  void end_thread(uint32_t thread) override { d_.end_thread(thread); }
  void end_trace() override { d_.end_trace(); }

  void slice_begin(const Slice& s) override {
    Slice out = s;
    const bool host = is_host(s);
    if (drop_) {
      Open o{s.index, host, {}};
      if (!host) {
        o.out = renumbered(s);
        d_.slice_begin(o.out);
      }
      stack_.push_back(o);
      return;
    }
    stack_.push_back(Open{s.index, host, {}});
    d_.slice_begin(mark(out, host));
  }
  void slice_end(const Slice& s) override {
    // Slices end innermost first except a range that outlived its frame: found by index.
    size_t i = stack_.size();
    while (i-- > 0) {
      if (stack_[i].index == s.index) break;
    }
    if (i >= stack_.size()) return;
    const Open o = stack_[i];
    stack_.erase(stack_.begin() + long(i));
    if (drop_) {
      if (o.host) return;
      Slice out = o.out;
      out.dur_ns = s.dur_ns;
      out.open_at_stop = s.open_at_stop;
      d_.slice_end(out);
      return;
    }
    Slice out = s;
    d_.slice_end(mark(out, o.host));
  }
  void instant(const Slice& s) override { d_.instant(drop_ ? renumbered(s) : s); }
  void async_slice(const Slice& s) override {
    Slice out = s;
    const bool host = is_host(s);
    if (drop_) {
      if (!host) d_.async_slice(renumbered(s));
      return;
    }
    d_.async_slice(mark(out, host));
  }
  void memory(const MemorySample& m) override { d_.memory(m); }

 private:
  struct Open {
    uint64_t index;
    bool host;
    Slice out;  // as reported (kDrop: renumbered)
  };

  // kDrop: a new index in begin order, the nearest reported slice around it as parent.
  Slice renumbered(const Slice& s) {
    Slice out = s;
    out.index = next_index_++;
    out.parent = -1;
    out.depth = 0;
    for (size_t k = stack_.size(); k-- > 0;) {
      if (!stack_[k].host) {
        out.parent = int64_t(stack_[k].out.index);
        out.depth = stack_[k].out.depth + 1;
        break;
      }
    }
    return out;
  }

  uint8_t class_of(uint32_t symbol) const {
    const std::vector<uint8_t>* c = f_.symbol_classes.get();
    return c && symbol < c->size() ? (*c)[symbol] : 2;
  }

  bool is_host(const Slice& s) const {
    const uint8_t c = class_of(s.symbol);
    if (c == 1) return true;
    if (c == 0) return false;
    const bool frame =
        s.category == EventCategory::kPythonFunction || s.category == EventCategory::kCFunction;
    return frame && !stack_.empty() && stack_.back().host;
  }

  Slice& mark(Slice& s, bool host) const {
    s.host = host;
    if (host && f_.host_mode == ReplayFilter::HostMode::kFold) {
      s.symbol = f_.host_symbol;
      s.category = EventCategory::kPythonFunction;  // one "[host]" key, builtins included
    }
    return s;
  }

  TraceVisitor& d_;
  const ReplayFilter f_;
  const bool drop_ = f_.host_mode == ReplayFilter::HostMode::kDrop;
  std::vector<Open> stack_;
  uint64_t next_index_ = 0;
};

// The filter in front of the host visitor, owning it.
class Chain final : public TraceVisitor {
 public:
  Chain(TraceVisitor& downstream, const ReplayFilter& f)
      : host_(downstream, f), filter_(host_, f) {}
  void begin_trace(const TraceView& view) override { filter_.begin_trace(view); }
  void begin_thread(uint32_t thread) override { filter_.begin_thread(thread); }
  void slice_begin(const Slice& s) override { filter_.slice_begin(s); }
  void slice_end(const Slice& s) override { filter_.slice_end(s); }
  void instant(const Slice& s) override { filter_.instant(s); }
  void async_slice(const Slice& s) override { filter_.async_slice(s); }
  void memory(const MemorySample& m) override { filter_.memory(m); }
  void end_thread(uint32_t thread) override { filter_.end_thread(thread); }
  void end_trace() override { filter_.end_trace(); }

 private:
  HostVisitor host_;
  FilteringVisitor filter_;
};

}  // namespace

std::unique_ptr<TraceVisitor> make_filtering_visitor(TraceVisitor& downstream,
                                                     const ReplayFilter& filter) {
  if (filter.host_mode == ReplayFilter::HostMode::kNone) {
    return std::make_unique<FilteringVisitor>(downstream, filter);
  }
  if (!filter.drops()) return std::make_unique<HostVisitor>(downstream, filter);
  return std::make_unique<Chain>(downstream, filter);
}

}  // namespace framescope
