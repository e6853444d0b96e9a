// cpp/core/fork_safety.h: what the fork handlers (session.cpp) need from the rest of the core.
#pragma once

namespace framescope::internal {

/// Takes / releases the observer registry's mutex around fork() (record_function.cpp), so that
/// the child never inherits it locked. Called by the pthread_atfork handlers only.
void lock_callbacks_for_fork() noexcept;
void unlock_callbacks_after_fork() noexcept;

/// Registers the core's pthread_atfork handlers (once; also done when the core is loaded).
/// Returns false when pthread_atfork failed (out of memory). Thread-safe.
bool install_fork_handlers() noexcept;

}  // namespace framescope::internal
