// cpp/python/code_extra.h: framescope's per-code-object record, kept in the code's co_extra slot.
#pragma once

#include <cstdint>

#include "framescope/macros.h"
#include "py_compat.h"

namespace framescope::py {

/// CodeExtra::compact_epoch of code that takes no fast path: never a session's epoch (sessions'
/// epochs never have the top bit, see kSkippedEpochBit in tracer.h).
constexpr uint64_t kNoCompactEpoch = uint64_t(1) << 63;

/// What framescope keeps per code object. Created on first need (with the GIL), freed by CPython
/// through the freefunc when the code object dies or reset_code() replaces it.
struct CodeExtra {
  uint64_t traced_epoch = 0;  ///< tracer: session in which this code was registered (holds a ref)
  const char* call_label = nullptr;  ///< tracer: "nn.Module"-style label of calls of this code
  /// tracer: frames of this code need register_code() every time (labelled calls, and on 3.11+
  /// generator code, whose creation call is evaluated through the hook but is no resume)
  bool tracer_slow_path = false;
  /// tracer: compact_call_bits() of this code in session `traced_epoch`, 0 when it has no
  /// compact index (the hook then records 16-byte kPyCall events)
  uint64_t compact_call_bits = 0;
  /// tracer: the session whose hook may record this code's calls from compact_call_bits alone
  /// (registered in it, a compact index, no tracer_slow_path), else kNoCompactEpoch. One compare
  /// on the hot path instead of three (epoch, slow path, index): see fast_compact_call().
  uint64_t compact_epoch = kNoCompactEpoch;
  void* eval_state = nullptr;  ///< eval_frame API: cache entries, frame_state, skip mark
};

/// The co_extra index framescope uses, -1 before init_code_extra().
extern FRAMESCOPE_HIDDEN Py_ssize_t g_code_extra_index;
/// Frees a CodeExtra's eval_state (installed by the eval_frame API). May be null.
extern void (*g_free_eval_state)(void* state);

/// Requests the co_extra index. Returns false with a Python exception set on failure.
bool init_code_extra();

/// Mirror of CPython's private `_PyCodeObjectExtra` (unchanged from 3.6 to 3.13): the array
/// co_extra points to. Read directly on the hot path to avoid a call per frame.
struct CodeExtraArray {
  Py_ssize_t size;
  void* extras[1];
};

/// This code's CodeExtra, or null when it has none yet. Borrowed; needs the GIL.
FRAMESCOPE_ALWAYS_INLINE CodeExtra* find_code_extra(PyCodeObject* code) noexcept {
  auto* array = static_cast<CodeExtraArray*>(code->co_extra);
  if (!array || g_code_extra_index >= array->size) return nullptr;
  return static_cast<CodeExtra*>(array->extras[g_code_extra_index]);
}

/// This code's CodeExtra, created if missing. Null with a Python exception set on failure.
CodeExtra* get_or_create_code_extra(PyCodeObject* code);

}  // namespace framescope::py
