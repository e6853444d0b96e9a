// cpp/export/chrome_json.cpp: Chrome Trace Event JSON writer (a visitor over one replay).
#include <algorithm>
#include <ostream>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "framescope/chrome_trace.h"
#include "framescope/writers.h"
#include "process_names.h"
#include "task_tracks.h"
#include "text_buffer.h"

namespace framescope {
namespace exporters {

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0 when it is invalid.
size_t utf8_sequence_length(std::string_view s, size_t i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n;
  uint32_t cp;
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) {
    n = 2;
    cp = c & 0x1F;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3;
    cp = c & 0x0F;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (cc & 0x3F);
  }
  // reject overlong forms, surrogates and values past U+10FFFF
  if ((n == 2 && cp < 0x80) || (n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000)) return 0;
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return 0;
  return n;
}

// Writes events as they end ("X" needs the duration), so the file is not in start order; every
// reader sorts (Perfetto, chrome://tracing). Readers break ties of equal start by file order:
// chrome://tracing (catapult's SliceGroup) for any equal "ts", Perfetto for equal "ts" and
// "dur" (it puts the longer slice first). A slice written as it ends would then come before an
// enclosing slice that started at the same nanosecond (frames open at the session's start, and
// at its stop too) and read as its parent. So a slice that starts when its parent does is held
// back, with whatever it held back itself, and written right after that parent: enclosing
// slices first. Only such chains wait; every other slice is written when it ends.
class ChromeWriter final : public TraceVisitor {
 public:
  ChromeWriter(OutputSink& out, int64_t base, std::string_view extra_members, bool for_torch,
               int64_t wall_offset_ns, bool python_heap_instants = true)
      : out_(out),
        base_(base),
        extra_members_(extra_members),
        for_torch_(for_torch && python_heap_instants),
        wall_offset_ns_(wall_offset_ns) {
    for (size_t c = 0; c < 6; ++c) category_names_[c] = category_name(EventCategory(c));
  }

  void begin_trace(const TraceView& v) override {
    view_ = &v;
    tasks_.begin_trace(v);
    names_.reserve(v.symbols.size());
    is_module_.reserve(v.symbols.size());
    for (const Symbol& s : v.symbols) {
      std::string n;
      append_json_escaped(n, s.name);
      names_.push_back(std::move(n));
      // torch's module slices (framescope labels nn.Module.__call__ so): torch-tb-profiler's
      // Module view is built from the python_function events carrying "Python module id".
      is_module_.push_back(s.file.empty() && s.name.rfind("nn.Module: ", 0) == 0 ? module_id(s.name)
                                                                                 : -1);
    }
    auto& b = out_.raw();
    out_.put("{\n");
    out_.put(extra_members_);
    out_.put(
        "\"schemaVersion\":1,\n\"deviceProperties\":[],\n\"displayTimeUnit\":\"ms\",\n"
        "\"baseTimeNanoseconds\":");
    out_.put_int(base_ + wall_offset_ns_);
    out_.put(",\n\"otherData\":{\"profiler\":\"framescope\",\"dropped_events\":");
    out_.put_uint(v.dropped_events);
    out_.put(",\"warnings\":[");
    for (size_t i = 0; i < v.warnings.size(); ++i) {
      if (i) out_.put(',');
      out_.put('"');
      append_json_escaped(b, v.warnings[i]);
      out_.put('"');
    }
    out_.put("]},\n\"traceEvents\":[\n");
    std::vector<int64_t> pids;
    for (const ThreadInfo& th : v.threads) {
      if (std::find(pids.begin(), pids.end(), th.pid) == pids.end()) pids.push_back(th.pid);
    }
    for (int64_t pid : pids) write_process(v, pid);
    thread_prefix_.reserve(v.threads.size());
    for (size_t i = 0; i < v.threads.size(); ++i) {
      const ThreadInfo& th = v.threads[i];
      std::string id =
          ",\"pid\":" + std::to_string(th.pid) + ",\"tid\":" + std::to_string(th.os_tid);
      thread_prefix_.push_back(id + ",\"ts\":");
      sep();
      out_.put("{\"ph\":\"M\",\"name\":\"thread_name\"");
      out_.put(id);
      out_.put(",\"args\":{\"name\":\"");
      if (th.name.empty()) {
        out_.put("thread ");
        out_.put_uint(th.os_tid);
      } else {
        append_json_escaped(b, th.name);
      }
      out_.put("\"}}");
      sep();
      out_.put("{\"ph\":\"M\",\"name\":\"thread_sort_index\"");
      out_.put(id);
      out_.put(",\"args\":{\"sort_index\":");
      out_.put_uint(i);
      out_.put("}}");
    }
  }

  // The process's name, labels and sort index (from the trace's process table) as metadata.
  void write_process(const TraceView& v, int64_t pid) {
    auto& b = out_.raw();
    auto begin = [&](const char* what) {
      sep();
      out_.put("{\"ph\":\"M\",\"name\":\"");
      out_.put(what);
      out_.put("\",\"pid\":");
      out_.put_int(pid);
      out_.put(",\"tid\":0,\"args\":{");
    };
    begin("process_name");
    out_.put("\"name\":\"");
    append_json_escaped(b, process_display_name(v, pid));
    out_.put("\"}}");
    const ProcessInfo* p = find_process(v, pid);
    if (!p) return;
    if (!p->labels.empty()) {
      begin("process_labels");
      out_.put("\"labels\":\"");
      for (size_t i = 0; i < p->labels.size(); ++i) {
        if (i) out_.put(',');
        append_json_escaped(b, p->labels[i]);
      }
      out_.put("\"}}");
    }
    begin("process_sort_index");
    out_.put("\"sort_index\":");
    out_.put_int(p->sort_index);
    out_.put("}}");
  }

  void begin_thread(uint32_t) override {
    open_.clear();
    tasks_.begin_thread();
  }

  // The nearest Python frame around each open slice, kept per thread as slices begin (the
  // replay gives a thread's events in order), so that a frame's "Python parent id" skips the
  // ops and ranges between it and its Python caller, as torch's python tracer links them.
  void slice_begin(const Slice& s) override {
    int64_t python_parent = -1;
    for (size_t i = open_.size(); i-- > 0;) {
      if (int64_t(open_[i].index) == s.parent) {
        python_parent = open_[i].python;
        break;
      }
    }
    open_.push_back(OpenSlice{
        s.index, is_python(s) ? int64_t(s.index) : python_parent, python_parent, s.start_ns, {}});
  }

  void slice_end(const Slice& s) override {
    if (tasks_.is_step(s)) task_step(s);
    // Almost always the innermost open slice; a range left open across its frame's return
    // ends later, so search from the top.
    size_t i = open_.size();
    while (i-- > 0 && open_[i].index != s.index) {
    }
    if (i >= open_.size()) {  // (a visitor protocol without its begin: written as it comes)
      python_parent_ = -1;
      write_event(s, 'X');
      return;
    }
    python_parent_ = open_[i].python_parent;
    std::string held = std::move(open_[i].held);
    open_.erase(open_.begin() + std::ptrdiff_t(i));
    // The parent's entry (by index: a range left open across a return may sit above it).
    size_t p = open_.size();
    while (s.parent >= 0 && p-- > 0 && open_[p].index != uint64_t(s.parent)) {
    }
    if (s.parent >= 0 && p < open_.size() && open_[p].start_ns == s.start_ns) {
      std::string& into = open_[p].held;
      into += ",\n";
      render_event(s, 'X', into);
      into += held;
      return;
    }
    write_event(s, 'X');
    if (!held.empty()) {
      out_.put(held);  // each event with its leading separator
      out_.maybe_flush();
    }
  }
  void end_thread(uint32_t) override {
    // (every slice ended before its thread does; anything still held is written all the same)
    for (OpenSlice& o : open_) {
      if (!o.held.empty()) out_.put(o.held);
    }
    open_.clear();
    // The lifetimes of the Tasks that ran on this thread end with their last step.
    for (const TaskTracks::Track& t : tasks_.thread_tracks()) {
      task_event('e', t, t.name, t.end_ns, true);
    }
  }
  void instant(const Slice& s) override {
    python_parent_ = -1;
    write_event(s, 'i');
  }
  void async_slice(const Slice& s) override {
    // A range ended on another thread may outlive its parent, so as an "X" slice it would break
    // the nesting of its thread: it becomes an async "b"/"e" pair (its own track in viewers).
    python_parent_ = -1;
    write_event(s, 'b');
    sep();
    out_.put("{\"ph\":\"e\",\"cat\":\"");
    out_.put(s.host ? "host" : category_name(s.category));
    out_.put("\",\"name\":\"");
    out_.put(names_[s.symbol]);
    out_.put("\",\"id\":");
    out_.put_uint(s.index);
    out_.put(thread_prefix_[s.thread]);
    out_.put_us(s.start_ns - base_ + s.dur_ns);
    out_.put('}');
  }

  void memory(const MemorySample& m) override {
    const ThreadInfo& th = view_->threads[m.thread];
    if (m.device == kPythonAllocatorDevice) {
      // Python's allocations (profile_memory): a counter per thread of the bytes it allocated
      // since the session started, no instant per sample (there may be one per call).
      sep();
      out_.put("{\"ph\":\"C\",\"name\":\"Python allocated bytes (thread ");
      out_.put_uint(th.os_tid);
      out_.put(")\",\"pid\":");
      out_.put_int(th.pid);
      out_.put(",\"tid\":");
      out_.put_uint(th.os_tid);
      out_.put(",\"ts\":");
      out_.put_us(m.time_ns - base_);
      out_.put(",\"args\":{\"bytes\":");
      out_.put_int(m.total_allocated);
      out_.put("}}");
      if (!for_torch_) return;
      // ... and torch's "[memory]" instant (Device Type 0, CPU; no address: the net bytes a
      // call allocated), which torch-tb-profiler's Memory view reads.
      memory_instant(m, -1, 0, m.total_allocated, true);
      return;
    }
    memory_instant(m, m.device, m.address, m.total_reserved, false);
    sep();
    out_.put("{\"ph\":\"C\",\"name\":\"Memory\",\"pid\":");
    out_.put_int(th.pid);
    out_.put(",\"tid\":0,\"ts\":");
    out_.put_us(m.time_ns - base_);
    out_.put(",\"args\":{\"Total Allocated\":");
    out_.put_int(m.total_allocated);
    out_.put(",\"Total Reserved\":");
    out_.put_int(m.total_reserved);
    out_.put("}}");
  }

  void end_trace() override {
    // Kineto ends with a global instant marking the end of the window.
    sep();
    out_.put("{\"ph\":\"i\",\"s\":\"g\",\"name\":\"Record Window End\",\"pid\":");
    out_.put_int(view_->threads.empty() ? 0 : view_->threads[0].pid);
    out_.put(",\"tid\":0,\"ts\":");
    out_.put_us(view_->stop_ns - base_);
    out_.put("}\n]\n}\n");
    out_.flush();
  }

 private:
  // torch's "Python module id" of an "nn.Module: <class>_<n>" slice: n, the instance's number
  // among its class's (the tracer names module calls so); 0 for a name without it.
  static int64_t module_id(const std::string& name) {
    size_t digits = name.size();
    while (digits > 0 && name[digits - 1] >= '0' && name[digits - 1] <= '9') --digits;
    if (digits == name.size() || digits == 0 || name[digits - 1] != '_' ||
        name.size() - digits > 9) {
      return 0;
    }
    return std::stoll(name.substr(digits));
  }

  void sep() {
    if (!first_) out_.put(",\n");
    first_ = false;
    out_.maybe_flush();
  }

  // A step of an asyncio Task (task_tracks.h) on the Task's async track: "b"/"e" events with the
  // Task's id, the lifetime's "b" first. Readers nest events of one id by time and break ties by
  // file order (catapult, Perfetto), so the lifetime's "b" precedes its first step's and its "e"
  // (end_thread) follows its last step's.
  void task_step(const Slice& s) {
    bool first = false;
    const TaskTracks::Track& t = tasks_.add_step(s, &first);
    if (first) task_event('b', t, t.name, s.start_ns, false);
    task_event('b', t, "step", s.start_ns, false);
    task_event('e', t, "step", s.start_ns + s.dur_ns, false);
  }
  void task_event(char ph, const TaskTracks::Track& t, std::string_view name, int64_t ns,
                  bool totals) {
    sep();
    out_.put("{\"ph\":\"");
    out_.put(ph);
    out_.put("\",\"cat\":\"");
    out_.put(kTaskCategory);
    out_.put("\",\"id\":\"");
    out_.put(t.key);
    out_.put("\",\"name\":\"");
    append_json_escaped(out_.raw(), name);
    out_.put('"');
    out_.put(thread_prefix_[t.thread]);
    out_.put_us(ns - base_);
    if (totals) {  // on the lifetime's end: known once its last step ended
      out_.put(",\"args\":{\"steps\":");
      out_.put_uint(t.steps);
      out_.put(",\"running us\":");
      out_.put_us(t.running_ns);
      out_.put('}');
    }
    out_.put('}');
  }

  // torch's "[memory]" instant of sample `m`, which torch-tb-profiler's Memory view reads.
  // Device Type as torch's c10::DeviceType (0: CPU); `device` is torch's device index, -1 for
  // the CPU. `python_heap`: a Python heap sample (no address: the net bytes a call allocated).
  void memory_instant(const MemorySample& m, int64_t device, uint64_t address, int64_t reserved,
                      bool python_heap) {
    sep();
    out_.put("{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"cpu_instant_event\",\"name\":\"[memory]\"");
    out_.put(thread_prefix_[m.thread]);
    out_.put_us(m.time_ns - base_);
    out_.put(",\"args\":{\"Device Type\":0,\"Device Id\":");
    out_.put_int(device);
    out_.put(",\"Addr\":");
    out_.put_uint(address);
    out_.put(",\"Bytes\":");
    out_.put_int(m.bytes);
    out_.put(",\"Total Allocated\":");
    out_.put_int(m.total_allocated);
    out_.put(",\"Total Reserved\":");
    out_.put_int(reserved);
    out_.put(python_heap ? ",\"Python heap\":true}}" : "}}");
  }

  void write_event(const Slice& s, char ph) {
    sep();
    // Fast path: the event assembled on the stack, appended once. Room: the name and thread
    // prefix plus at most ~220 bytes of fixed text and numbers.
    const std::string& name = names_[s.symbol];
    const std::string& thread = thread_prefix_[s.thread];
    if (s.detail == UINT32_MAX && name.size() + thread.size() < kEventStack - 256) {
      char buf[kEventStack];
      CharWriter w{buf};
      event_fields(w, s, ph, name, thread);
      out_.put(std::string_view(buf, size_t(w.p - buf)));
      return;
    }
    event_fields(out_, s, ph, name, thread);
  }

  static constexpr size_t kEventStack = 1024;

  // Appends event `s` to `into` instead of the output (a slice held back, see the class).
  void render_event(const Slice& s, char ph, std::string& into) {
    std::string& b = out_.raw();
    const size_t mark = b.size();
    event_fields(out_, s, ph, names_[s.symbol], thread_prefix_[s.thread]);
    into.append(b, mark, std::string::npos);
    b.resize(mark);
  }

  template <class Out>
  void event_fields(Out& out, const Slice& s, char ph, const std::string& name,
                    const std::string& thread) {
    out.put("{\"ph\":\"");
    out.put(ph);
    out.put(ph == 'i' ? "\",\"s\":\"t\",\"cat\":\"" : "\",\"cat\":\"");
    // (a hand-made Trace may hold any byte as a category)
    if (s.host) {
      out.put("host");  // host code (framescope._host_code), kept apart for whoever wants it
    } else {
      out.put(size_t(s.category) < 6 ? category_names_[size_t(s.category)] : "other");
    }
    out.put("\",\"name\":\"");
    out.put(name);
    out.put('"');
    if (ph == 'b') {
      out.put(",\"id\":");
      out.put_uint(s.index);
    }
    out.put(thread);
    out.put_us(s.start_ns - base_);
    if (ph == 'X') {
      out.put(",\"dur\":");
      out.put_us(s.dur_ns);
    }
    if (s.category == EventCategory::kPythonFunction || s.category == EventCategory::kCFunction) {
      out.put(",\"args\":{\"Python id\":");
      out.put_uint(s.index);
      out.put(",\"Python parent id\":");
      if (python_parent_ >= 0) {
        out.put_int(python_parent_);
      } else {
        out.put("null");
      }
      out.put(",\"Python thread\":");
      out.put_uint(s.thread);
      if (is_module_[s.symbol] >= 0) {
        out.put(",\"Python module id\":");
        out.put_int(is_module_[s.symbol]);
      }
    } else {
      out.put(",\"args\":{\"Ev Idx\":");
      out.put_uint(s.index);
    }
    if (s.async_end) out.put(",\"Async end\":true");
    if (s.open_at_stop) out.put(",\"Open at stop\":true");
    if constexpr (std::is_same_v<Out, TextBuffer>) {
      if (s.detail != UINT32_MAX) write_detail(view_->details[s.detail]);
    }
    out.put("}}");
  }

  void write_detail(const EventDetail& d) {
    if (d.handle) {
      out_.put(",\"Record function id\":");
      out_.put_uint(d.handle);
    }
    if (d.seq_nr >= 0) {
      out_.put(",\"Sequence number\":");
      out_.put_int(d.seq_nr);
    }
    if (d.flops >= 0) {
      out_.put(",\"flops\":");
      out_.put_int(d.flops);
    }
    if (!d.inputs.empty()) {
      std::string dims = "[", types = "[";
      for (size_t i = 0; i < d.inputs.size(); ++i) {
        if (i) {
          dims.push_back(',');
          types.push_back(',');
        }
        append_input_text(dims, types, d.inputs[i]);
      }
      out_.put(",\"Input Dims\":");
      out_.put(dims);
      out_.put("],\"Input type\":");
      out_.put(types);
      out_.put(']');
    }
  }

  static void append_input_text(std::string& dims, std::string& types, const RangeInput& in) {
    auto quoted = [&](std::string_view s) {
      types.push_back('"');
      append_json_escaped(types, s);
      types.push_back('"');
    };
    switch (in.kind) {
      case RangeInput::Kind::kShape:
        dims.push_back('[');
        for (size_t i = 0; i < in.shape.size(); ++i) {
          if (i) dims.push_back(',');
          dims += std::to_string(in.shape[i]);
        }
        dims.push_back(']');
        quoted(in.text.empty() ? "Tensor" : in.text);
        break;
      case RangeInput::Kind::kInt:
      case RangeInput::Kind::kDouble:
        dims += "[]";
        quoted("Scalar");
        break;
      case RangeInput::Kind::kString:
        dims += "[]";
        quoted("str");
        break;
      default:
        dims += "[]";
        quoted("");
    }
  }

  // A slice open on the thread being written (outermost first), with the events held back until
  // it is written: its descendants that started when it did (see the class).
  struct OpenSlice {
    uint64_t index;
    int64_t python;         // the slice itself when a Python frame, else its nearest one
    int64_t python_parent;  // the nearest Python frame around it (-1: none)
    int64_t start_ns;
    std::string held;  // ",\n"-separated events, each with its leading separator
  };

  static bool is_python(const Slice& s) {
    return s.category == EventCategory::kPythonFunction || s.category == EventCategory::kCFunction;
  }

  TextBuffer out_;
  int64_t base_;
  std::string_view extra_members_;
  bool for_torch_;  // for torch's readers: Python heap samples as "[memory]" too (not beside
                    // torch's tensor memory, whose curve they would corrupt)
  int64_t wall_offset_ns_;          // added to the written base (Unix time for torch's readers)
  std::vector<int64_t> is_module_;  // per symbol: an nn.Module slice's module id, else -1
  TaskTracks tasks_;                // asyncio Tasks' async tracks
  std::vector<OpenSlice> open_;     // this thread's open slices, outermost first
  int64_t python_parent_ = -1;      // of the slice being written
  const TraceView* view_ = nullptr;
  std::string_view category_names_[6];      // by EventCategory
  std::vector<std::string> names_;          // escaped, per symbol
  std::vector<std::string> thread_prefix_;  // ,"pid":P,"tid":T,"ts":
  bool first_ = true;
};

// An std::ostream as a sink (the older API).
class OstreamSink final : public OutputSink {
 public:
  explicit OstreamSink(std::ostream& out) : out_(out) {}
  void write(const char* data, size_t size) override {
    out_.write(data, std::streamsize(size));
    if (!out_) throw OutputError("framescope: failed writing the Chrome trace", 0, "");
  }
  void commit() override {
    out_.flush();
    if (!out_) throw OutputError("framescope: failed writing the Chrome trace", 0, "");
  }

 private:
  std::ostream& out_;
};

}  // namespace
}  // namespace exporters

void append_json_escaped(std::string& out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t n = exporters::utf8_sequence_length(s, i);
      if (n == 0) {
        out += "\\ufffd";
        ++i;
      } else {
        out.append(s.data() + i, n);
        i += n;
      }
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += "\\u00";
          out.push_back(kHex[c >> 4]);
          out.push_back(kHex[c & 15]);
        } else {
          out.push_back(char(c));
        }
    }
    ++i;
  }
}

void write_chrome_json(const TraceSource& source, OutputSink& out) {
  exporters::ChromeWriter w(out, source.time_base_ns(), {}, false, 0);
  source.visit(w);
}

void write_chrome_json(const TraceSource& source, OutputSink& out, std::string_view extra_members,
                       int64_t wall_offset_ns, bool python_heap_instants) {
  exporters::ChromeWriter w(out, source.time_base_ns(), extra_members, true, wall_offset_ns,
                            python_heap_instants);
  source.visit(w);
}

void write_chrome_trace(const Trace& trace, std::ostream& out) {
  exporters::OstreamSink sink(out);
  write_chrome_json(MaterializedSource(trace), sink);
  sink.commit();
}

void write_chrome_trace(const Trace& trace, const std::string& path) {
  auto sink = open_file_output(path, is_gzip_path(path));
  write_chrome_json(MaterializedSource(trace), *sink);
  sink->commit();
}

namespace exporters {
std::string valid_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const size_t n = utf8_sequence_length(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";
      ++i;
    } else {
      out.append(s.data() + i, n);
      i += n;
    }
  }
  return out;
}
}  // namespace exporters

}  // namespace framescope
