// cpp/core/cpu_sampler.cpp: the CPU clock sampling thread and the thinning of its readings.
#include "cpu_sampler.h"

#include <signal.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

#include "framescope/clock.h"
#include "session_impl.h"

namespace framescope::internal {

clockid_t thread_cpu_clock(uint64_t tid) noexcept {
  // Linux encodes a CPU clock as (~id << 3) | flags: CPUCLOCK_PERTHREAD_MASK (4) with
  // CPUCLOCK_SCHED (2) names the scheduler's runtime of one thread. This is glibc's
  // pthread_getcpuclockid() with the OS id given directly; the kernel refuses ids of threads
  // that are gone or belong to another process.
  // Shifted as unsigned (a left shift of a negative int is undefined in C++17); the conversion
  // back to clockid_t wraps as the kernel reads it.
  return clockid_t((~uint32_t(tid) << 3) | 6u);
}

namespace {

int64_t read_clock(clockid_t clock, bool* ok) noexcept {
  timespec ts{};
  *ok = clock_gettime(clock, &ts) == 0;
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

// ---- CpuTrack ---------------------------------------------------------------------------------

void CpuTrack::add(uint64_t ticks, int64_t cpu_ns) {
  if (exited) return;
  if (kept_.empty()) {
    kept_.push_back({ticks, cpu_ns});
    slope_lo_ = -std::numeric_limits<double>::infinity();
    slope_hi_ = std::numeric_limits<double>::infinity();
    return;
  }
  const CpuReading& newest = has_pending_ ? pending_ : kept_.back();
  if (ticks <= newest.ticks || cpu_ns < newest.cpu_ns) return;  // not after the newest
  if (!has_pending_) {
    pending_ = {ticks, cpu_ns};
    has_pending_ = true;
    return;
  }
  // Dropping the pending reading is fine when the line from the anchor to the new reading passes
  // within the tolerance of it and of every reading dropped before it.
  const CpuReading& a = kept_.back();
  const double pdt = double(pending_.ticks - a.ticks);
  const double lo = std::max(slope_lo_, double(pending_.cpu_ns - kToleranceNs - a.cpu_ns) / pdt);
  const double hi = std::min(slope_hi_, double(pending_.cpu_ns + kToleranceNs - a.cpu_ns) / pdt);
  const double slope = double(cpu_ns - a.cpu_ns) / double(ticks - a.ticks);
  if (lo <= slope && slope <= hi) {
    slope_lo_ = lo;
    slope_hi_ = hi;
  } else {
    kept_.push_back(pending_);
    slope_lo_ = -std::numeric_limits<double>::infinity();
    slope_hi_ = std::numeric_limits<double>::infinity();
  }
  pending_ = {ticks, cpu_ns};
}

std::vector<CpuReading> CpuTrack::finish() const {
  std::vector<CpuReading> out = kept_;
  if (has_pending_) out.push_back(pending_);
  return out;
}

// ---- CpuSampler -------------------------------------------------------------------------------

CpuSampler::CpuSampler(Session* session, int64_t period_ns)
    : session_(session), period_ns_(period_ns), pid_(getpid()) {}

CpuSampler::~CpuSampler() {
  stop();
  if (!forked()) {
    delete wake_;
    return;
  }
  // Kept in a forked child (see wake_), reachable so that leak checkers do not report it.
  static auto* kept_in_child = new std::vector<std::condition_variable*>();
  kept_in_child->push_back(wake_);
}

bool CpuSampler::start() noexcept {
  if (running_) return true;
  // The sampler must never run a signal handler (Python's, say): block everything in it. The
  // mask is inherited from the creating thread, so set it around pthread_create.
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  running_ = pthread_create(&thread_, nullptr, &CpuSampler::run, this) == 0;
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  // Named so that tools (top -H, /proc/PID/task/*/comm, bench/analysis_overhead.py) can tell it.
  if (running_) pthread_setname_np(thread_, "framescope-cpu");
  return running_;
}

void CpuSampler::stop() noexcept {
  if (!running_) return;
  running_ = false;
  if (forked()) return;  // the thread exists only in the parent
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stopping_ = true;
  }
  wake_->notify_one();  // at once: a stop never waits out the rest of a period
  pthread_join(thread_, nullptr);
}

void* CpuSampler::run(void* self) noexcept {
  static_cast<CpuSampler*>(self)->loop();
  return nullptr;
}

void CpuSampler::loop() noexcept {
  // A timed wait on a condition variable to an absolute time on the monotonic clock (glibc:
  // pthread_cond_clockwait, one futex call per period): stop() wakes it at once, so a session's
  // stop does not wait up to a period for the join.
  using Clock = std::chrono::steady_clock;
  int64_t period = period_ns_;  // adapts: see next_period()
  auto next = Clock::now();
  for (;;) {
    next += std::chrono::nanoseconds(period);
    {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      if (wake_->wait_until(lock, next, [this] { return stopping_; })) return;
    }
    const auto now = Clock::now();
    if (now > next + std::chrono::seconds(1)) next = now;  // fell far behind: no catch-up burst
    std::lock_guard<std::mutex> lock(session_->mutex);
    if (session_->stopped) continue;
    const double change = read_all_threads();
    period = next_period(period_ns_, period, new_thread_ ? -1.0 : change);
    new_thread_ = false;
  }
}

int64_t CpuSampler::next_period(int64_t base, int64_t current, double max_rate_change) noexcept {
  const int64_t longer = std::min(current * 2, base * kMaxPeriodFactor);
  if (max_rate_change < 0) return base;
  return max_rate_change <= double(base) / double(longer) ? longer : base;
}

double CpuSampler::read_all_threads() noexcept {
  const uint64_t ticks = now_ticks();
  timespec wall{};
  clock_gettime(CLOCK_MONOTONIC, &wall);
  const int64_t wall_ns = int64_t(wall.tv_sec) * 1'000'000'000 + wall.tv_nsec;
  double change = 0;
  for (const auto& buffer : session_->buffers) {
    auto it = tracks_.find(buffer->index());
    if (it != tracks_.end() && it->second.exited) continue;
    bool ok;
    const int64_t cpu = read_clock(thread_cpu_clock(buffer->os_tid), &ok);
    if (!ok) continue;
    add(buffer->index(), ticks, cpu);
    try {
      Rate& r = rates_[buffer->index()];
      double rate = -1;
      if (r.wall_ns > 0 && wall_ns > r.wall_ns) {
        rate = double(cpu - r.cpu_ns) / double(wall_ns - r.wall_ns);
      }
      if (rate < 0 || r.rate < 0) {
        change = -1;  // no rate to compare yet: the base period
      } else if (change >= 0) {
        change = std::max(change, std::fabs(rate - r.rate));
      }
      r = {wall_ns, cpu, rate};
    } catch (...) {  // out of memory: the base period
      change = -1;
    }
  }
  return change;
}

void CpuSampler::add(uint32_t buffer_index, uint64_t ticks, int64_t cpu_ns) noexcept {
  try {
    tracks_[buffer_index].add(ticks, cpu_ns);
  } catch (...) {  // out of memory: the readings so far stay
  }
}

void CpuSampler::thread_started(uint32_t buffer_index) noexcept {
  bool ok;
  const int64_t cpu = read_clock(CLOCK_THREAD_CPUTIME_ID, &ok);
  if (ok) add(buffer_index, now_ticks(), cpu);
  new_thread_ = true;
}

void CpuSampler::thread_exiting(uint32_t buffer_index) noexcept {
  thread_started(buffer_index);
  auto it = tracks_.find(buffer_index);
  if (it != tracks_.end()) it->second.exited = true;
}

void CpuSampler::read_thread(uint32_t buffer_index, uint64_t tid) noexcept {
  auto it = tracks_.find(buffer_index);
  if (it != tracks_.end() && it->second.exited) return;
  bool ok;
  const int64_t cpu = read_clock(thread_cpu_clock(tid), &ok);
  if (ok) add(buffer_index, now_ticks(), cpu);
}

std::vector<CpuReading> CpuSampler::readings(uint32_t buffer_index) const {
  if (forked()) return {};
  auto it = tracks_.find(buffer_index);
  return it == tracks_.end() ? std::vector<CpuReading>{} : it->second.finish();
}

}  // namespace framescope::internal
