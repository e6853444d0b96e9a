// cpp/core/scoped_range.cpp: the out-of-line paths of ScopedRange (observed ranges, moved slots).
#include "framescope/scoped_range.h"

namespace framescope {

void ScopedRange::begin_observed(const char* static_name, RecordScope scope) noexcept {
  new (&observed_) RecordFunction(static_name, scope);
  // An inert RecordFunction (nothing consumes ranges of this scope after all) needs no end.
  if (observed_.is_active()) {
    mode_ = Mode::kObserved;
  } else {
    observed_.~RecordFunction();
  }
}

void ScopedRange::end_slow() noexcept {
  if (mode_ == Mode::kObserved) {
    observed_.~RecordFunction();  // ends the range and runs the end callbacks
  } else if (mode_ == Mode::kDropped) {
    // The begin was dropped at the memory limit: the end is not written but counts as dropped
    // as well, so that dropped_events counts events (two per range) like recorded_events. The
    // buffer is still this thread's while the slot or the session is unchanged (as below).
    if ((internal::t_slot.buffer == session_.buffer && internal::t_slot.epoch == session_.epoch) ||
        internal::g_session_epoch.load(std::memory_order_relaxed) == session_.epoch) {
      session_.buffer->count_dropped(1);
    }
  } else if (internal::g_session_epoch.load(std::memory_order_relaxed) == session_.epoch) {
    // A session range whose thread slot changed mid-range (a ThreadLocalStateGuard). A scope
    // ends on the thread that began it, and while the session runs that thread keeps owning
    // the buffer, so the end goes where the begin went. Once the session stopped, the range is
    // closed at the stop time by the replay instead.
    session_.buffer->append(
        now_ticks(), internal::pack_word(internal::EventKind::kRangeEnd, session_.begin_seq));
  }
  mode_ = Mode::kInert;
}

}  // namespace framescope
