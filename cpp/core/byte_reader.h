// cpp/core/byte_reader.h: bounds-checked reading of the binary records both trace formats share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "framescope/trace.h"

namespace framescope::internal {

/// Reads fixed-size values, length-prefixed strings and element counts from `in`, in order.
/// Every read that would pass the end, and every count that cannot fit in the bytes left, calls
/// `fail(what)`, which must throw (the format's own error type): nothing is read out of bounds
/// and no allocation is sized by an unchecked count. Not thread-safe; `in` must outlive it.
template <class Fail>
class ByteReader {
 public:
  explicit ByteReader(std::string_view in, Fail fail = Fail()) : in_(in), fail_(fail) {}

  template <class T>
  T pod() {
    need(sizeof(T));
    T v;
    std::memcpy(&v, in_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string str() {
    const uint64_t n = pod<uint64_t>();
    need(n);
    std::string s(in_.substr(pos_, n));
    pos_ += n;
    return s;
  }
  /// A count of items of at least `min_item_bytes` each (0 counts as 1) that must fit in the rest.
  uint64_t count(size_t min_item_bytes) {
    const uint64_t n = pod<uint64_t>();
    if (n > (in_.size() - pos_) / std::max<size_t>(1, min_item_bytes)) fail("count past the end");
    return n;
  }
  bool done() const { return pos_ == in_.size(); }
  [[noreturn]] void fail(const char* what) const {
    fail_(what);
    __builtin_unreachable();  // (fail_ throws)
  }

 private:
  void need(uint64_t n) {
    if (n > in_.size() - pos_) fail("truncated");
  }
  std::string_view in_;
  size_t pos_ = 0;
  Fail fail_;
};

/// One range input (kind, values, text, shape), as both formats write it with `w` (pod/str).
template <class Writer>
void write_range_input(Writer& w, const RangeInput& in) {
  w.template pod<uint8_t>(uint8_t(in.kind));
  w.template pod<int64_t>(in.int_value);
  w.template pod<double>(in.double_value);
  w.str(in.text);
  w.template pod<uint64_t>(in.shape.size());
  for (int64_t d : in.shape) w.template pod<int64_t>(d);
}

/// Reads what write_range_input wrote; an unknown kind fails the reader.
template <class Reader>
RangeInput read_range_input(Reader& r) {
  RangeInput in;
  const uint8_t k = r.template pod<uint8_t>();
  if (k > uint8_t(RangeInput::Kind::kShape)) r.fail("input kind");
  in.kind = RangeInput::Kind(k);
  in.int_value = r.template pod<int64_t>();
  in.double_value = r.template pod<double>();
  in.text = r.str();
  const uint64_t n = r.count(8);
  for (uint64_t i = 0; i < n; ++i) in.shape.push_back(r.template pod<int64_t>());
  return in;
}

}  // namespace framescope::internal
