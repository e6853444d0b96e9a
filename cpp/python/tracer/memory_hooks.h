// cpp/python/tracer/memory_hooks.h: Python allocations counted per thread (profile_memory=True) and
// written to the trace at the thread's next recorded event.
//
// Why not an event per allocation: Python allocates every few dozen nanoseconds in ordinary code;
// an event each (a clock read, 16 bytes) would cost more than the allocation. Instead the
// allocator wrappers add the requested size to a per-thread counter (a TLS add), and whoever
// records a call, return or range boundary on that thread first writes the bytes counted since
// the thread's previous event as one kAllocDelta event. Replay then charges them to the slice
// that was open between the two events: exact attribution at the granularity of the trace.
#pragma once

#include <cstdint>

#include "framescope/clock.h"
#include "framescope/internal/raw_event.h"
#include "framescope/internal/thread_buffer.h"
#include "framescope/macros.h"

namespace framescope::py {

/// Bytes this thread allocated since its last flush, counted in session `epoch` (a thread that
/// last counted in an older session restarts from zero). Trivially constructible: static TLS.
struct AllocationCounter {
  uint64_t pending;
  uint64_t epoch;
};
extern thread_local AllocationCounter t_allocations __attribute__((tls_model("initial-exec")));
/// True while a session counts Python allocations (the wrappers are installed and counting).
extern bool g_memory_tracking;

/// Installs counting wrappers around the PYMEM_DOMAIN_MEM and PYMEM_DOMAIN_OBJ allocators
/// (whatever is installed: CPython's, tracemalloc's, a debug hook), counting for the session
/// with `epoch`. Needs the GIL. Never fails.
void memory_hooks_start(uint64_t epoch);
/// How memory_hooks_stop() found the counting wrappers.
enum class MemoryHooksState {
  kRestored,      ///< ours were on top: the previous allocators are back
  kUnderAnother,  ///< another tool wrapped ours (tracemalloc.start() during the session)
  kDropped,       ///< ours were unlinked during the session (tracemalloc.stop() restored the
                  ///< allocators it found at its start, from before the session): allocations
                  ///< after that were not counted
};

/// Stops counting and restores the previous allocators exactly when ours are still the installed
/// ones. When another tool wrapped ours meanwhile (tracemalloc started during the session), ours
/// stay under it as a pass-through (unlinking them would break its chain). Needs the GIL.
MemoryHooksState memory_hooks_stop();

/// During a counting session: installs the counting wrappers again in a domain whose chain no
/// longer passes through them (tracemalloc.stop() put back the allocators from before the
/// session). Returns whether it did. Needs the GIL.
bool memory_hooks_rearm();

/// Whether the counting wrapper of the MEM / OBJ domain is the installed allocator (tests).
bool memory_hooks_on_top(bool obj_domain);

/// Writes this thread's uncounted allocations to `buffer` (an event at `ticks`), if any.
FRAMESCOPE_ALWAYS_INLINE void flush_allocations(internal::ThreadBuffer* buffer,
                                                uint64_t ticks) noexcept {
  AllocationCounter& c = t_allocations;
  if (FRAMESCOPE_LIKELY(c.pending == 0)) return;
  uint64_t bytes = c.pending;
  c.pending = 0;
  if (c.epoch != buffer->epoch) return;     // counted for another session
  while (bytes > internal::kPayloadMask) {  // (more than 64 PiB between two events)
    buffer->append(ticks,
                   internal::pack_word(internal::EventKind::kAllocDelta, internal::kPayloadMask));
    bytes -= internal::kPayloadMask;
  }
  buffer->append(ticks, internal::pack_word(internal::EventKind::kAllocDelta, bytes));
}

/// flush_allocations() for the calling thread now, when a session counts allocations (before a
/// range boundary: allocations inside a range are charged to it). Needs the GIL.
inline void flush_thread_allocations() noexcept {
  if (FRAMESCOPE_LIKELY(!g_memory_tracking)) return;
  if (internal::ThreadBuffer* b = internal::current_buffer()) flush_allocations(b, now_ticks());
}

}  // namespace framescope::py
