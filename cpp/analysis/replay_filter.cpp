// cpp/analysis/replay_filter.cpp: leaves short (min_duration_ns) and deep (max_depth) slices
// out of a replay, renumbering what is kept.
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

}  // namespace

std::unique_ptr<TraceVisitor> make_filtering_visitor(TraceVisitor& downstream,
                                                     const ReplayFilter& filter) {
  return std::make_unique<FilteringVisitor>(downstream, filter);
}

}  // namespace framescope
