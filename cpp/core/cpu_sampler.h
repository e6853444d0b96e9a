// cpp/core/cpu_sampler.h: a thread that reads every recording thread's CPU clock every few ms.
//
// Why a sampler and not a clock read per event: a thread's CPU clock costs a system call
// (CLOCK_THREAD_CPUTIME_ID has no vDSO path; ~200-500 ns on KVM), twenty times the whole cost of a
// recorded Python call. Read from another thread every millisecond or two, it costs the recording
// threads nothing, and readers interpolate between readings (cpu_clock.h): a slice's on-CPU time
// is the thread's CPU clock at its end minus at its start, linearly interpolated. Exact between
// readings where the thread was all busy or all blocked; within one period that holds both, its
// CPU time is spread evenly, so a slice's error is at most the CPU time of the (at most two)
// periods holding its ends: slices much longer than the period are close, shorter ones an
// estimate. The session's start and stop each take a reading of every thread.
#pragma once

#include <pthread.h>
#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace framescope::internal {

class Session;

/// One reading on the session's tick clock (converted to ns at stop).
struct CpuReading {
  uint64_t ticks = 0;
  int64_t cpu_ns = 0;
};

/// A thread's readings, thinned as they come: a reading that lies on the line between its
/// neighbours (within kToleranceNs of CPU time) is dropped, so an idle or a fully busy thread keeps
/// a handful of readings however long the session (a swinging-door filter).
class CpuTrack {
 public:
  static constexpr int64_t kToleranceNs = 20'000;
  /// Adds a reading (ignored when time or CPU time goes backwards).
  void add(uint64_t ticks, int64_t cpu_ns);
  /// The kept readings, the last one included.
  std::vector<CpuReading> finish() const;
  /// The thread exited (its final reading is in): later readings are ignored, so that a thread
  /// reusing its OS id is never read into this track.
  bool exited = false;

 private:
  std::vector<CpuReading> kept_;
  CpuReading pending_{};  // newest reading, not kept yet
  bool has_pending_ = false;
  // Slopes (CPU ns per tick) from kept_.back() that keep every dropped reading within tolerance.
  double slope_lo_ = 0, slope_hi_ = 0;
};

/// The CPU clock readings of one session's threads. Tracks are keyed by buffer index and guarded
/// by the session's mutex (the sampler thread and the buffers' owners take it, in that order
/// before nothing else).
class CpuSampler {
 public:
  CpuSampler(Session* session, int64_t period_ns);
  ~CpuSampler();
  CpuSampler(const CpuSampler&) = delete;
  CpuSampler& operator=(const CpuSampler&) = delete;

  /// Starts the sampling thread; false (and no thread) when it cannot be created.
  bool start() noexcept;
  /// Stops and joins the sampling thread (not in a forked child, where it does not exist: see
  /// forked()). Call without the session's mutex.
  void stop() noexcept;
  /// True in a child forked while this sampler ran: the thread is gone, and the readings are the
  /// parent's threads'. Readers then get no CPU times.
  bool forked() const noexcept { return getpid() != pid_; }

  // ---- under the session's mutex ----
  /// The calling thread's first reading (its buffer was just created).
  void thread_started(uint32_t buffer_index) noexcept;
  /// The calling thread's last reading (it is exiting).
  void thread_exiting(uint32_t buffer_index) noexcept;
  /// A reading of the thread with OS id `tid` now (at stop), unless its track is finished.
  void read_thread(uint32_t buffer_index, uint64_t tid) noexcept;
  /// A reading of every recording thread of the session now, what each period takes (at stop:
  /// the final readings, taken before the sampler thread is stopped so that the time up to the
  /// stop is covered by a reading at the stop, not one a period later).
  void read_all_threads() noexcept;
  /// The readings of a buffer's thread (empty when none, or forked()).
  std::vector<CpuReading> readings(uint32_t buffer_index) const;

 private:
  static void* run(void* self) noexcept;
  void loop() noexcept;
  void add(uint32_t buffer_index, uint64_t ticks, int64_t cpu_ns) noexcept;

  Session* session_;
  const int64_t period_ns_;
  const pid_t pid_;
  std::unordered_map<uint32_t, CpuTrack> tracks_;  // under the session's mutex
  std::mutex wake_mutex_;                          // guards stopping_, with wake_
  // stop() wakes the sampling thread at once. Owned, but never destroyed in a forked child:
  // the parent's sampler thread may have been waiting on it at the fork, and glibc's
  // pthread_cond_destroy waits for waiters to leave, which in the child never happens.
  std::condition_variable* wake_ = new std::condition_variable();
  bool stopping_ = false;
  pthread_t thread_{};
  bool running_ = false;
};

/// The CPU clock of the thread with OS id `tid` in this process (what pthread_getcpuclockid
/// computes from a pthread_t; by OS id it stays valid to ask after the thread exited: the read
/// then fails with EINVAL instead of touching a freed pthread structure).
clockid_t thread_cpu_clock(uint64_t tid) noexcept;

}  // namespace framescope::internal
