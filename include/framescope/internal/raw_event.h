// framescope/internal/raw_event.h: the packed 16-byte event every capture path writes.
#pragma once

#include <cstdint>

namespace framescope::internal {

/// What a RawEvent records; stored in the top 8 bits of `RawEvent::word`.
enum class EventKind : uint8_t {
  kRangeBegin = 1,  ///< payload: static `const char*` name (48 bits) | scope << 48
  kRangeBeginSide =
      2,           ///< payload: index into the buffer's range details (dynamic name, ids, inputs)
  kRangeEnd = 3,   ///< payload: seq of the matching begin on this buffer
  kPyCall = 4,     ///< payload: opaque Python key (code object pointer or labelled-call key)
  kPyReturn = 5,   ///< payload: unused
  kCCall = 6,      ///< payload: opaque C-function key
  kCReturn = 7,    ///< payload: unused
  kMark = 8,       ///< payload: index into the buffer's strings
  kMemory = 9,     ///< payload: index into the buffer's memory records
  kPyAnchor = 10,  ///< payload: address of the pre-existing frame under a depth-0 call
};

/// Layout (16 bytes, no padding):
///   ticks  u64  TSC (or monotonic ns) at the event
///   word   u64  kind:8 | payload:56
struct RawEvent {
  uint64_t ticks;
  uint64_t word;
};
static_assert(sizeof(RawEvent) == 16, "RawEvent must stay 16 bytes");

constexpr int kKindShift = 56;
constexpr uint64_t kPayloadMask = (uint64_t(1) << kKindShift) - 1;
constexpr uint64_t kPointerMask = (uint64_t(1) << 48) - 1;

constexpr uint64_t pack_word(EventKind kind, uint64_t payload) {
  return (uint64_t(kind) << kKindShift) | (payload & kPayloadMask);
}
constexpr EventKind kind_of(uint64_t word) { return EventKind(word >> kKindShift); }
constexpr uint64_t payload_of(uint64_t word) { return word & kPayloadMask; }

}  // namespace framescope::internal
