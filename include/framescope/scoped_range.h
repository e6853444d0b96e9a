// framescope/scoped_range.h: ScopedRange, the lean range behind FRAMESCOPE_RANGE, and the macros.
#pragma once

#include <cstdint>
#include <new>

#include "framescope/clock.h"
#include "framescope/internal/thread_buffer.h"
#include "framescope/macros.h"
#include "framescope/record_function.h"

namespace framescope {

/// A range for one C++ scope: begins in the constructor, ends in the destructor, on the same
/// thread. It records exactly what a RecordFunction named by `static_name` would (same events,
/// same observers, same sampling), but keeps only what a scope needs: when a session alone
/// consumes ranges it holds the buffer, the session epoch and the begin event's number, and its
/// begin and end are inline appends with no call into the library. When callbacks observe
/// ranges (or the session records input shapes) it builds a full RecordFunction in place.
///
/// Use RecordFunction directly for a range that ends on another thread, takes a dynamic name
/// or inputs, or whose observers read it. Not copyable or movable; `static_name` must have
/// static storage duration (a literal). Never throws.
class ScopedRange {
 public:
  FRAMESCOPE_ALWAYS_INLINE explicit ScopedRange(const char* static_name,
                                                RecordScope scope = RecordScope::kFunction) noexcept
      : mode_(Mode::kInert) {
    if (FRAMESCOPE_UNLIKELY(internal::g_range_consumers.load(std::memory_order_relaxed) != 0)) {
      begin(static_name, scope);
    }
  }
  FRAMESCOPE_ALWAYS_INLINE ~ScopedRange() {
    if (FRAMESCOPE_UNLIKELY(mode_ != Mode::kInert)) {
      // Fast path: recorded by the session only, and this thread still writes to the buffer the
      // range began in (its slot was not re-pointed by a ThreadLocalStateGuard or a new session).
      if (FRAMESCOPE_LIKELY(mode_ == Mode::kSession && internal::t_slot.buffer == session_.buffer &&
                            internal::t_slot.epoch == session_.epoch)) {
        session_.buffer->append(
            now_ticks(), internal::pack_word(internal::EventKind::kRangeEnd, session_.begin_seq));
        return;
      }
      end_slow();
    }
  }
  ScopedRange(const ScopedRange&) = delete;
  ScopedRange& operator=(const ScopedRange&) = delete;

  /// True when a session records the range or a callback observes it.
  bool is_active() const noexcept { return mode_ == Mode::kSession || mode_ == Mode::kObserved; }

 private:
  enum class Mode : uint8_t {
    kInert,     // nothing to end: nobody consumed the range
    kSession,   // session_ is set
    kObserved,  // observed_ holds a started RecordFunction
    kDropped,   // the session dropped the begin (limit): session_ is set, the end only counts
  };

  FRAMESCOPE_ALWAYS_INLINE void begin(const char* static_name, RecordScope scope) noexcept {
    internal::ThreadBuffer* b = internal::current_buffer();
    if (FRAMESCOPE_LIKELY(b != nullptr && !internal::have_callbacks() && !b->record_shapes)) {
      uint64_t seq = b->append(now_ticks(), internal::range_begin_word(static_name, scope));
      session_ = SessionRange{b, internal::t_slot.epoch, seq};
      // At the limit the begin is dropped: nothing to end, but the end is counted dropped too.
      mode_ = FRAMESCOPE_UNLIKELY(seq == internal::ThreadBuffer::kDroppedSeq) ? Mode::kDropped
                                                                              : Mode::kSession;
      return;
    }
    begin_observed(static_name, scope);
  }
  // Callbacks, input shapes, or no buffer yet on this thread: a full RecordFunction.
  FRAMESCOPE_NOINLINE void begin_observed(const char* static_name, RecordScope scope) noexcept;
  // Ends an observed range, or a session range whose thread slot changed mid-range, or counts
  // the end of a range whose begin was dropped.
  FRAMESCOPE_NOINLINE void end_slow() noexcept;

  // Which members are live depends on mode_; the union keeps observed_ unconstructed (and the
  // fast paths free of its initialisation) unless a callback observes the range.
  struct SessionRange {
    internal::ThreadBuffer* buffer;  // the session buffer of this thread at begin
    uint64_t epoch;                  // the session's epoch at begin
    uint64_t begin_seq;              // number of the begin event in buffer
  };
  union {
    SessionRange session_;
    RecordFunction observed_;
  };
  Mode mode_;
};

}  // namespace framescope

/// Records the enclosing scope as a range named by a string literal (a ScopedRange). Costs one
/// relaxed load and a branch when nothing consumes ranges; compiles to nothing with
/// FRAMESCOPE_DISABLE.
#if FRAMESCOPE_ENABLED
#define FRAMESCOPE_RANGE(name) ::framescope::ScopedRange FRAMESCOPE_UNIQUE(framescope_range_)(name)
#define FRAMESCOPE_RANGE_SCOPE(name, scope) \
  ::framescope::ScopedRange FRAMESCOPE_UNIQUE(framescope_range_)(name, scope)
#define FRAMESCOPE_USER_RANGE(name) \
  FRAMESCOPE_RANGE_SCOPE(name, ::framescope::RecordScope::kUserScope)
#else
#define FRAMESCOPE_RANGE(name) static_cast<void>(0)
#define FRAMESCOPE_RANGE_SCOPE(name, scope) static_cast<void>(0)
#define FRAMESCOPE_USER_RANGE(name) static_cast<void>(0)
#endif
