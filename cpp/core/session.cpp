// cpp/core/session.cpp: enabling and stopping the process-wide session, thread attachment.
#include "framescope/session.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "chunk_pool.h"
#include "fork_safety.h"
#include "framescope/debug_info.h"
#include "framescope/record_function.h"
#include "session_impl.h"
#include "stream_writer.h"
#include "thread_identity.h"

namespace framescope {
namespace internal {

__thread ThreadSlot t_slot __attribute__((tls_model("initial-exec"))) = {
    nullptr, 0, {nullptr, UINTPTR_MAX, 0, nullptr, 0, 0, 0}};
std::atomic<uint64_t> g_session_epoch{0};

namespace {

// The active session. Guarded by g_session_mutex; the hot path never reads it (it compares
// epochs), only attach_current_thread() and the API functions below do.
std::mutex g_session_mutex;
std::shared_ptr<Session> g_session;
uint64_t g_last_epoch = 0;

// Owns the calling thread's buffer. Unlike t_slot it has a destructor, so it is touched only on
// the slow path; at thread exit it drops the thread's reference, and the session (if still
// running) keeps the buffer and its events.
void note_thread_exit(const ThreadBuffer& buffer) noexcept;

struct ThreadOwner {
  std::shared_ptr<ThreadBuffer> buffer;
  ~ThreadOwner() {
    t_slot.set(nullptr, ~uint64_t(0));
    if (buffer) {
      note_thread_exit(*buffer);  // the CPU sampler's last reading, on the thread itself
      buffer->owner_exiting();    // a streamed session takes the thread's chunks now
    }
    buffer.reset();
  }
};
thread_local ThreadOwner t_owner;

// Marks a session in ThreadLocalDebugInfo (for ThreadScope::kPropagated and "enabled twice").
struct ProfilerStateInfo : DebugInfoBase {
  explicit ProfilerStateInfo(uint64_t e) : epoch(e) {}
  uint64_t epoch;
};

}  // namespace

Session::Session(const SessionConfig& cfg, uint64_t e)
    : config(cfg), epoch(e), enabling_thread(current_thread_id()) {
  limit_bytes_ = int64_t(std::min<size_t>(config.memory_limit_bytes, size_t(INT64_MAX / 2)));
}

std::shared_ptr<ThreadBuffer> Session::create_buffer() {
  std::lock_guard<std::mutex> lock(mutex);
  if (stopped) return nullptr;
  // A thread's buffer counts against the limit (with its first, smallest chunk in view): ten
  // thousand short threads must not hold ten thousand buffers past it.
  const int64_t need = kThreadBytes + int64_t(ChunkPool::kMinChunkEvents * sizeof(RawEvent));
  if (bytes_in_use_.load(std::memory_order_relaxed) + need > limit_bytes_) {
    if (config.on_limit == LimitPolicy::kKeepNewest) {
      evict_exited_locked();
    } else if (!stream) {
      // Stop policy: recording stopped at the limit; a thread that starts now gets the one
      // shared buffer that keeps nothing and counts its events as dropped (and is said once
      // at the stop). A streamed session always takes new threads: their chunks go to the
      // writer.
      ++unrecorded_threads;
      warn_limit_once();
      if (!overflow) {
        auto b = std::make_shared<ThreadBuffer>(this, next_buffer_index);
        b->make_counting_only();
        b->epoch = epoch;
        buffers.push_back(b);
        ++next_buffer_index;
        overflow = std::move(b);
      }
      return overflow;
    }
  }
  auto buffer = std::make_shared<ThreadBuffer>(this, next_buffer_index);
  charge(kThreadBytes);
  buffer->os_tid = os_thread_id();
  buffer->pthread_id = pthread_thread_id();
  buffer->logical_tid = current_thread_id();
  buffer->epoch = epoch;
  buffer->record_shapes = config.record_shapes;
  buffer->profile_memory = config.profile_memory;
  buffers.push_back(buffer);
  ++next_buffer_index;
  if (cpu_sampler) cpu_sampler->thread_started(buffer->index());
  return buffer;
}

RawEvent* Session::take_chunk(uint32_t& events, bool over_limit) noexcept {
  size_t size = over_limit ? ChunkPool::kMinChunkEvents : events;
  for (; size >= ChunkPool::kMinChunkEvents; size /= 4) {
    const int64_t bytes = int64_t(size * sizeof(RawEvent));
    const int64_t used = bytes_in_use_.fetch_add(bytes, std::memory_order_relaxed);
    if (!over_limit && used + bytes > limit_bytes_) {
      // Too big for what is left: a smaller size class may still fit.
      bytes_in_use_.fetch_sub(bytes, std::memory_order_relaxed);
      continue;
    }
    // What the session may still take after this chunk: the pool maps no more ahead for it.
    const size_t headroom = over_limit ? 0 : size_t(limit_bytes_ - (used + bytes));
    RawEvent* c = ChunkPool::instance().acquire(size, headroom);
    if (!c) {
      bytes_in_use_.fetch_sub(bytes, std::memory_order_relaxed);
      return nullptr;
    }
    events = uint32_t(size);
    return c;
  }
  return nullptr;
}

void Session::give_back_chunk(RawEvent* chunk, uint32_t events) noexcept {
  bytes_in_use_.fetch_sub(int64_t(events * sizeof(RawEvent)), std::memory_order_relaxed);
  ChunkPool::instance().release(chunk, events);
}

bool Session::try_charge(size_t bytes) noexcept {
  const int64_t b = int64_t(std::min<size_t>(bytes, size_t(INT64_MAX / 4)));
  if (bytes_in_use_.fetch_add(b, std::memory_order_relaxed) + b <= limit_bytes_) return true;
  bytes_in_use_.fetch_sub(b, std::memory_order_relaxed);
  return false;
}

void Session::evict_exited_locked() noexcept {
  // Some headroom (1/16 of the limit) so that the next new threads do not each scan again.
  const int64_t target = limit_bytes_ - limit_bytes_ / 16;
  size_t n = 0;
  for (; n < buffers.size() && bytes_in_use_.load(std::memory_order_relaxed) > target; ++n) {
    ThreadBuffer& b = *buffers[n];
    if (!b.exited()) continue;
    evicted_events += b.evict_exited();
    ++evicted_threads;
    charge(-kThreadBytes);
  }
  // The evicted buffers leave the session (their events are counted in evicted_events).
  buffers.erase(std::remove_if(buffers.begin(), buffers.begin() + long(n),
                               [](const std::shared_ptr<ThreadBuffer>& b) { return b->exited(); }),
                buffers.begin() + long(n));
}

void Session::warn_limit_once() noexcept {
  if (limit_warned_.exchange(true)) return;
  // A one-line notice now, as it happens (a long run should not learn of it only at its end);
  // the warning with the remedy (which framescope run words with its own flags) and the count
  // is printed once, at the stop, from the session's warnings.
  std::fprintf(stderr,
               "framescope: memory limit (%zu bytes) reached: recording stops here; what follows "
               "is counted as dropped\n",
               config.memory_limit_bytes);
  char msg[200];
  std::snprintf(msg, sizeof msg,
                "framescope: the session reached its memory limit (%zu bytes); later events are "
                "dropped (raise memory_limit or use on_limit=\"keep_newest\")",
                config.memory_limit_bytes);
  add_warning(msg);
}

void Session::add_async_end(const AsyncEnd& end) {
  std::lock_guard<std::mutex> lock(mutex);
  async_ends.push_back(end);
}

void Session::add_warning(std::string message) {
  std::lock_guard<std::mutex> lock(warnings_mutex);
  warnings.push_back(std::move(message));
}

void Session::continue_in_fork_child(ThreadBuffer* kept, uint64_t fork_ticks) {
  const uint64_t parent_tid = kept ? kept->os_tid : 0;
  const uint64_t pthread_id = pthread_thread_id();
  std::vector<InitialStack> stacks;
  for (auto& buffer : buffers) {
    // Threads that exited before the fork, or that do not exist in the child: their events are
    // the parent's. Their owners are gone, so nothing appends to these chunks any more.
    if (buffer.get() != kept) buffer->release_chunks();
  }
  buffers.erase(std::remove_if(buffers.begin(), buffers.end(),
                               [kept](const auto& b) { return b.get() != kept; }),
                buffers.end());
  if (overflow.get() != kept) overflow.reset();  // it was dropped with the other buffers
  start_ticks = fork_ticks;
  async_ends.clear();  // ranges that ended before the fork
  limit_warned_.store(false, std::memory_order_relaxed);
  unrecorded_threads = evicted_threads = evicted_events = 0;
  // Frames that were running on the forking thread when the session started (and still were at
  // the fork) are open slices from the child's start too: keep that thread's initial stack, as
  // the closes among its parent-side events leave it.
  for (InitialStack& stack : initial_stacks) {
    if (stack.os_tid ? stack.os_tid != parent_tid : stack.pthread_id != pthread_id) continue;
    stacks.push_back(std::move(stack));
    break;
  }
  initial_stacks = std::move(stacks);
  if (!kept) {
    initial_stacks.clear();
    bytes_in_use_.store(0, std::memory_order_relaxed);
    return;
  }
  const uint64_t child_tid = os_thread_id();
  std::vector<RawEvent> closes = kept->restart_in_fork_child(fork_ticks, child_tid);
  // What the child holds now: the kept buffer, without chunks; its side records were the
  // parent's. (Other buffers' chunks went back to the pool, uncounted.)
  bytes_in_use_.store(kThreadBytes, std::memory_order_relaxed);
  if (initial_stacks.empty()) return;
  InitialStack& stack = initial_stacks.front();
  stack.os_tid = child_tid;
  for (const RawEvent& close : closes) {  // replay's rules for pre-existing frames
    if (stack.keys.empty()) break;
    if (kind_of(close.word) == EventKind::kPyReturn) {
      stack.keys.pop_back();
      stack.frame_addresses.resize(std::min(stack.frame_addresses.size(), stack.keys.size()));
    } else {
      // kPyAnchor: the frame at this address runs, those above it have returned;
      // kPyInitialExit: the frame at this address has returned too.
      const uint64_t address = payload_of(close.word);
      const size_t keep = kind_of(close.word) == EventKind::kPyInitialExit ? 0 : 1;
      for (size_t i = stack.frame_addresses.size(); i-- > 0;) {
        if (stack.frame_addresses[i] == address) {
          stack.keys.resize(i + keep);
          stack.frame_addresses.resize(i + keep);
          break;
        }
      }
    }
  }
}

// pause_thread_recording() depth of this thread. Read only on the slow path (attach), so the
// hot path pays nothing for it: a pause leaves t_slot saying "no buffer" for the current epoch.
__thread int t_recording_paused = 0;

void pause_thread_recording() noexcept {
  ++t_recording_paused;
  t_slot.set(nullptr, g_session_epoch.load(std::memory_order_acquire));
}

void resume_thread_recording() noexcept {
  if (t_recording_paused == 0) return;
  if (--t_recording_paused == 0) invalidate_thread_slot();
}

ThreadBuffer* attach_current_thread() noexcept {
  uint64_t epoch = g_session_epoch.load(std::memory_order_acquire);
  if (t_recording_paused != 0) {
    t_slot.set(nullptr, epoch);
    return nullptr;
  }
  std::shared_ptr<Session> session;
  {
    std::lock_guard<std::mutex> lock(g_session_mutex);
    session = g_session;
  }
  if (!session || session->epoch != epoch) {
    // No session, or it changed under us: let go of a buffer of a stopped session (its events
    // were collected at stop).
    t_owner.buffer.reset();
    t_slot.set(nullptr, epoch);
    return nullptr;
  }
  if (t_owner.buffer && t_owner.buffer->epoch != epoch) t_owner.buffer.reset();  // older session
  if (session->config.threads == ThreadScope::kPropagated) {
    // Checked on every attach, not only the first: a pool worker that recorded a task of the
    // session must not record the next task when that one does not carry the session's state.
    // The thread keeps its buffer (a range it started may still end on it).
    auto* info =
        dynamic_cast<ProfilerStateInfo*>(ThreadLocalDebugInfo::get(DebugInfoKind::kProfilerState));
    if (!info || info->epoch != epoch) {
      t_slot.set(nullptr, epoch);
      return nullptr;
    }
  }
  if (!t_owner.buffer) {
    try {
      t_owner.buffer = session->create_buffer();
    } catch (...) {
      t_owner.buffer.reset();
    }
  }
  t_slot.set(t_owner.buffer.get(), epoch);
  return t_owner.buffer.get();
}

std::shared_ptr<Session> active_session() {
  std::lock_guard<std::mutex> lock(g_session_mutex);
  return g_session;
}

namespace {
// The exiting thread's last CPU reading, while its clock can still be read.
void note_thread_exit(const ThreadBuffer& buffer) noexcept {
  if (buffer.counting_only()) return;  // shared, not this thread's: no CPU track
  std::lock_guard<std::mutex> lock(g_session_mutex);
  if (!g_session || g_session->epoch != buffer.epoch || !g_session->cpu_sampler) return;
  std::lock_guard<std::mutex> session_lock(g_session->mutex);
  if (!g_session->stopped) g_session->cpu_sampler->thread_exiting(buffer.index());
}
}  // namespace

void add_initial_stack(InitialStack stack) {
  std::lock_guard<std::mutex> lock(g_session_mutex);
  if (!g_session) return;
  std::lock_guard<std::mutex> session_lock(g_session->mutex);
  g_session->initial_stacks.push_back(std::move(stack));
}

void add_session_warning(std::string message) {
  std::lock_guard<std::mutex> lock(g_session_mutex);
  if (g_session) g_session->add_warning(std::move(message));
}

void record_async_end(uint64_t epoch, uint32_t buffer_index, uint64_t begin_seq, uint64_t ticks) {
  std::shared_ptr<Session> session;
  {
    std::lock_guard<std::mutex> lock(g_session_mutex);
    session = g_session;
  }
  if (session && session->epoch == epoch) session->add_async_end({buffer_index, begin_seq, ticks});
}

void record_dropped_end(uint64_t epoch, uint32_t buffer_index) noexcept {
  // Another thread than the range's: the starting thread's buffer is reached through the
  // session, under its mutex, so that it is still registered (not collected by a stop).
  std::lock_guard<std::mutex> lock(g_session_mutex);
  if (!g_session || g_session->epoch != epoch) return;
  std::lock_guard<std::mutex> session_lock(g_session->mutex);
  if (g_session->stopped) return;
  for (const auto& buffer : g_session->buffers) {
    if (buffer->index() == buffer_index) {
      buffer->count_dropped(1);
      return;
    }
  }
}

}  // namespace internal

using internal::g_session;
using internal::g_session_epoch;
using internal::g_session_mutex;

void enable_profiler(const SessionConfig& config) {
  if (config.memory_limit_bytes < internal::ChunkPool::kChunkBytes) {
    throw SessionError("framescope: memory_limit_bytes must be at least " +
                       std::to_string(internal::ChunkPool::kChunkBytes));
  }
  if (!config.stream_path.empty() && config.on_limit == LimitPolicy::kKeepNewest) {
    throw SessionError(
        "framescope: a streamed session keeps every event; the keep-newest policy does not apply");
  }
  if (auto* info = dynamic_cast<internal::ProfilerStateInfo*>(
          ThreadLocalDebugInfo::get(DebugInfoKind::kProfilerState));
      info && info->epoch == g_session_epoch.load()) {
    throw SessionError(
        "framescope: profiler already enabled on this thread: one session records at a time "
        "(stop the running one first; a program run by `framescope run` is profiled already)");
  }
  uint64_t epoch;
  {
    std::lock_guard<std::mutex> lock(g_session_mutex);
    if (g_session) {
      throw SessionError(
          "framescope: a profiling session is already enabled (on another thread): one session "
          "records at a time (a program run by `framescope run` is profiled already)");
    }
    // No more than the session may take: free chunks must not take it past its memory limit.
    internal::ChunkPool::instance().reserve(
        std::min(config.prefault_bytes, config.memory_limit_bytes));
    epoch = ++internal::g_last_epoch;
    auto session = std::make_shared<internal::Session>(config, epoch);
    session->clock = ClockConverter::start();
    session->start_ticks = now_ticks();
    if (!config.stream_path.empty()) {
      // Throws OutputError before anything is published (and before the sampler thread runs).
      session->stream = std::make_shared<internal::StreamWriter>(config.stream_path, *session);
    }
    if (config.cpu_sample_period_ns > 0) {
      session->cpu_sampler =
          std::make_unique<internal::CpuSampler>(session.get(), config.cpu_sample_period_ns);
      if (!session->cpu_sampler->start()) {
        session->cpu_sampler.reset();
        session->add_warning(
            "framescope: could not start the CPU time sampler thread; the "
            "trace has no CPU times");
      }
    }
    // Last before publication: nothing after it throws, so the refill thread is stopped only by
    // disable_profiler().
    internal::ChunkPool::instance().start_refilling();
    g_session = session;
    g_session_epoch.store(epoch, std::memory_order_release);
    internal::g_range_consumers.fetch_add(1, std::memory_order_relaxed);
  }
  // Outside the lock: both attach this thread to the session, which takes the lock.
  ThreadLocalDebugInfo::push(DebugInfoKind::kProfilerState,
                             std::make_shared<internal::ProfilerStateInfo>(epoch));
  if (config.start_stop_marks) mark("__start_profile");
}

bool profiler_enabled() noexcept { return g_session_epoch.load(std::memory_order_relaxed) != 0; }

SessionConfig profiler_config() {
  std::lock_guard<std::mutex> lock(g_session_mutex);
  if (!g_session) throw SessionError("framescope: no profiling session is enabled");
  return g_session->config;
}

RawThread internal::copy_raw_thread(Session& session, ThreadBuffer& buffer) {
  RawThread t;
  t.data = buffer.snapshot();
  t.buffer_index = buffer.index();
  t.os_tid = buffer.os_tid;
  t.pthread_id = buffer.pthread_id;
  t.logical_tid = buffer.logical_tid;
  if (session.cpu_sampler && !buffer.counting_only()) {
    session.cpu_sampler->read_thread(buffer.index(), buffer.os_tid);
    t.cpu = session.cpu_sampler->readings(buffer.index());
  }
  return t;
}

void RawTraceDeleter::operator()(RawTrace* raw) const noexcept { delete raw; }

RawTracePtr disable_profiler() {
  std::shared_ptr<internal::Session> session;
  {
    std::lock_guard<std::mutex> lock(g_session_mutex);
    if (!g_session) throw SessionError("framescope: no profiling session is enabled");
    session = g_session;
  }
  if (session->config.start_stop_marks) mark("__stop_profile");
  uint64_t stop_ticks = now_ticks();
  // Held until every buffer is collected: a fork meanwhile (fork_prepare takes this mutex
  // first) waits, so that the child never inherits a buffer mutex held by this thread.
  std::lock_guard<std::mutex> global_lock(g_session_mutex);
  if (g_session != session) {
    throw SessionError("framescope: no profiling session is enabled");  // stopped meanwhile
  }
  g_session_epoch.store(0, std::memory_order_release);
  g_session.reset();
  internal::g_range_consumers.fetch_sub(1, std::memory_order_relaxed);
  // No thread of framescope's outlives the session (the pool's refill thread joined here, under
  // g_session_mutex, so that no fork happens meanwhile).
  internal::ChunkPool::instance().stop_refilling();
  // Pop our marker if it is on top (it is unless the caller left guards unbalanced).
  if (ThreadLocalDebugInfo::peek(DebugInfoKind::kProfilerState)) {
    ThreadLocalDebugInfo::pop(DebugInfoKind::kProfilerState);
  }
  session->clock.finish();
  if (session->cpu_sampler) {
    // The final readings now, at the stop: the sampler's next one may be a period away, and the
    // CPU time of that last period would be spread past the stop (lost to the trace's slices).
    {
      std::lock_guard<std::mutex> lock(session->mutex);
      session->cpu_sampler->read_all_threads();
    }
    // Joined before the session's mutex is taken below (each reading takes it).
    session->cpu_sampler->stop();
  }

  RawTracePtr raw(new RawTrace());
  raw->config = session->config;
  raw->clock = session->clock;
  raw->start_ticks = session->start_ticks;
  raw->stop_ticks = stop_ticks;
  std::lock_guard<std::mutex> lock(session->mutex);
  session->stopped = true;
  // From here buffers keep their chunks: each chunk is then either in the stream (written by
  // drain() below) or in a snapshot, never in both.
  if (session->stream) session->stream->close_intake();
  for (auto& buffer : session->buffers) {
    RawThread t = internal::copy_raw_thread(*session, *buffer);
    buffer->detach(buffer.get() == internal::t_slot.buffer);
    raw->threads.push_back(std::move(t));
  }
  session->buffers.clear();
  raw->initial_stacks = std::move(session->initial_stacks);
  raw->async_ends = std::move(session->async_ends);
  raw->compact_keys = std::move(session->compact_keys);
  if (session->stream) {
    session->stream->drain();
    raw->stream = session->stream;
  }
  {
    std::lock_guard<std::mutex> warnings_lock(session->warnings_mutex);
    raw->warnings = std::move(session->warnings);
  }
  raw->evicted_events = session->evicted_events;
  // One line for all threads' drops (ten thousand threads at the limit are one fact, not ten
  // thousand lines), naming the thread that lost the most.
  uint64_t dropped = 0, threads_dropping = 0, most = 0, most_tid = 0, unrecorded_dropped = 0;
  for (auto& t : raw->threads) {
    if (session->overflow && t.buffer_index == session->overflow->index()) {
      unrecorded_dropped = t.data.dropped;  // said with the threads it stands for, below
      continue;
    }
    if (!t.data.dropped) continue;
    dropped += t.data.dropped;
    ++threads_dropping;
    if (t.data.dropped > most) most = t.data.dropped, most_tid = t.os_tid;
  }
  if (threads_dropping == 1) {
    raw->warnings.push_back("framescope: " + std::to_string(dropped) +
                            " events dropped on thread " + std::to_string(most_tid));
  } else if (threads_dropping > 1) {
    raw->warnings.push_back("framescope: " + std::to_string(dropped) + " events dropped on " +
                            std::to_string(threads_dropping) + " threads (the most, " +
                            std::to_string(most) + ", on thread " + std::to_string(most_tid) + ")");
  }
  if (session->evicted_threads) {
    raw->warnings.push_back(
        "framescope: the flight recorder let go of the events of " +
        std::to_string(session->evicted_threads) + " exited threads (" +
        std::to_string(session->evicted_events) +
        " events, counted as dropped) to keep the newest within the memory limit");
  }
  if (session->unrecorded_threads) {
    raw->warnings.push_back("framescope: " + std::to_string(session->unrecorded_threads) +
                            " threads that started after the memory limit was reached are not "
                            "in the trace (their " +
                            std::to_string(unrecorded_dropped) + " events are counted as dropped)");
  }
  return raw;
}

namespace internal {

// ---- fork ----------------------------------------------------------------------------------
// fork() copies only the calling thread. Any core mutex another thread held at that moment
// would stay locked forever in the child (stop() there deadlocked), and the data it guards could
// be half-updated. So the prepare handler takes every core mutex, in the lock order of
// session_impl.h, before the process is copied, and both sides release them afterwards.
// Threads that record without locks (the append fast path) only touch their own newest chunk;
// in the child those threads do not exist and their buffers are dropped.
//
// Stated behaviour (README, "Interrupts, signals, forks, odd names"): in the child, a running
// session goes on recording into the child's own trace, which starts at the fork. Only the forking
// thread survives: its frames and ranges open at the fork are open slices from the child's start,
// the events it recorded before belong to the parent's trace, and every other thread's buffer is
// dropped. The parent's session is unaffected.
namespace {

std::shared_ptr<Session> g_fork_session;  // the session locked by fork_prepare()

void fork_prepare() noexcept {
  g_session_mutex.lock();
  g_fork_session = g_session;
  if (g_fork_session) {
    g_fork_session->mutex.lock();
    for (auto& buffer : g_fork_session->buffers) buffer->lock_for_fork();
    g_fork_session->warnings_mutex.lock();
  }
  ChunkPool::instance().lock_for_fork();
  lock_callbacks_for_fork();
}

void fork_release_locks() noexcept {
  unlock_callbacks_after_fork();
  ChunkPool::instance().unlock_after_fork();
  if (g_fork_session) {
    g_fork_session->warnings_mutex.unlock();
    for (auto& buffer : g_fork_session->buffers) buffer->unlock_after_fork();
    g_fork_session->mutex.unlock();
  }
  g_session_mutex.unlock();
}

void fork_parent() noexcept {
  fork_release_locks();
  g_fork_session.reset();
}

void fork_child() noexcept {
  // The forking thread took the locks, and it is the one thread of the child: releasing them
  // here is what pthread_atfork is for (all are default, non-robust mutexes). The pool's refill
  // thread is not in the child either, and is never started there (chunk_pool.h says why).
  ChunkPool::instance().forget_refill_thread_in_fork_child();
  fork_release_locks();
  std::shared_ptr<Session> session = std::move(g_fork_session);
  if (!session) return;
  std::lock_guard<std::mutex> global_lock(g_session_mutex);
  std::lock_guard<std::mutex> lock(session->mutex);
  ThreadBuffer* kept =
      t_owner.buffer && t_owner.buffer->epoch == session->epoch ? t_owner.buffer.get() : nullptr;
  try {
    session->continue_in_fork_child(kept, now_ticks());
  } catch (...) {
    // Out of memory in the child: its trace may keep some of the parent's events, no more.
  }
}

}  // namespace

bool install_fork_handlers() noexcept {
  static const bool installed = pthread_atfork(fork_prepare, fork_parent, fork_child) == 0;
  return installed;
}

namespace {
// Installed when the core is loaded, before any thread of it can hold a lock.
[[maybe_unused]] const bool g_fork_handlers_installed = install_fork_handlers();
}  // namespace

uint32_t register_compact_key(uint64_t epoch, uint64_t key) noexcept {
  std::shared_ptr<Session> session;
  {
    std::lock_guard<std::mutex> lock(g_session_mutex);
    if (!g_session || g_session->epoch != epoch) return kNoCompactIndex;
    session = g_session;
  }
  std::lock_guard<std::mutex> lock(session->mutex);
  if (session->stopped || session->compact_keys.size() >= kCompactIndexLimit) {
    return kNoCompactIndex;
  }
  try {
    session->compact_keys.push_back(key);
  } catch (...) {
    return kNoCompactIndex;
  }
  return uint32_t(session->compact_keys.size() - 1);
}

}  // namespace internal

void mark(std::string_view name) noexcept {
  if (internal::ThreadBuffer* b = internal::current_buffer()) {
    try {
      b->append_mark(now_ticks(), std::string(name));
    } catch (...) {
    }
  }
}

void record_memory(const void* address, int64_t bytes, int64_t total_allocated,
                   int64_t total_reserved, int32_t device) noexcept {
  internal::ThreadBuffer* b = internal::current_buffer();
  if (!b || !b->profile_memory) return;
  internal::MemoryRecord rec;
  rec.address = reinterpret_cast<uint64_t>(address);
  rec.bytes = bytes;
  rec.total_allocated = total_allocated;
  rec.total_reserved = total_reserved;
  rec.device = device;
  b->append_memory(now_ticks(), rec);
}

RawTraceStats raw_trace_stats(const RawTrace& raw) {
  RawTraceStats s;
  s.threads = raw.threads.size();
  for (const auto& t : raw.threads) {
    s.events += internal::count_events(t.data.events);
    s.bytes += t.data.events.size() * sizeof(internal::RawEvent);
    s.dropped += t.data.dropped;
  }
  if (raw.stream && !raw.stream->forked_away()) s.events += raw.stream->written_events();
  return s;
}

Trace stop_profiler() { return replay(*disable_profiler()); }

}  // namespace framescope
