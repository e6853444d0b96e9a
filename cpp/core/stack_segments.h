// cpp/core/stack_segments.h: running a call on a fresh, separately mapped stack of the thread.
//
// Why: a PEP 523 frame hook makes every Python->Python call recurse in C, so code that recurses
// deeply (and runs fine without a hook) would exhaust the thread's C stack. When the stack is
// nearly used up, the hook continues on a new segment: a private mapping, reserved lazily
// (MAP_NORESERVE, so only the pages touched cost memory), with a guard page below it. The call
// returns on the segment and the stack pointer goes back, so nothing else sees the switch.
// Debuggers and unwinders walk through it: the trampoline keeps a frame-pointer CFI frame.
// Internal to framescope (not public API); no Python.h.
#pragma once

#include <cstddef>
#include <cstdint>

namespace framescope::internal {

/// The usable address range [low, high) of one stack segment; `high` is 16-byte aligned.
struct StackSegment {
  uintptr_t low = 0;
  uintptr_t high = 0;
};

/// Size of each segment, guard page included.
constexpr size_t kStackSegmentBytes = size_t(16) << 20;

/// True when this build can switch stacks (Linux on x86-64); elsewhere acquire_stack_segment()
/// always fails and callers keep their own limits.
bool stack_segments_supported() noexcept;

/// Sets the most segment memory (address space) one thread may use at once, rounded down to
/// whole segments; 0 disables segments. Returns the previous budget. Default: 1 GiB. Thread-safe
/// (a process-wide setting read at each acquire).
size_t set_stack_segment_budget(size_t bytes) noexcept;
size_t stack_segment_budget() noexcept;

/// The calling thread's segment number `level` (0 = the first one beyond the thread's own
/// stack), mapped on first use and kept for reuse. Returns false, mapping nothing, when segments
/// are unsupported, `level` is over the budget or the mapping fails. The segment belongs to the
/// calling thread and is unmapped when the thread exits or release_stack_segments_above() drops
/// it. Never throws.
bool acquire_stack_segment(unsigned level, StackSegment* out) noexcept;

/// Unmaps the calling thread's segments numbered above `level` (keeping `level` for reuse, so a
/// recursion that goes back and forth across a segment boundary maps nothing each time). The
/// caller must not be running on any of them.
void release_stack_segments_above(unsigned level) noexcept;

/// Segments the calling thread has mapped now (tests).
unsigned mapped_stack_segments() noexcept;

/// Calls `fn(arg)` with the stack pointer at the top of `segment` and returns when it returns,
/// back on the caller's stack. `fn` must not throw or longjmp out. Only for segments from
/// acquire_stack_segment() of the calling thread that nothing is running on.
void call_on_stack_segment(const StackSegment& segment, void (*fn)(void*), void* arg) noexcept;

}  // namespace framescope::internal
