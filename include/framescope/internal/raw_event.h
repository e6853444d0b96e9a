// framescope/internal/raw_event.h: the packed 16-byte event slot and the 8-byte compact events.
#pragma once

#include <cstdint>

namespace framescope::internal {

/// What a RawEvent records; stored in the top 8 bits of `RawEvent::word`.
enum class EventKind : uint8_t {
  kPadding = 0,     ///< an unused slot at the end of a chunk; ignored
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
  kBase = 11,      ///< payload: unused; `ticks` is the base of the compact events that follow
  /// payload: address of a frame that was running at session start and returned, yielded or
  /// unwound now (frames above it in the replay stack have ended too)
  kPyInitialExit = 12,
  /// payload: unused. The innermost Python frame returned now, and its own return event comes
  /// later: on 3.12+ a frame's locals are freed (finalizers run) before the frame hook returns.
  kPyExitEarly = 13,
  /// payload: bytes the thread allocated through Python's allocators since its previous event
  /// (profile_memory; cpp/python/tracer/memory_hooks.h)
  kAllocDelta = 14,
  // Kinds 0xC0-0xFF mark a compact pair slot (see below); they never appear as EventKind.
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

/// Compact events: Python calls and returns take 8 bytes instead of 16. Two of them share one
/// RawEvent slot, a "pair slot": the first in `word`, the second in `ticks` (0 while the second
/// is not written yet, and for good when another event closed the pair). A compact event is
///   tag:2 (= 0b11) | is_return:1 | code index:25 | ticks - base:36
/// where the index refers to the session's compact key table (a registered code object) and
/// the base is the `ticks` of the last kBase slot of the same buffer, which starts every chunk
/// and follows any gap longer than 2^36 ticks (~24 s at 2.8 GHz). The tag keeps the top byte
/// of `word` at 0xC0 or above, so a pair slot never reads as an ordinary event; ordinary events
/// keep their own 64-bit `ticks` and need no base.
constexpr uint64_t kCompactTag = uint64_t(3) << 62;
constexpr uint64_t kCompactReturnBit = uint64_t(1) << 61;
constexpr int kCompactIndexShift = 36;
constexpr uint32_t kCompactIndexLimit = uint32_t(1) << 25;  ///< indices are below this
constexpr uint64_t kCompactDeltaLimit = uint64_t(1) << kCompactIndexShift;

/// True when `word` is the first half of a compact pair slot.
constexpr bool is_compact_pair(uint64_t word) { return (word & kCompactTag) == kCompactTag; }
/// The delta-free bits of a compact call of the code at `index` (< kCompactIndexLimit).
constexpr uint64_t compact_call_bits(uint32_t index) {
  return kCompactTag | (uint64_t(index) << kCompactIndexShift);
}
/// The delta-free bits of a compact return.
constexpr uint64_t kCompactReturnBits = kCompactTag | kCompactReturnBit;
constexpr bool compact_is_return(uint64_t e) { return (e & kCompactReturnBit) != 0; }
constexpr uint32_t compact_index(uint64_t e) {
  return uint32_t((e >> kCompactIndexShift) & (kCompactIndexLimit - 1));
}
constexpr uint64_t compact_delta(uint64_t e) { return e & (kCompactDeltaLimit - 1); }

}  // namespace framescope::internal
