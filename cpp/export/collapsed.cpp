// cpp/export/collapsed.cpp: collapsed stacks ("root;a;b <self µs>") for flame graph tools.
//
// Each thread's stacks form a trie (parent node, symbol) -> node; a slice's self time (its
// duration less its children's) is added to its node when it ends. At the end every node with
// self time becomes a line. The root frame is the thread ("name (tid)").
//
// A line holds its whole stack, so the output grows with the square of the depth: a recursion
// 100,000 deep would write ~100 GB. Frames deeper than kMaxDepth are therefore folded into one
// frame "[deeper frames]" under the frame at that depth (their self time is kept there, so the
// lines still sum to the thread's total).
#include <string>
#include <unordered_map>
#include <vector>

#include "framescope/writers.h"
#include "nesting_adapter.h"
#include "text_buffer.h"

namespace framescope {
namespace exporters {

namespace {

// A frame name as collapsed stacks need it: no ';' (the separator) and no line breaks.
std::string frame_text(std::string_view name) {
  std::string s = valid_utf8(name);
  for (char& c : s) {
    if (c == ';') c = ':';
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

class CollapsedWriter final : public TraceVisitor {
 public:
  explicit CollapsedWriter(OutputSink& out) : out_(out) {}
  void begin_trace(const TraceView& v) override {
    view_ = &v;
    names_.reserve(v.symbols.size());
    for (const Symbol& s : v.symbols) names_.push_back(frame_text(s.name));
  }
  void begin_thread(uint32_t thread) override {
    nodes_.clear();
    children_.clear();
    stack_.clear();
    const ThreadInfo& th = view_->threads[thread];
    std::string root = th.name.empty() ? "thread" : th.name;
    root += " (" + std::to_string(th.os_tid) + ")";
    root_ = frame_text(root);
    nodes_.push_back({UINT32_MAX, UINT32_MAX, 0});
  }
  void slice_begin(const Slice& s) override {
    const uint32_t parent = stack_.empty() ? 0 : stack_.back().node;
    uint32_t symbol = s.symbol;
    if (stack_.size() >= kMaxDepth) {
      if (stack_.size() > kMaxDepth) {  // already inside the folded frame
        stack_.push_back({parent, 0});
        return;
      }
      symbol = kDeeper;
    }
    const uint64_t key = (uint64_t(parent) << 32) | symbol;
    auto it = children_.find(key);
    uint32_t node;
    if (it == children_.end()) {
      node = uint32_t(nodes_.size());
      nodes_.push_back({parent, symbol, 0});
      children_.emplace(key, node);
    } else {
      node = it->second;
    }
    stack_.push_back({node, 0});
  }
  void slice_end(const Slice& s) override {
    if (stack_.empty()) return;
    const Open o = stack_.back();
    stack_.pop_back();
    nodes_[o.node].self_ns += s.dur_ns - o.child_ns;
    if (!stack_.empty()) stack_.back().child_ns += s.dur_ns;
    // (inside the folded frame, parent and child share a node: the child's time goes to it as
    // self time once, and is taken off again as the parent's child time, so it counts once)
  }
  void end_thread(uint32_t) override {
    // Integer µs per line, the remainder carried to the next line, so that a thread's lines sum
    // to its total self time (rounded).
    int64_t carry = 0;
    std::vector<uint32_t> path;
    for (uint32_t n = 1; n < nodes_.size(); ++n) {
      const int64_t ns = nodes_[n].self_ns + carry;
      const int64_t us = ns / 1000;
      carry = ns - us * 1000;
      if (us <= 0) continue;
      path.clear();
      for (uint32_t k = n; k != 0; k = nodes_[k].parent) path.push_back(nodes_[k].symbol);
      out_.put(root_);
      for (size_t i = path.size(); i-- > 0;) {
        out_.put(';');
        out_.put(path[i] == kDeeper ? std::string_view("[deeper frames]")
                                    : std::string_view(names_[path[i]]));
      }
      out_.put(' ');
      out_.put_int(us);
      out_.put('\n');
      out_.maybe_flush();
    }
  }
  void end_trace() override { out_.flush(); }

 private:
  /// Frames of a line at most (below the thread's root); deeper ones fold into kDeeper.
  static constexpr size_t kMaxDepth = 1000;
  static constexpr uint32_t kDeeper = UINT32_MAX;
  struct Node {
    uint32_t parent;
    uint32_t symbol;
    int64_t self_ns;
  };
  struct Open {
    uint32_t node;
    int64_t child_ns;
  };
  TextBuffer out_;
  const TraceView* view_ = nullptr;
  std::vector<std::string> names_;
  std::string root_;
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, uint32_t> children_;
  std::vector<Open> stack_;
};

}  // namespace
}  // namespace exporters

void write_collapsed(const TraceSource& source, OutputSink& out) {
  exporters::CollapsedWriter w(out);
  exporters::NestingAdapter nested(w);
  source.visit(nested);
}

}  // namespace framescope
