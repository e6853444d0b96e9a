// cpp/analysis/key_averages.cpp: per-key totals of a replay (key_averages(), summary tables).
#include "framescope/key_averages.h"

#include <cstring>
#include <memory>
#include <unordered_map>

#include "open_slice_time.h"

namespace framescope {

std::string format_input_shapes(const std::vector<RangeInput>& inputs) {
  std::string out = "[";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (i) out += ", ";
    out += '[';
    if (inputs[i].kind == RangeInput::Kind::kShape) {
      for (size_t d = 0; d < inputs[i].shape.size(); ++d) {
        if (d) out += ", ";
        out += std::to_string(inputs[i].shape[d]);
      }
    }
    out += ']';
  }
  out += ']';
  return out;
}

namespace {

using internal::sat_add;

class KeyAveragesVisitor final : public TraceVisitor {
 public:
  explicit KeyAveragesVisitor(const KeyAverageOptions& o) : o_(o) {
    plain_ = !o.group_by_input_shape && o.group_by_stack_n == 0 && !o.group_by_thread;
  }

  void begin_trace(const TraceView& view) override {
    view_ = &view;
    out_.threads.assign(view.threads.size(), ThreadTotals{});
    if (plain_) by_symbol_.assign(view.symbols.size() * kCategories, UINT32_MAX);
  }

  void begin_thread(uint32_t thread) override {
    thread_ = thread;
    stack_.clear();
    ranges_.clear();
    python_.clear();
    clock_.reset();
    if (thread < view_->threads.size() && !view_->threads[thread].cpu_samples.empty()) {
      clock_ = std::make_unique<analysis::CpuClock>(view_->threads[thread].cpu_samples);
      out_.has_cpu = true;
      out_.threads[thread].cpu_known = true;
      out_.threads[thread].cpu_self_ns = 0;
    }
  }

  void slice_begin(const Slice& s) override {
    Open o;
    o.index = s.index;
    o.parent = s.parent;
    o.key = key_of(s);
    o.parent_key = stack_.empty() ? UINT32_MAX : stack_.back().key;
    o.start_ns = s.start_ns;
    o.cpu_start = clock_ ? clock_->at(s.start_ns) : 0;
    o.flops = flops_of(s);
    o.outermost = active_[o.key] == 0;
    ++active_[o.key];
    if (s.category == EventCategory::kPythonFunction) {
      o.python_pos = int32_t(python_.size());
      python_.push_back(s.symbol);
    }
    if (o_.merge_nested_same_name && is_range(s.category)) {
      // A second range child makes the enclosing range's single child an ordinary event.
      if (!ranges_.empty() && ++ranges_.back().range_children == 2) {
        ranges_.back().has_pending = false;
      }
      ranges_.push_back(OpenRange{s.index, s.symbol});
    }
    stack_.push_back(o);
  }

  void slice_end(const Slice& s) override {
    size_t i = stack_.size();
    while (i-- > 0) {
      if (stack_[i].index == s.index) break;
    }
    if (i >= stack_.size()) return;
    Open o = stack_[i];
    const int64_t dur = std::max<int64_t>(0, s.dur_ns);
    analysis::hand_over_open_children(stack_, i, s.start_ns + dur, clock_.get());
    o = stack_[i];
    stack_.erase(stack_.begin() + long(i));
    if (o.python_pos >= 0 && size_t(o.python_pos) < python_.size()) {
      python_.erase(python_.begin() + o.python_pos);
      for (Open& later : stack_) {
        if (later.python_pos > o.python_pos) --later.python_pos;
      }
    }
    --active_[o.key];
    const int64_t cpu =
        clock_ ? analysis::CpuClock::used(o.cpu_start, clock_->at(s.start_ns + dur), dur) : -1;
    Contribution added = finish(o, dur, cpu, o.parent);
    if (o_.merge_nested_same_name && is_range(s.category)) end_range(s, o.key, added);
  }

  void async_slice(const Slice& s) override {
    // A range ended on another thread is an async span (torch's is_async events): it encloses
    // nothing and its thread kept running other slices meanwhile, which hold that time as their
    // self time. Counting its duration as self time too would count the same wall time twice
    // (percentages of thread time above 100%), so it has a total and no self time, and no part
    // in its parent's or its thread's time. Its own key keeps it apart from the same name's
    // ranges that ended on their own thread.
    KeyAverage& k = out_.entries[key_of(s)];
    k.count += 1;
    k.total_ns = sat_add(k.total_ns, std::max<int64_t>(0, s.dur_ns));
    k.flops = sat_add(k.flops, flops_of(s));
  }

  void memory(const MemorySample& m) override {
    out_.has_memory = true;
    if (m.thread == thread_ && !stack_.empty()) {
      stack_.back().mem_direct = sat_add(stack_.back().mem_direct, m.bytes);
    }
  }

  KeyAverages take() {
    active_.clear();
    return std::move(out_);
  }

 private:
  static constexpr size_t kCategories = 8;

  struct Open : analysis::OpenSliceTime {
    uint32_t key = 0;
    uint32_t parent_key = UINT32_MAX;
    int64_t mem_direct = 0;
    int64_t child_mem = 0;
    int64_t flops = 0;
    int32_t python_pos = -1;  // position in python_ of this Python frame's symbol
    bool outermost = false;
  };

  // What finish() added to an event's key: taken back when the event turns out to be a
  // duplicate of its enclosing range (merge_nested_same_name).
  struct Contribution {
    uint32_t key = 0;
    int64_t self_ns = 0;
    int64_t cpu_self_ns = -1;  // -1: no CPU readings
    int64_t memory_self = 0;
    int64_t total_ns = 0;  // the next three: only when the event was its key's outermost
    int64_t cpu_total_ns = 0;
    int64_t memory_total = 0;
    int64_t flops = 0;
  };

  // An open range (op, user annotation, other scope) for merge_nested_same_name: how many
  // ranges it directly encloses (Python frames and builtins between are transparent), and its
  // single range child while that child may be a duplicate of it.
  struct OpenRange {
    uint64_t index = 0;
    uint32_t symbol = 0;
    uint32_t range_children = 0;
    bool has_pending = false;
    Contribution pending;
  };

  static bool is_range(EventCategory c) {
    return c != EventCategory::kPythonFunction && c != EventCategory::kCFunction &&
           c != EventCategory::kMark;
  }

  bool same_name(uint32_t a, uint32_t b) const {
    if (a == b) return true;
    const std::vector<Symbol>& symbols = view_->symbols;
    return a < symbols.size() && b < symbols.size() && symbols[a].name == symbols[b].name;
  }

  // The range `s` (key `key`, which finish() credited with `added`) ended: a duplicate child it
  // was left with is taken out, into `key`; then `s` itself may be its enclosing range's
  // duplicate, decided when that range ends (torch's _remove_dup_nodes, in one pass).
  void end_range(const Slice& s, uint32_t key, Contribution added) {
    size_t i = ranges_.size();
    while (i-- > 0) {
      if (ranges_[i].index == s.index) break;
    }
    if (i >= ranges_.size()) return;
    const OpenRange r = ranges_[i];
    ranges_.erase(ranges_.begin() + long(i));
    if (r.has_pending && r.range_children == 1) absorb(r.pending, key, added);
    if (i == ranges_.size() && !ranges_.empty()) {
      OpenRange& parent = ranges_.back();
      if (parent.range_children == 1 && same_name(parent.symbol, s.symbol)) {
        parent.has_pending = true;
        parent.pending = added;
      }
    }
  }

  // Takes the duplicate event `dup` out of its key: it is no call of its own, its flops go (its
  // parent has its own estimate), and what it held by itself moves to `into` (the enclosing
  // range's key), whose contribution `into_added` grows by as much.
  void absorb(const Contribution& dup, uint32_t into, Contribution& into_added) {
    KeyAverage& k = out_.entries[dup.key];
    k.count -= 1;
    k.flops -= dup.flops;
    if (dup.key != into) {
      KeyAverage& to = out_.entries[into];
      k.self_ns -= dup.self_ns;
      to.self_ns = sat_add(to.self_ns, dup.self_ns);
      k.memory_self -= dup.memory_self;
      to.memory_self = sat_add(to.memory_self, dup.memory_self);
      if (dup.cpu_self_ns >= 0) {
        k.cpu_self_ns -= dup.cpu_self_ns;
        to.cpu_self_ns = sat_add(std::max<int64_t>(0, to.cpu_self_ns), dup.cpu_self_ns);
        k.cpu_total_ns -= dup.cpu_total_ns;
      }
      k.total_ns -= dup.total_ns;
      k.memory_total -= dup.memory_total;
    }
    into_added.self_ns = sat_add(into_added.self_ns, dup.self_ns);
    into_added.memory_self = sat_add(into_added.memory_self, dup.memory_self);
    if (dup.cpu_self_ns >= 0) {
      into_added.cpu_self_ns =
          sat_add(std::max<int64_t>(0, into_added.cpu_self_ns), dup.cpu_self_ns);
    }
  }

  int64_t flops_of(const Slice& s) const {
    if (s.detail >= view_->details.size()) return 0;
    return std::max<int64_t>(0, view_->details[s.detail].flops);
  }

  uint32_t new_entry(const Slice& s) {
    KeyAverage k;
    k.symbol = s.symbol;
    k.category = s.category;
    k.is_async = s.async_end;
    k.top_level = s.parent < 0;
    out_.entries.push_back(std::move(k));
    active_.push_back(0);
    return uint32_t(out_.entries.size() - 1);
  }

  uint32_t key_of(const Slice& s) {
    if (plain_) {
      const size_t slot = size_t(s.symbol) * kCategories + (size_t(s.category) & (kCategories - 1));
      std::vector<uint32_t>& keys = s.async_end ? by_symbol_async_ : by_symbol_;
      if (slot >= keys.size()) keys.resize(slot + 1, UINT32_MAX);
      uint32_t& k = keys[slot];
      if (k == UINT32_MAX) k = new_entry(s);
      return k;
    }
    // Composite key: symbol, category, async or not, then what the options group by, as bytes.
    key_.clear();
    append(s.symbol);
    append(uint32_t(s.category) | (s.async_end ? 0x100u : 0u));
    if (o_.group_by_thread) append(s.thread);
    uint32_t shapes = UINT32_MAX;
    if (o_.group_by_input_shape && s.detail < view_->details.size()) {
      shapes = shapes_id(s.detail);
    }
    if (o_.group_by_input_shape) append(shapes);
    const size_t n = std::min<size_t>(o_.group_by_stack_n, python_.size());
    for (size_t i = 0; i < n; ++i) append(python_[python_.size() - 1 - i]);
    auto it = keys_.find(key_);
    if (it != keys_.end()) return it->second;
    const uint32_t k = new_entry(s);
    KeyAverage& e = out_.entries[k];
    if (o_.group_by_thread) e.thread = s.thread;
    if (shapes != UINT32_MAX) e.input_shapes = shape_strings_[shapes];
    for (size_t i = 0; i < n; ++i) e.stack.push_back(python_[python_.size() - 1 - i]);
    keys_.emplace(key_, k);
    return k;
  }

  void append(uint32_t v) {
    char b[4];
    std::memcpy(b, &v, 4);
    key_.append(b, 4);
  }

  uint32_t shapes_id(uint32_t detail) {
    if (detail >= detail_shapes_.size()) detail_shapes_.resize(view_->details.size(), UINT32_MAX);
    uint32_t& id = detail_shapes_[detail];
    if (id == UINT32_MAX) {
      std::string text = format_input_shapes(view_->details[detail].inputs);
      auto it = shape_ids_.find(text);
      if (it == shape_ids_.end()) {
        it = shape_ids_.emplace(text, uint32_t(shape_strings_.size())).first;
        shape_strings_.push_back(std::move(text));
      }
      id = it->second;
    }
    return id;
  }

  // Credits the ended event `o` to its key and its thread; returns what its key got.
  Contribution finish(const Open& o, int64_t dur, int64_t cpu, int64_t parent) {
    KeyAverage& k = out_.entries[o.key];
    ThreadTotals& t = out_.threads[thread_];
    Contribution added;
    added.key = o.key;
    k.count += 1;
    const int64_t self = std::max<int64_t>(0, dur - o.child_ns);
    k.self_ns = sat_add(k.self_ns, self);
    t.self_ns = sat_add(t.self_ns, self);
    added.self_ns = self;
    k.memory_self = sat_add(k.memory_self, o.mem_direct);
    added.memory_self = o.mem_direct;
    const int64_t mem_total = sat_add(o.mem_direct, o.child_mem);
    k.flops = sat_add(k.flops, o.flops);
    added.flops = o.flops;
    int64_t cpu_self = 0;
    if (cpu >= 0) {
      cpu_self = std::max<int64_t>(0, cpu - o.child_cpu);
      if (k.cpu_self_ns < 0) k.cpu_self_ns = k.cpu_total_ns = 0;
      k.cpu_self_ns = sat_add(k.cpu_self_ns, cpu_self);
      t.cpu_self_ns = sat_add(t.cpu_self_ns, cpu_self);
      added.cpu_self_ns = cpu_self;
    }
    if (o.outermost) {
      k.total_ns = sat_add(k.total_ns, dur);
      k.memory_total = sat_add(k.memory_total, mem_total);
      added.total_ns = dur;
      added.memory_total = mem_total;
      if (cpu >= 0) {
        k.cpu_total_ns = sat_add(k.cpu_total_ns, cpu);
        added.cpu_total_ns = cpu;
      }
    }
    if (parent < 0) return added;
    for (size_t i = stack_.size(); i-- > 0;) {
      if (int64_t(stack_[i].index) == parent) {
        Open& p = stack_[i];
        analysis::charge_parent(p, o, dur, cpu);
        p.child_mem = sat_add(p.child_mem, mem_total);
        return added;
      }
    }
    // A parent link to no open slice (a range outliving the frame it began in is handed to the
    // frame's parent first, hand_over_open_children; only inconsistent hand-made sources get
    // here): its time leaves the self time of the key that was innermost when it began.
    if (o.parent_key < out_.entries.size()) {
      KeyAverage& pk = out_.entries[o.parent_key];
      const int64_t take = std::min(dur, pk.self_ns);
      pk.self_ns -= take;
      t.self_ns -= std::min(take, t.self_ns);
      if (cpu >= 0 && pk.cpu_self_ns > 0) {
        const int64_t c = std::min(cpu, pk.cpu_self_ns);
        pk.cpu_self_ns -= c;
        t.cpu_self_ns -= std::min(c, t.cpu_self_ns);
      }
    }
    return added;
  }

  KeyAverageOptions o_;
  bool plain_ = true;
  const TraceView* view_ = nullptr;
  KeyAverages out_;
  std::vector<uint32_t> active_;           // open events per key (outermost detection)
  std::vector<uint32_t> by_symbol_;        // plain keys: symbol * kCategories + category -> key
  std::vector<uint32_t> by_symbol_async_;  // the same, of ranges ended on another thread
  std::unordered_map<std::string, uint32_t> keys_;
  std::string key_;
  std::vector<uint32_t> detail_shapes_;
  std::unordered_map<std::string, uint32_t> shape_ids_;
  std::vector<std::string> shape_strings_;
  uint32_t thread_ = UINT32_MAX;
  std::vector<Open> stack_;
  std::vector<OpenRange> ranges_;  // open ranges, outermost first (merge_nested_same_name)
  std::vector<uint32_t> python_;   // symbols of the open Python frames, outermost first
  std::unique_ptr<analysis::CpuClock> clock_;
};

}  // namespace

KeyAverages compute_key_averages(const TraceSource& source, const KeyAverageOptions& options) {
  KeyAveragesVisitor v(options);
  source.visit(v);
  return v.take();
}

}  // namespace framescope
