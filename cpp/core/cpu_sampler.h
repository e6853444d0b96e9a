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
///
/// The period adapts to what the threads do. A wake-up costs the sampler thread 17-30 us of CPU
/// on the KVM guests measured, whatever the wait primitive (condition variable or
/// clock_nanosleep), with or without the clock reads: the timer interrupt and the switch in and
/// out are the cost, so the number of wake-ups is what to cut. A reading's error comes from a
/// change of a thread's rate of CPU use (CPU ns per wall ns, 0 blocked .. 1 running) inside a
/// period: linear interpolation misplaces at most (rate change) x (period) of CPU time. At the
/// base period that bound is the base period itself (a rate change of 1, busy <-> blocked). So
/// the period doubles, up to kMaxPeriodFactor x base, while no thread's rate moved between the
/// last two periods by more than base / (the longer period) (1/2 to go to 2x, 1/4 to go to 4x),
/// and falls back to the base period at once when one did, or when a thread started: a steady
/// program (a compute loop, an idle server; a busy thread preempted now and then on a loaded
/// machine) is read every 16 ms, one switching between work and waits every 4 ms as before.
/// Only the first switch after a steady stretch is then located within the longer period.
class CpuSampler {
 public:
  static constexpr int kMaxPeriodFactor = 4;
  /// The period after one of length `current` over which the largest change of a thread's rate
  /// of CPU use from the period before was `max_rate_change` (negative: unknown, such as a new
  /// thread's): double while the change stays within base / (the doubled period), else base.
  static int64_t next_period(int64_t base, int64_t current, double max_rate_change) noexcept;

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
  /// Returns the largest change of a thread's rate of CPU use since the previous reading's
  /// period (-1 when a thread has no rate yet: new, or read for the first or second time).
  double read_all_threads() noexcept;
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
  // The period's rate of each thread (under the session's mutex): last reading and rate.
  struct Rate {
    int64_t wall_ns = 0, cpu_ns = 0;
    double rate = -1;  // unknown until two readings
  };
  std::unordered_map<uint32_t, Rate> rates_;
  bool new_thread_ = false;  // under the session's mutex: the next period is the base one
  std::mutex wake_mutex_;    // guards stopping_, with wake_
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
