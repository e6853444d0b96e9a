// cpp/export/pstats.cpp: cProfile-compatible stats (a marshalled dict), computed as _lsprof does.
//
// cProfile (Modules/_lsprof.c) keeps, per function and per (caller, callee) pair, a recursion
// level, a call count, a count of recursive calls, the total time and the inline time. A call
// pushes a context; its return computes tt = its duration and it = tt - the tt of its direct
// callees, adds tt to the caller context's callee time, and then for the function and for the
// (caller, function) pair: recursion level - 1; if that is 0 (outermost active call) the total
// time += tt, else recursive calls += 1; inline time += it; calls += 1. cProfile.py then writes
//   stats[f] = (calls - recursive, calls, inline, total, {caller: (calls, calls - recursive,
//   inline, total) of the pair}).
// Here the contexts are the replay's slices (per thread), so the numbers are cProfile's for the
// same calls. Python functions are keyed (file, first line, name); builtins and ranges
// ('~', 0, name) as cProfile keys builtins; marks are left out.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "framescope/writers.h"
#include "text_buffer.h"

namespace framescope {
namespace exporters {

namespace {

struct Counts {
  int64_t recursion = 0;
  uint64_t calls = 0;
  uint64_t recursive = 0;
  int64_t total_ns = 0;
  int64_t inline_ns = 0;
};

class PstatsVisitor final : public TraceVisitor {
 public:
  void begin_trace(const TraceView& v) override {
    symbols_ = &v.symbols;  // the source's table: outlives the visit (the view does not)
    entries_.assign(v.symbols.size(), Counts{});
  }
  void begin_thread(uint32_t) override { stack_.clear(); }
  void slice_begin(const Slice& s) override {
    const uint32_t caller = stack_.empty() ? kNone : stack_.back().symbol;
    stack_.push_back({s.index, s.symbol, caller, 0, s.start_ns, 0});
    ++entries_[s.symbol].recursion;
    if (caller != kNone) ++edges_[edge_key(caller, s.symbol)].recursion;
  }
  void slice_end(const Slice& s) override {
    size_t i = stack_.size();
    while (i-- > 0) {
      if (stack_[i].index == s.index) break;
    }
    if (i >= stack_.size()) return;
    Ctx c = stack_[i];
    // A context still open right above it (a range begun in this function and ended after it
    // returned; what is above that one is inside it): the part of it inside this call is callee
    // time of this call, the rest will be callee time of the context below (each instant's
    // time is the innermost's). Its whole duration there would count its time before this
    // return twice: in this call's inline time and in its own.
    if (i + 1 < stack_.size()) {
      Ctx& open = stack_[i + 1];
      const int64_t inside =
          std::max<int64_t>(0, s.start_ns + s.dur_ns - open.start_ns - open.handed_ns);
      c.callee_ns += inside;
      open.handed_ns += inside;
    }
    stack_.erase(stack_.begin() + long(i));
    // The context now below it is the one that called it (the same unless a range outlived
    // the frame it began in), less what contexts that ended before it took.
    if (i > 0) stack_[i - 1].callee_ns += std::max<int64_t>(0, s.dur_ns - c.handed_ns);
    const int64_t it = s.dur_ns - c.callee_ns;
    stop(entries_[c.symbol], s.dur_ns, it);
    if (c.caller != kNone) stop(edges_[edge_key(c.caller, c.symbol)], s.dur_ns, it);
  }
  void async_slice(const Slice& s) override {
    // Ended on another thread: a call of its own, not part of its caller's callee time, with
    // no inline time (tottime): its thread ran other calls meanwhile, whose tottime holds that
    // time already (pstats' total time, the sum of tottime, would count it twice).
    const uint32_t caller = stack_.empty() ? kNone : stack_.back().symbol;
    Counts& e = entries_[s.symbol];
    ++e.recursion;
    stop(e, s.dur_ns, 0);
    if (caller != kNone) {
      Counts& p = edges_[edge_key(caller, s.symbol)];
      ++p.recursion;
      stop(p, s.dur_ns, 0);
    }
  }

  // Writes the marshalled dict.
  void write(OutputSink& sink) {
    TextBuffer out(sink);
    // Symbols with the same pstats key (e.g. two code objects of one function) are summed.
    std::map<std::string, size_t> by_key;  // marshalled key -> row
    std::vector<uint32_t> row_of(entries_.size(), UINT32_MAX);
    struct Row {
      std::string key;
      Counts c;
      std::map<uint32_t, Counts> callers;  // caller row -> counts
    };
    std::vector<Row> rows;
    for (size_t sym = 0; sym < entries_.size(); ++sym) {
      if (!entries_[sym].calls) continue;
      std::string key = marshal_key((*symbols_)[sym]);
      auto it = by_key.find(key);
      if (it == by_key.end()) {
        it = by_key.emplace(key, rows.size()).first;
        rows.push_back({key, Counts{}, {}});
      }
      row_of[sym] = uint32_t(it->second);
      add(rows[it->second].c, entries_[sym]);
    }
    for (const auto& [k, counts] : edges_) {
      const uint32_t caller = uint32_t(k >> 32), callee = uint32_t(k);
      if (!counts.calls || row_of[caller] == UINT32_MAX || row_of[callee] == UINT32_MAX) continue;
      add(rows[row_of[callee]].callers[row_of[caller]], counts);
    }
    out.put('{');  // TYPE_DICT
    for (const Row& r : rows) {
      out.put(r.key);
      out.put(')');  // TYPE_SMALL_TUPLE of 5: cc, nc, tt, ct, callers
      out.put(char(5));
      put_int(out, r.c.calls - r.c.recursive);
      put_int(out, r.c.calls);
      put_float(out, double(r.c.inline_ns) / 1e9);
      put_float(out, double(r.c.total_ns) / 1e9);
      out.put('{');
      for (const auto& [caller_row, c] : r.callers) {
        out.put(rows[caller_row].key);
        out.put(')');  // (nc, cc, tt, ct): the first two swapped, as cProfile.py writes them
        out.put(char(4));
        put_int(out, c.calls);
        put_int(out, c.calls - c.recursive);
        put_float(out, double(c.inline_ns) / 1e9);
        put_float(out, double(c.total_ns) / 1e9);
      }
      out.put('0');  // TYPE_NULL ends a dict
      out.maybe_flush();
    }
    out.put('0');
    out.flush();
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Ctx {
    uint64_t index;
    uint32_t symbol;
    uint32_t caller;
    int64_t callee_ns;
    int64_t start_ns;
    int64_t handed_ns;  // its time charged to contexts that ended before it (see slice_end)
  };
  static uint64_t edge_key(uint32_t caller, uint32_t callee) {
    return (uint64_t(caller) << 32) | callee;
  }
  static void stop(Counts& c, int64_t tt, int64_t it) {
    if (--c.recursion == 0) {
      c.total_ns += tt;
    } else {
      ++c.recursive;
    }
    c.inline_ns += it;
    ++c.calls;
  }
  static void add(Counts& a, const Counts& b) {
    a.calls += b.calls;
    a.recursive += b.recursive;
    a.total_ns += b.total_ns;
    a.inline_ns += b.inline_ns;
  }

  // marshal (version 4) pieces
  static void put_int(TextBuffer& out, uint64_t v) {
    if (v <= 0x7fffffff) {
      out.put('i');  // TYPE_INT: 32-bit little-endian
      const uint32_t x = uint32_t(v);
      const char b[4] = {char(x), char(x >> 8), char(x >> 16), char(x >> 24)};
      out.put(std::string_view(b, 4));
      return;
    }
    // TYPE_LONG: digit count, then 15-bit digits, least significant first
    std::string digits;
    int32_t n = 0;
    while (v) {
      const uint16_t d = uint16_t(v & 0x7fff);
      digits.push_back(char(d & 0xff));
      digits.push_back(char(d >> 8));
      v >>= 15;
      ++n;
    }
    out.put('l');
    const char b[4] = {char(n), char(n >> 8), char(n >> 16), char(n >> 24)};
    out.put(std::string_view(b, 4));
    out.put(digits);
  }
  static void put_float(TextBuffer& out, double d) {
    out.put('g');  // TYPE_BINARY_FLOAT
    char b[8];
    std::memcpy(b, &d, 8);
    out.put(std::string_view(b, 8));
  }
  static void put_str(std::string& out, const std::string& s) {
    const std::string u = valid_utf8(s);
    out.push_back('u');  // TYPE_UNICODE: 32-bit length, UTF-8
    const uint32_t n = uint32_t(u.size());
    const char b[4] = {char(n), char(n >> 8), char(n >> 16), char(n >> 24)};
    out.append(b, 4);
    out += u;
  }
  static std::string marshal_key(const Symbol& s) {
    std::string k;
    k.push_back(')');
    k.push_back(char(3));
    const bool python = !s.file.empty() && s.file != "~";
    put_str(k, python ? s.file : "~");
    const uint32_t line = python ? uint32_t(s.line) : 0;
    k.push_back('i');
    const char b[4] = {char(line), char(line >> 8), char(line >> 16), char(line >> 24)};
    k.append(b, 4);
    put_str(k, python ? s.function : s.name);
    return k;
  }

  const std::vector<Symbol>* symbols_ = nullptr;
  std::vector<Counts> entries_;
  std::unordered_map<uint64_t, Counts> edges_;
  std::vector<Ctx> stack_;
};

}  // namespace
}  // namespace exporters

void write_pstats(const TraceSource& source, OutputSink& out) {
  exporters::PstatsVisitor v;
  source.visit(v);
  v.write(out);
}

}  // namespace framescope
