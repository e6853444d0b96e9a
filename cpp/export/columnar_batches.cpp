// cpp/export/columnar_batches.cpp: a replay as column batches with self/CPU/alloc times (Parquet).
#include "framescope/columnar_batches.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "framescope/chrome_trace.h"
#include "open_slice_time.h"

// GCC's SLP vectorizer reads the replay's Slice fields in pairs (one 16-byte load of parent and
// start_ns) just after the replay stored them one by one: the load cannot be forwarded from the
// two stores and waits for them to reach the cache, ~10% of the replay's time (perf annotate).
// Kept scalar where it matters.
#if defined(__GNUC__) && !defined(__clang__)
#define NO_SLP __attribute__((optimize("no-tree-slp-vectorize")))
#else
#define NO_SLP
#endif

namespace framescope {

const char* const kRowKindNames[7] = {"python", "c", "op", "range", "instant", "scope", "memory"};

namespace {

using internal::sat_add;

void put_double(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out += buf;
}

// Readies a batch for the next rows: every per-row vector is sized to `n` rows once, and rows
// are written by index (a push_back per column and row costs a capacity test and a size store
// each, 18 of them per row, and was most of the batcher's time). A sink may hand back a batch it
// is done with (full batches stay `n` rows long: sizing them again costs nothing, and refilling
// memory already touched costs no page faults); `finish` shrinks a batch to its rows before the
// sink sees it.
template <class F>
void each_column(ColumnBatch& b, F&& f) {
  f(b.id), f(b.parent), f(b.start_ns), f(b.dur_ns), f(b.self_ns), f(b.cpu_ns), f(b.cpu_self_ns);
  f(b.alloc_bytes), f(b.alloc_self_bytes), f(b.flops), f(b.thread), f(b.name), f(b.depth);
  f(b.detail), f(b.kind);
}

// The bit-packed flags: set by OR, so zeroed for every batch ((n + 7) / 8 bytes each).
template <class F>
void each_flag(ColumnBatch& b, F&& f) {
  f(b.is_async), f(b.recursive), f(b.host);
}

void reset(ColumnBatch& b, size_t n) {
  each_column(b, [n](auto& v) { v.resize(n); });
  each_flag(b, [n](auto& v) { v.assign((n + 7) / 8, 0); });
  b.rows = 0;
  b.symbols.clear();
  b.args.clear();
  b.any_cpu_known = b.any_cpu_unknown = false;
}

void finish(ColumnBatch& b) {
  each_column(b, [&b](auto& v) { v.resize(b.rows); });
  each_flag(b, [&b](auto& v) { v.resize((b.rows + 7) / 8); });
}

// The time rules are key_averages' (cpp/analysis/key_averages.cpp, ungrouped): self time is the
// duration less the direct children's, a range outliving the frame it began in is handed to
// the frame's parent at the frame's end, async ranges have no self time, memory samples are
// charged to the innermost open slice of their thread. So that SQL over the rows gives the same
// self and total times as key_averages() (tests/tables/test_tables.py checks it).
class ColumnarVisitor final : public TraceVisitor {
 public:
  ColumnarVisitor(const ColumnarOptions& o, const std::function<void(ColumnBatch&)>& sink)
      : o_(o), sink_(sink) {
    if (o_.batch_rows == 0) o_.batch_rows = 1;
  }

  void begin_trace(const TraceView& view) override {
    view_ = &view;
    symbol_count_ = uint32_t(view.symbols.size());
    local_symbol_.assign(view.symbols.size() + 1, UINT32_MAX);
    active_.assign((view.symbols.size() + 1) * kKeys, 0);
    start_batch();
  }

  void begin_thread(uint32_t thread) override {
    thread_ = thread;
    stack_.clear();
    clock_.reset();
    if (thread < view_->threads.size() && !view_->threads[thread].cpu_samples.empty()) {
      clock_ = std::make_unique<analysis::CpuClock>(view_->threads[thread].cpu_samples);
    }
  }

  NO_SLP void slice_begin(const Slice& s) override {
    Open& o = stack_.emplace_back();
    o.index = s.index;
    o.parent = s.parent;
    o.start_ns = s.start_ns;
    o.cpu_start = clock_ ? clock_->at(s.start_ns) : 0;
    o.key = key_of(s);
    o.host = s.host;
    uint32_t& active = active_[o.key];
    o.recursive = active != 0;
    ++active;
  }

  void slice_end(const Slice& s) override {
    size_t i = stack_.size();
    while (i-- > 0) {
      if (stack_[i].index == s.index) break;
    }
    if (i >= stack_.size()) return;
    const int64_t dur = std::max<int64_t>(0, s.dur_ns);
    analysis::hand_over_open_children(stack_, i, s.start_ns + dur, clock_.get());
    const Open o = stack_[i];
    stack_.erase(stack_.begin() + long(i));
    --active_[o.key];
    const int64_t cpu =
        clock_ ? analysis::CpuClock::used(o.cpu_start, clock_->at(s.start_ns + dur), dur) : -1;
    const int64_t self = std::max<int64_t>(0, dur - o.child_ns);
    const int64_t cpu_self = cpu >= 0 ? std::max<int64_t>(0, cpu - o.child_cpu) : -1;
    const int64_t mem_total = sat_add(o.mem_direct, o.child_mem);
    for (size_t j = stack_.size(); j-- > 0;) {
      if (int64_t(stack_[j].index) == o.parent) {
        Open& p = stack_[j];
        analysis::charge_parent(p, o, dur, cpu);
        p.child_mem = sat_add(p.child_mem, mem_total);
        break;
      }
    }
    row(s, dur, self, cpu, cpu_self, mem_total, o.mem_direct, o.recursive);
  }

  void instant(const Slice& s) override { row(s, 0, 0, -1, -1, 0, 0, false); }

  void async_slice(const Slice& s) override {
    // Ends on another thread: a total, no self time, no part in its parent's time (as
    // key_averages' async entries).
    row(s, std::max<int64_t>(0, s.dur_ns), 0, -1, -1, 0, 0, false);
  }

  void memory(const MemorySample& m) override {
    if (m.thread == thread_ && !stack_.empty()) {
      stack_.back().mem_direct = sat_add(stack_.back().mem_direct, m.bytes);
    }
    if (m.device == kPythonAllocatorDevice) return;  // charged to the slice, not a row
    // A record_memory() sample: a counter row of its own.
    Slice s;
    s.start_ns = m.time_ns;
    s.thread = m.thread;
    s.symbol = uint32_t(view_->symbols.size());
    s.depth = uint32_t(stack_.size());
    s.parent = stack_.empty() ? -1 : int64_t(stack_.back().index);
    s.host = !stack_.empty() && stack_.back().host;
    memory_json_.clear();
    memory_json_ += "{\"address\": " + std::to_string(m.address);
    memory_json_ += ", \"total_allocated\": " + std::to_string(m.total_allocated);
    memory_json_ += ", \"total_reserved\": " + std::to_string(m.total_reserved);
    memory_json_ += ", \"device\": " + std::to_string(m.device) + "}";
    push(s, RowKind::kMemory, -1, 0, 0, -1, -1, 0, m.bytes, false, &memory_json_);
  }

  void end_trace() override {
    if (!batch_.rows) return;
    finish(batch_);  // the last batch: no next one to size
    sink_(batch_);
  }

 private:
  // Keys of the recursion test: symbol x category x asyncness.
  static constexpr size_t kKeys = 16;

  // An open slice: what its end needs, not the whole Slice (the stack is pushed, copied and
  // popped once per row, so its entries are kept small).
  struct Open : analysis::OpenSliceTime {
    Open() noexcept {}  // user-provided: emplace_back() then sets the fields one by one, where
                        // value-initialization zeroed the whole entry first (`rep stos`)
    int64_t mem_direct = 0;
    int64_t child_mem = 0;
    size_t key = 0;  // key_of(): the recursion test's
    bool recursive = false;
    bool host = false;
  };

  size_t key_of(const Slice& s) const {
    const size_t sym = std::min<size_t>(s.symbol, view_->symbols.size());
    return sym * kKeys + (size_t(s.category) & 7) + (s.async_end ? 8 : 0);
  }

  void row(const Slice& s, int64_t dur, int64_t self, int64_t cpu, int64_t cpu_self,
           int64_t mem_total, int64_t mem_self, bool recursive) {
    int64_t flops = 0;
    const std::string* json = nullptr;
    if (s.detail < view_->details.size()) {
      const EventDetail& d = view_->details[s.detail];
      flops = std::max<int64_t>(0, d.flops);
      detail_json_ = detail_json(d);
      json = &detail_json_;
    }
    push(s, RowKind(uint8_t(s.category)), int64_t(s.index), dur, self, cpu, cpu_self, mem_total,
         mem_self, recursive, json, flops);
  }

  void push(const Slice& s, RowKind kind, int64_t id, int64_t dur, int64_t self, int64_t cpu,
            int64_t cpu_self, int64_t mem_total, int64_t mem_self, bool recursive,
            const std::string* json, int64_t flops = 0) {
    ColumnBatch& b = batch_;
    const size_t r = b.rows;
    // Instants, memory rows and async ranges have no CPU time whatever the sampling: they make
    // the column nullable, not known.
    const bool timed = kind != RowKind::kInstant && kind != RowKind::kMemory && !s.async_end;
    b.any_cpu_known |= timed && cpu >= 0;
    b.any_cpu_unknown |= !timed || cpu < 0;
    col_.id[r] = id;
    col_.parent[r] = s.parent;
    col_.start_ns[r] = sat_add(s.start_ns, o_.offset_ns);
    col_.dur_ns[r] = dur;
    col_.self_ns[r] = self;
    col_.cpu_ns[r] = cpu;
    col_.cpu_self_ns[r] = cpu_self;
    col_.alloc_bytes[r] = mem_total;
    col_.alloc_self_bytes[r] = mem_self;
    col_.flops[r] = flops;
    col_.thread[r] = s.thread;
    const uint32_t sym = std::min<uint32_t>(s.symbol, symbol_count_);
    uint32_t& local = local_symbol_[sym];
    if (local == UINT32_MAX) {
      local = uint32_t(b.symbols.size());
      b.symbols.push_back(sym);
    }
    col_.name[r] = local;
    col_.depth[r] = int32_t(std::min<uint32_t>(s.depth, INT32_MAX));
    if (json) {
      col_.detail[r] = int32_t(b.args.size());
      b.args.push_back(*json);
    } else {
      col_.detail[r] = -1;
    }
    col_.kind[r] = uint8_t(kind);
    const uint8_t bit = uint8_t(r & 7);
    col_.is_async[r >> 3] |= uint8_t(uint8_t(s.async_end) << bit);
    col_.recursive[r >> 3] |= uint8_t(uint8_t(recursive) << bit);
    col_.host[r >> 3] |= uint8_t(uint8_t(s.host) << bit);
    if ((b.rows = r + 1) >= o_.batch_rows) flush();
  }

  // The batch's columns' storage, for writes by index (valid from start_batch to flush).
  struct Columns {
    int64_t *id, *parent, *start_ns, *dur_ns, *self_ns, *cpu_ns, *cpu_self_ns, *alloc_bytes,
        *alloc_self_bytes, *flops;
    uint32_t *thread, *name;
    int32_t *depth, *detail;
    uint8_t *kind, *is_async, *recursive, *host;
  };

  void start_batch() {
    ColumnBatch& b = batch_;
    reset(b, o_.batch_rows);
    col_ = Columns{b.id.data(),          b.parent.data(),      b.start_ns.data(),
                   b.dur_ns.data(),      b.self_ns.data(),     b.cpu_ns.data(),
                   b.cpu_self_ns.data(), b.alloc_bytes.data(), b.alloc_self_bytes.data(),
                   b.flops.data(),       b.thread.data(),      b.name.data(),
                   b.depth.data(),       b.detail.data(),      b.kind.data(),
                   b.is_async.data(),    b.recursive.data(),   b.host.data()};
  }

  void flush() {
    for (uint32_t sym : batch_.symbols) local_symbol_[sym] = UINT32_MAX;
    finish(batch_);
    sink_(batch_);
    start_batch();
  }

  ColumnarOptions o_;
  const std::function<void(ColumnBatch&)>& sink_;
  const TraceView* view_ = nullptr;
  ColumnBatch batch_;
  Columns col_{};
  uint32_t symbol_count_ = 0;           // view_->symbols.size(): the memory rows' name
  std::vector<uint32_t> local_symbol_;  // trace symbol -> index in batch_.symbols
  std::vector<uint32_t> active_;        // open slices per key (recursion)
  std::vector<Open> stack_;
  uint32_t thread_ = UINT32_MAX;
  std::unique_ptr<analysis::CpuClock> clock_;
  std::string detail_json_;
  std::string memory_json_;
};

}  // namespace

std::string detail_json(const EventDetail& d) {
  std::string out = "{";
  bool first = true;
  auto key = [&](const char* k) {
    if (!first) out += ", ";
    first = false;
    out += '"';
    out += k;
    out += "\": ";
  };
  if (!d.inputs.empty()) {
    key("inputs");
    out += '[';
    for (size_t i = 0; i < d.inputs.size(); ++i) {
      if (i) out += ", ";
      const RangeInput& in = d.inputs[i];
      switch (in.kind) {
        case RangeInput::Kind::kNone:
          out += "null";
          break;
        case RangeInput::Kind::kInt:
          out += std::to_string(in.int_value);
          break;
        case RangeInput::Kind::kDouble:
          put_double(out, in.double_value);
          break;
        case RangeInput::Kind::kString:
          out += '"';
          append_json_escaped(out, in.text);
          out += '"';
          break;
        case RangeInput::Kind::kShape: {
          std::string dims = "[";
          for (size_t k = 0; k < in.shape.size(); ++k) {
            if (k) dims += ", ";
            dims += std::to_string(in.shape[k]);
          }
          dims += ']';
          if (in.text.empty()) {
            out += dims;
          } else {
            out += "{\"shape\": " + dims + ", \"dtype\": \"";
            append_json_escaped(out, in.text);
            out += "\"}";
          }
          break;
        }
      }
    }
    out += ']';
  }
  if (d.flops >= 0) {
    key("flops");
    out += std::to_string(d.flops);
  }
  if (d.seq_nr >= 0) {
    key("seq_nr");
    out += std::to_string(d.seq_nr);
  }
  out += '}';
  return out;
}

void write_column_batches(const TraceSource& source, const ColumnarOptions& options,
                          const std::function<void(ColumnBatch&)>& sink) {
  ColumnarVisitor v(options, sink);
  source.visit(v);
}

}  // namespace framescope
