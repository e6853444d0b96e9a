// cpp/export/text_buffer.h: a growing text block with fast number formatting, flushed to a sink.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "framescope/output.h"

namespace framescope::exporters {

/// Text writers append here; every ~1 MiB the block goes to the sink, so no writer holds a
/// whole file in memory. Numbers are formatted by hand (snprintf is ~5x slower per number).
class TextBuffer {
 public:
  explicit TextBuffer(OutputSink& out) : out_(out) { buf_.reserve(kBlock + 4096); }

  void put(char c) { buf_.push_back(c); }
  void put(std::string_view s) { buf_.append(s.data(), s.size()); }
  void put_uint(uint64_t v) {
    char tmp[24];
    char* end = tmp + sizeof tmp;
    char* p = end;
    do {
      *--p = char('0' + v % 10);
      v /= 10;
    } while (v);
    buf_.append(p, size_t(end - p));
  }
  void put_int(int64_t v) {
    if (v < 0) {
      buf_.push_back('-');
      put_uint(uint64_t(-(v + 1)) + 1);
    } else {
      put_uint(uint64_t(v));
    }
  }
  /// `ns` as microseconds with exactly three decimals ("12.345", "-0.001").
  void put_us(int64_t ns) {
    uint64_t a;
    if (ns < 0) {
      buf_.push_back('-');
      a = uint64_t(-(ns + 1)) + 1;
    } else {
      a = uint64_t(ns);
    }
    put_uint(a / 1000);
    const unsigned frac = unsigned(a % 1000);
    const char d[4] = {'.', char('0' + frac / 100), char('0' + frac / 10 % 10), char('0' + frac % 10)};
    buf_.append(d, 4);
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
  static constexpr size_t kBlock = size_t(1) << 20;
  OutputSink& out_;
  std::string buf_;
};

/// `text` with every invalid UTF-8 sequence replaced by U+FFFD (valid text comes back as is).
std::string valid_utf8(std::string_view text);

}  // namespace framescope::exporters
