// cpp/core/debug_info.cpp: ThreadLocalDebugInfo, ThreadLocalState and the state-carrying pool.
#include "framescope/debug_info.h"

#include <stdexcept>

#include "framescope/internal/thread_buffer.h"

namespace framescope {

namespace {
thread_local std::shared_ptr<ThreadLocalDebugInfo> t_debug_info;
}  // namespace

DebugInfoBase* ThreadLocalDebugInfo::get(DebugInfoKind kind) noexcept {
  for (ThreadLocalDebugInfo* node = t_debug_info.get(); node; node = node->parent_.get()) {
    if (node->kind_ == kind) return node->info_.get();
  }
  return nullptr;
}

void ThreadLocalDebugInfo::push(DebugInfoKind kind, std::shared_ptr<DebugInfoBase> info) {
  auto node = std::make_shared<ThreadLocalDebugInfo>();
  node->kind_ = kind;
  node->info_ = std::move(info);
  node->parent_ = t_debug_info;
  t_debug_info = std::move(node);
  internal::invalidate_thread_slot();
}

std::shared_ptr<DebugInfoBase> ThreadLocalDebugInfo::pop(DebugInfoKind kind) {
  if (!t_debug_info) throw std::logic_error("framescope: ThreadLocalDebugInfo::pop on empty list");
  if (t_debug_info->kind_ != kind) {
    throw std::logic_error("framescope: ThreadLocalDebugInfo::pop of a kind that is not on top");
  }
  auto info = t_debug_info->info_;
  t_debug_info = t_debug_info->parent_;
  internal::invalidate_thread_slot();
  return info;
}

std::shared_ptr<DebugInfoBase> ThreadLocalDebugInfo::peek(DebugInfoKind kind) noexcept {
  if (!t_debug_info || t_debug_info->kind_ != kind) return nullptr;
  return t_debug_info->info_;
}

std::shared_ptr<ThreadLocalDebugInfo> ThreadLocalDebugInfo::current() noexcept {
  return t_debug_info;
}

void ThreadLocalDebugInfo::force_current(std::shared_ptr<ThreadLocalDebugInfo> info) noexcept {
  t_debug_info = std::move(info);
  internal::invalidate_thread_slot();
}

DebugInfoGuard::DebugInfoGuard(DebugInfoKind kind, std::shared_ptr<DebugInfoBase> info)
    : pushed_kind_(true), kind_(kind) {
  ThreadLocalDebugInfo::push(kind, std::move(info));
}

DebugInfoGuard::DebugInfoGuard(std::shared_ptr<ThreadLocalDebugInfo> info)
    : previous_(ThreadLocalDebugInfo::current()) {
  ThreadLocalDebugInfo::force_current(std::move(info));
}

DebugInfoGuard::~DebugInfoGuard() {
  if (pushed_kind_) {
    try {
      ThreadLocalDebugInfo::pop(kind_);
    } catch (const std::logic_error&) {
      // Unbalanced guards: leave the list as it is rather than throw from a destructor.
    }
  } else {
    ThreadLocalDebugInfo::force_current(std::move(previous_));
  }
}

ThreadLocalState::ThreadLocalState()
    : debug_info_(ThreadLocalDebugInfo::current()),
      callbacks_(internal::capture_thread_local_callbacks()) {}

void ThreadLocalState::set_thread_local_state(const ThreadLocalState& state) {
  ThreadLocalDebugInfo::force_current(state.debug_info_);
  internal::install_thread_local_callbacks(state.callbacks_);
}

ThreadLocalStateGuard::ThreadLocalStateGuard(const ThreadLocalState& state) {
  ThreadLocalState::set_thread_local_state(state);
}

ThreadLocalStateGuard::~ThreadLocalStateGuard() {
  ThreadLocalState::set_thread_local_state(previous_);
}

ThreadPool::ThreadPool(size_t threads) {
  if (threads == 0) throw std::invalid_argument("framescope: ThreadPool needs at least 1 thread");
  workers_.reserve(threads);
  for (size_t i = 0; i < threads; ++i) workers_.emplace_back([this] { run_worker(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::enqueue(std::function<void()> job) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw std::logic_error("framescope: ThreadPool is shutting down");
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void ThreadPool::run_worker() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
      if (jobs_.empty()) return;
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace framescope
