// framescope/debug_info.h: thread-local debug info and the state snapshot that follows tasks.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <vector>

namespace framescope {

/// Slots of ThreadLocalDebugInfo. kProfilerState is used by sessions (ThreadScope::kPropagated).
enum class DebugInfoKind : uint8_t {
  kProfilerState = 0,
  kProducerInfo = 1,
  kTestInfo = 2,
  kTestInfo2 = 3,
  kUser0 = 4,
  kUser1 = 5,
};

/// Base of values stored in ThreadLocalDebugInfo. Shared by every thread that carries it.
class DebugInfoBase {
 public:
  virtual ~DebugInfoBase() = default;
};

/// An immutable linked list of (kind, value) per thread: push adds a node on top of the current
/// list, pop removes the top. Capturing it is copying one shared_ptr, so it is cheap to carry to
/// other threads (ThreadLocalState). All functions act on the calling thread only.
class ThreadLocalDebugInfo {
 public:
  /// The newest value of `kind` on this thread, or nullptr.
  static DebugInfoBase* get(DebugInfoKind kind) noexcept;
  /// Pushes a value (nullptr allowed: hides older values of the kind).
  static void push(DebugInfoKind kind, std::shared_ptr<DebugInfoBase> info);
  /// Pops the top node, which must be of `kind`; throws std::logic_error otherwise or if empty.
  static std::shared_ptr<DebugInfoBase> pop(DebugInfoKind kind);
  /// The top value if it is of `kind`, else nullptr; never throws.
  static std::shared_ptr<DebugInfoBase> peek(DebugInfoKind kind) noexcept;
  /// The whole list of this thread (nullptr when empty).
  static std::shared_ptr<ThreadLocalDebugInfo> current() noexcept;
  /// Replaces this thread's list (used by ThreadLocalStateGuard).
  static void force_current(std::shared_ptr<ThreadLocalDebugInfo> info) noexcept;

  DebugInfoKind kind() const noexcept { return kind_; }
  const std::shared_ptr<DebugInfoBase>& info() const noexcept { return info_; }

 private:
  DebugInfoKind kind_ = DebugInfoKind::kTestInfo;
  std::shared_ptr<DebugInfoBase> info_;
  std::shared_ptr<ThreadLocalDebugInfo> parent_;
};

/// RAII push/pop of one debug-info value on the calling thread. Not movable.
class DebugInfoGuard {
 public:
  DebugInfoGuard(DebugInfoKind kind, std::shared_ptr<DebugInfoBase> info);
  /// Installs a whole captured list, restoring the previous one on destruction.
  explicit DebugInfoGuard(std::shared_ptr<ThreadLocalDebugInfo> info);
  ~DebugInfoGuard();
  DebugInfoGuard(const DebugInfoGuard&) = delete;
  DebugInfoGuard& operator=(const DebugInfoGuard&) = delete;

 private:
  bool pushed_kind_ = false;
  DebugInfoKind kind_ = DebugInfoKind::kTestInfo;
  std::shared_ptr<ThreadLocalDebugInfo> previous_;
};

namespace internal {
struct ThreadLocalCallbacks;  // this thread's observers (record_function.cpp)
std::shared_ptr<ThreadLocalCallbacks> capture_thread_local_callbacks();
void install_thread_local_callbacks(std::shared_ptr<ThreadLocalCallbacks> cbs);
}  // namespace internal

/// Everything thread-local that work should carry to another thread: the debug-info list (and
/// with it a propagated session) and the thread-local range observers. Captured on construction.
/// Value type; cheap to copy (two shared_ptr).
class ThreadLocalState {
 public:
  ThreadLocalState();
  /// Installs `state` on the calling thread (prefer ThreadLocalStateGuard).
  static void set_thread_local_state(const ThreadLocalState& state);

 private:
  friend class ThreadLocalStateGuard;
  std::shared_ptr<ThreadLocalDebugInfo> debug_info_;
  std::shared_ptr<internal::ThreadLocalCallbacks> callbacks_;
};

/// Installs a ThreadLocalState for a scope and restores the thread's own state afterwards.
class ThreadLocalStateGuard {
 public:
  explicit ThreadLocalStateGuard(const ThreadLocalState& state);
  ~ThreadLocalStateGuard();
  ThreadLocalStateGuard(const ThreadLocalStateGuard&) = delete;
  ThreadLocalStateGuard& operator=(const ThreadLocalStateGuard&) = delete;

 private:
  ThreadLocalState previous_;
};

/// Wraps `fn` so that it runs under the caller's ThreadLocalState wherever it is invoked.
template <class F>
auto wrap_with_thread_local_state(F&& fn) {
  return [state = ThreadLocalState(), fn = std::forward<F>(fn)](auto&&... args) mutable {
    ThreadLocalStateGuard guard(state);
    return fn(std::forward<decltype(args)>(args)...);
  };
}

/// A fixed-size pool of worker threads whose tasks run under the submitter's ThreadLocalState:
/// ranges of a task land in the submitter's session, on the worker's thread. Thread-safe.
/// The destructor finishes queued tasks, then joins.
class ThreadPool {
 public:
  /// Throws std::invalid_argument for 0 threads.
  explicit ThreadPool(size_t threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  /// Queues `fn` carrying the caller's state; the future holds its result or exception.
  template <class F>
  auto submit(F&& fn) -> std::future<std::invoke_result_t<std::decay_t<F>>> {
    using R = std::invoke_result_t<std::decay_t<F>>;
    auto task = std::make_shared<std::packaged_task<R()>>(
        wrap_with_thread_local_state(std::forward<F>(fn)));
    std::future<R> result = task->get_future();
    enqueue([task] { (*task)(); });
    return result;
  }
  size_t size() const noexcept { return workers_.size(); }

 private:
  void enqueue(std::function<void()> job);
  void run_worker();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

/// Runs `fn` on a new thread carrying the caller's ThreadLocalState (like at::launch).
template <class F>
std::thread launch_with_thread_local_state(F&& fn) {
  return std::thread(wrap_with_thread_local_state(std::forward<F>(fn)));
}

}  // namespace framescope
