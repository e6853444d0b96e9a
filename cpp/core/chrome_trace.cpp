// cpp/core/chrome_trace.cpp: streams a Trace as Chrome Trace Event JSON.
#include "framescope/chrome_trace.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <stdexcept>

namespace framescope {

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

// Formats a relative ns value as µs with exactly three decimals ("12.345", "-0.001").
void append_us(std::string& out, int64_t ns) {
  char buf[40];
  const char* sign = ns < 0 ? "-" : "";
  uint64_t a = ns < 0 ? uint64_t(-(ns + 1)) + 1 : uint64_t(ns);
  int n = std::snprintf(buf, sizeof buf, "%s%" PRIu64 ".%03" PRIu64, sign, a / 1000, a % 1000);
  out.append(buf, size_t(n));
}

// a - b without undefined behaviour on overflow (wraps; only absurd hand-made traces get there).
int64_t rel(int64_t a, int64_t b) { return int64_t(uint64_t(a) - uint64_t(b)); }

void append_int(std::string& out, int64_t v) {
  char buf[24];
  int n = std::snprintf(buf, sizeof buf, "%" PRId64, v);
  out.append(buf, size_t(n));
}

void append_string(std::string& out, std::string_view s) {
  out.push_back('"');
  append_json_escaped(out, s);
  out.push_back('"');
}

void append_input(std::string& dims, std::string& types, const RangeInput& in) {
  switch (in.kind) {
    case RangeInput::Kind::kShape: {
      dims.push_back('[');
      for (size_t i = 0; i < in.shape.size(); ++i) {
        if (i) dims.push_back(',');
        append_int(dims, in.shape[i]);
      }
      dims.push_back(']');
      append_string(types, in.text.empty() ? "Tensor" : in.text);
      break;
    }
    case RangeInput::Kind::kInt:
      dims += "[]";
      append_string(types, "Scalar");
      break;
    case RangeInput::Kind::kDouble:
      dims += "[]";
      append_string(types, "Scalar");
      break;
    case RangeInput::Kind::kString:
      dims += "[]";
      append_string(types, "str");
      break;
    default:
      dims += "[]";
      append_string(types, "");
  }
}

class ChromeWriter {
 public:
  ChromeWriter(const Trace& t, std::ostream& out) : t_(t), out_(out) {
    base_ = t.start_ns;
    for (const TraceEvent& e : t.events) base_ = std::min(base_, e.start_ns);
    for (const MemorySample& m : t.memory) base_ = std::min(base_, m.time_ns);
  }

  void write() {
    buf_ += "{\n\"schemaVersion\": 1,\n\"displayTimeUnit\": \"ms\",\n\"baseTimeNanoseconds\": ";
    append_int(buf_, base_);
    buf_ += ",\n\"otherData\": {\"profiler\": \"framescope\", \"dropped_events\": ";
    append_int(buf_, int64_t(t_.dropped_events));
    buf_ += ", \"warnings\": [";
    for (size_t i = 0; i < t_.warnings.size(); ++i) {
      if (i) buf_ += ", ";
      append_string(buf_, t_.warnings[i]);
    }
    buf_ += "]},\n\"traceEvents\": [\n";
    write_metadata();
    for (size_t i = 0; i < t_.events.size(); ++i) write_event(i);
    for (const MemorySample& m : t_.memory) write_memory(m);
    // Kineto ends with a global instant marking the end of the window.
    begin_event();
    buf_ += "{\"ph\": \"i\", \"s\": \"g\", \"name\": \"Record Window End\", \"pid\": ";
    append_int(buf_, t_.threads.empty() ? 0 : t_.threads[0].pid);
    buf_ += ", \"tid\": 0, \"ts\": ";
    append_us(buf_, rel(t_.stop_ns, base_));
    buf_ += "}\n]\n}\n";
    flush(true);
  }

 private:
  void begin_event() {
    if (!first_) buf_ += ",\n";
    first_ = false;
    flush(false);
  }

  void flush(bool force) {
    if (force || buf_.size() > (1u << 20)) {
      out_.write(buf_.data(), std::streamsize(buf_.size()));
      if (!out_) throw std::runtime_error("framescope: failed writing the Chrome trace");
      buf_.clear();
    }
  }

  void write_metadata() {
    std::vector<int64_t> pids;
    for (const ThreadInfo& th : t_.threads) {
      if (std::find(pids.begin(), pids.end(), th.pid) == pids.end()) pids.push_back(th.pid);
    }
    for (int64_t pid : pids) {
      begin_event();
      buf_ += "{\"ph\": \"M\", \"name\": \"process_name\", \"pid\": ";
      append_int(buf_, pid);
      buf_ += ", \"tid\": 0, \"args\": {\"name\": ";
      append_string(buf_, "python " + std::to_string(pid));
      buf_ += "}}";
    }
    for (size_t i = 0; i < t_.threads.size(); ++i) {
      const ThreadInfo& th = t_.threads[i];
      std::string name = th.name.empty() ? "thread " + std::to_string(th.os_tid) : th.name;
      begin_event();
      buf_ += "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": ";
      append_int(buf_, th.pid);
      buf_ += ", \"tid\": ";
      append_int(buf_, int64_t(th.os_tid));
      buf_ += ", \"args\": {\"name\": ";
      append_string(buf_, name);
      buf_ += "}}";
      begin_event();
      buf_ += "{\"ph\": \"M\", \"name\": \"thread_sort_index\", \"pid\": ";
      append_int(buf_, th.pid);
      buf_ += ", \"tid\": ";
      append_int(buf_, int64_t(th.os_tid));
      buf_ += ", \"args\": {\"sort_index\": ";
      append_int(buf_, int64_t(i));
      buf_ += "}}";
    }
  }

  // Writes `category, "name": ..., ["id": async_id,] "pid": ..., "tid": ..., "ts": ` (the
  // caller has written `{"ph": ..., "cat": ` and writes the timestamp next).
  void append_identity(const TraceEvent& e, const ThreadInfo& th, int64_t async_id) {
    append_string(buf_, category_name(e.category));
    buf_ += ", \"name\": ";
    append_string(buf_, t_.symbols[e.symbol].name);
    if (async_id >= 0) {
      buf_ += ", \"id\": ";
      append_int(buf_, async_id);
    }
    buf_ += ", \"pid\": ";
    append_int(buf_, th.pid);
    buf_ += ", \"tid\": ";
    append_int(buf_, int64_t(th.os_tid));
    buf_ += ", \"ts\": ";
  }

  void write_event(size_t index) {
    const TraceEvent& e = t_.events[index];
    const ThreadInfo& th = t_.threads[e.thread];
    begin_event();
    // A range ended on another thread may outlive its parent, so as an "X" slice it would break
    // the nesting of its thread: it becomes an async "b"/"e" pair (its own track in viewers).
    const bool async = e.async_end && e.dur_ns >= 0;
    if (e.dur_ns < 0) {
      buf_ += "{\"ph\": \"i\", \"s\": \"t\", \"cat\": ";
    } else if (async) {
      buf_ += "{\"ph\": \"b\", \"cat\": ";
    } else {
      buf_ += "{\"ph\": \"X\", \"cat\": ";
    }
    append_identity(e, th, async ? int64_t(index) : -1);
    append_us(buf_, rel(e.start_ns, base_));
    if (e.dur_ns >= 0 && !async) {
      buf_ += ", \"dur\": ";
      append_us(buf_, e.dur_ns);
    }
    buf_ += ", \"args\": {";
    if (e.category == EventCategory::kPythonFunction || e.category == EventCategory::kCFunction) {
      buf_ += "\"Python id\": ";
      append_int(buf_, int64_t(index));
      buf_ += ", \"Python parent id\": ";
      if (e.parent >= 0) {
        append_int(buf_, e.parent);
      } else {
        buf_ += "null";
      }
      buf_ += ", \"Python thread\": ";
      append_int(buf_, int64_t(e.thread));
    } else {
      buf_ += "\"Ev Idx\": ";
      append_int(buf_, int64_t(index));
    }
    if (e.async_end) buf_ += ", \"Async end\": true";
    if (e.open_at_stop) buf_ += ", \"Open at stop\": true";
    if (e.detail != UINT32_MAX) {
      const EventDetail& d = t_.details[e.detail];
      if (d.handle) {
        buf_ += ", \"Record function id\": ";
        append_int(buf_, int64_t(d.handle));
      }
      if (d.seq_nr >= 0) {
        buf_ += ", \"Sequence number\": ";
        append_int(buf_, d.seq_nr);
      }
      if (d.flops >= 0) {
        buf_ += ", \"flops\": ";
        append_int(buf_, d.flops);
      }
      if (!d.inputs.empty()) {
        std::string dims = "[", types = "[";
        for (size_t i = 0; i < d.inputs.size(); ++i) {
          if (i) {
            dims.push_back(',');
            types.push_back(',');
          }
          append_input(dims, types, d.inputs[i]);
        }
        buf_ += ", \"Input Dims\": " + dims + "], \"Input type\": " + types + "]";
      }
    }
    buf_ += "}}";
    if (async) {
      begin_event();
      buf_ += "{\"ph\": \"e\", \"cat\": ";
      append_identity(e, th, int64_t(index));
      append_us(buf_, rel(rel(e.start_ns, base_), -e.dur_ns));
      buf_ += "}";
    }
  }

  void write_memory(const MemorySample& m) {
    const ThreadInfo& th = t_.threads[m.thread];
    begin_event();
    buf_ +=
        "{\"ph\": \"i\", \"s\": \"t\", \"cat\": \"cpu_instant_event\", \"name\": \"[memory]\", "
        "\"pid\": ";
    append_int(buf_, th.pid);
    buf_ += ", \"tid\": ";
    append_int(buf_, int64_t(th.os_tid));
    buf_ += ", \"ts\": ";
    append_us(buf_, rel(m.time_ns, base_));
    buf_ += ", \"args\": {\"Device Id\": ";
    append_int(buf_, m.device);
    buf_ += ", \"Addr\": ";
    append_int(buf_, int64_t(m.address));
    buf_ += ", \"Bytes\": ";
    append_int(buf_, m.bytes);
    buf_ += ", \"Total Allocated\": ";
    append_int(buf_, m.total_allocated);
    buf_ += ", \"Total Reserved\": ";
    append_int(buf_, m.total_reserved);
    buf_ += "}}";
    begin_event();
    buf_ += "{\"ph\": \"C\", \"name\": \"Memory\", \"pid\": ";
    append_int(buf_, th.pid);
    buf_ += ", \"tid\": 0, \"ts\": ";
    append_us(buf_, rel(m.time_ns, base_));
    buf_ += ", \"args\": {\"Total Allocated\": ";
    append_int(buf_, m.total_allocated);
    buf_ += ", \"Total Reserved\": ";
    append_int(buf_, m.total_reserved);
    buf_ += "}}";
  }

  const Trace& t_;
  std::ostream& out_;
  std::string buf_;
  int64_t base_ = 0;
  bool first_ = true;
};

}  // namespace

void append_json_escaped(std::string& out, std::string_view s) {
  static const char kHex[] = "0123456789abcdef";
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      size_t n = utf8_sequence_length(s, i);
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

void write_chrome_trace(const Trace& trace, std::ostream& out) { ChromeWriter(trace, out).write(); }

void write_chrome_trace(const Trace& trace, const std::string& path) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw std::runtime_error("framescope: cannot open '" + path + "' for writing");
  write_chrome_trace(trace, f);
  f.close();
  if (!f) throw std::runtime_error("framescope: failed writing '" + path + "'");
}

}  // namespace framescope
