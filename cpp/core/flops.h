// cpp/core/flops.h: flop estimates of well-known ops from their input shapes (with_flops).
#pragma once

#include <string_view>
#include <vector>

#include "framescope/range_input.h"

namespace framescope::internal {

/// Floating-point operations of `name` given its inputs, or -1 when the op is not known or the
/// shapes do not fit it. Known: matmul/mm/bmm/addmm/linear (2*M*N*K), add/sub/mul/div (numel).
int64_t estimate_flops(std::string_view name, const std::vector<RangeInput>& inputs) noexcept;

}  // namespace framescope::internal
