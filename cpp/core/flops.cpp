// cpp/core/flops.cpp: flop estimates for matmul-like and elementwise ops.
#include "flops.h"

#include <cstdint>

namespace framescope::internal {

namespace {

std::string_view base_name(std::string_view name) {
  size_t colon = name.rfind("::");
  if (colon != std::string_view::npos) name.remove_prefix(colon + 2);
  size_t dot = name.rfind('.');
  if (dot != std::string_view::npos) name.remove_prefix(dot + 1);
  return name;
}

const std::vector<int64_t>* shape_at(const std::vector<RangeInput>& in, size_t i) {
  if (i >= in.size() || in[i].kind != RangeInput::Kind::kShape) return nullptr;
  return &in[i].shape;
}

int64_t numel(const std::vector<int64_t>& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

}  // namespace

int64_t estimate_flops(std::string_view name, const std::vector<RangeInput>& inputs) noexcept {
  std::string_view op = base_name(name);
  if (op == "mm" || op == "matmul" || op == "bmm" || op == "addmm" || op == "linear") {
    size_t first = op == "addmm" ? 1 : 0;
    const auto* a = shape_at(inputs, first);
    const auto* b = shape_at(inputs, first + 1);
    if (!a || !b || a->size() < 2 || b->empty()) return -1;
    int64_t k = a->back();
    int64_t m = numel(*a) / (k ? k : 1);
    // linear's weight is (out, in); the others' second operand is (.., k, n)
    int64_t n = op == "linear" ? b->front() : b->back();
    return 2 * m * n * k;
  }
  if (op == "add" || op == "sub" || op == "mul" || op == "div") {
    const auto* a = shape_at(inputs, 0);
    return a ? numel(*a) : -1;
  }
  return -1;
}

}  // namespace framescope::internal
