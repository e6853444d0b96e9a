// framescope/range_input.h: the value type for a range's recorded inputs (record_shapes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace framescope {

/// One input of a range: nothing, an integer, a double, a string or a tensor-like shape (with an
/// optional dtype string). Plain value type; not thread-safe to mutate concurrently.
struct RangeInput {
  enum class Kind : uint8_t { kNone, kInt, kDouble, kString, kShape };
  Kind kind = Kind::kNone;
  int64_t int_value = 0;
  double double_value = 0.0;
  std::string text;            ///< kString: the value; kShape: the dtype (may be empty)
  std::vector<int64_t> shape;  ///< kShape only

  static RangeInput of_int(int64_t v) {
    RangeInput r;
    r.kind = Kind::kInt;
    r.int_value = v;
    return r;
  }
  static RangeInput of_double(double v) {
    RangeInput r;
    r.kind = Kind::kDouble;
    r.double_value = v;
    return r;
  }
  static RangeInput of_string(std::string v) {
    RangeInput r;
    r.kind = Kind::kString;
    r.text = std::move(v);
    return r;
  }
  static RangeInput of_shape(std::vector<int64_t> dims, std::string dtype = {}) {
    RangeInput r;
    r.kind = Kind::kShape;
    r.shape = std::move(dims);
    r.text = std::move(dtype);
    return r;
  }
};

}  // namespace framescope
