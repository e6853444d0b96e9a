// cpp/export/text_buffer.h: a growing text block with fast number formatting, flushed to a sink.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "framescope/output.h"

namespace framescope::exporters {

/// Formats into a caller's buffer, which must have room: the fast path of a writer assembles an
/// event on the stack and appends it once (a std::string append per field costs more than the
/// formatting). Same methods as TextBuffer, so one template writes either.
struct CharWriter {
  char* p;
  void put(char c) { *p++ = c; }
  void put(std::string_view s) {
    std::memcpy(p, s.data(), s.size());
    p += s.size();
  }
  void put_uint(uint64_t v) {
    char tmp[24];
    char* end = tmp + sizeof tmp;
    char* q = end;
    do {
      *--q = char('0' + v % 10);
      v /= 10;
    } while (v);
    put(std::string_view(q, size_t(end - q)));
  }
  void put_int(int64_t v) {
    if (v < 0) {
      *p++ = '-';
      put_uint(uint64_t(-(v + 1)) + 1);
    } else {
      put_uint(uint64_t(v));
    }
  }
  /// `ns` as microseconds with exactly three decimals ("12.345", "-0.001").
  void put_us(int64_t ns) {
    uint64_t a;
    if (ns < 0) {
      *p++ = '-';
      a = uint64_t(-(ns + 1)) + 1;
    } else {
      a = uint64_t(ns);
    }
    put_uint(a / 1000);
    const unsigned frac = unsigned(a % 1000);
    p[0] = '.';
    p[1] = char('0' + frac / 100);
    p[2] = char('0' + frac / 10 % 10);
    p[3] = char('0' + frac % 10);
    p += 4;
  }
};

/// Text writers append here; every ~1 MiB the block goes to the sink, so no writer holds a
/// whole file in memory. Numbers are formatted by hand (snprintf is ~5x slower per number).
class TextBuffer {
 public:
  explicit TextBuffer(OutputSink& out) : out_(out) { buf_.reserve(kBlock + 4096); }

  void put(char c) { buf_.push_back(c); }
  void put(std::string_view s) { buf_.append(s.data(), s.size()); }
  void put_uint(uint64_t v) {
    formatted([v](CharWriter& w) { w.put_uint(v); });
  }
  void put_int(int64_t v) {
    formatted([v](CharWriter& w) { w.put_int(v); });
  }
  /// `ns` as microseconds with exactly three decimals ("12.345", "-0.001").
  void put_us(int64_t ns) {
    formatted([ns](CharWriter& w) { w.put_us(ns); });
  }
  /// Hands the block to the sink once it is big enough.
  void maybe_flush() {
    if (buf_.size() >= kBlock) flush();
  }
  void flush() {
    if (!buf_.empty()) out_.write(buf_.data(), buf_.size());
    buf_.clear();
  }
  std::string& raw() { return buf_; }

 private:
  template <class Format>
  void formatted(Format&& format) {
    char tmp[32];
    CharWriter w{tmp};
    format(w);
    buf_.append(tmp, size_t(w.p - tmp));
  }
  static constexpr size_t kBlock = size_t(1) << 20;
  OutputSink& out_;
  std::string buf_;
};

/// `text` with every invalid UTF-8 sequence replaced by U+FFFD (valid text comes back as is).
std::string valid_utf8(std::string_view text);

}  // namespace framescope::exporters
