// cpp/core/thread_identity.h: OS and pthread ids of the calling thread.
#pragma once

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>

namespace framescope::internal {

inline uint64_t os_thread_id() noexcept { return uint64_t(syscall(SYS_gettid)); }
inline uint64_t pthread_thread_id() noexcept { return uint64_t(pthread_self()); }

}  // namespace framescope::internal
