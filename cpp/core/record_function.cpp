// cpp/core/record_function.cpp: observer registry, per-thread callback cache and RecordFunction.
#include "framescope/record_function.h"

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <random>
#include <stdexcept>

#include "fork_safety.h"
#include "framescope/debug_info.h"
#include "framescope/internal/thread_buffer.h"
#include "session_impl.h"

namespace framescope {
namespace internal {

std::atomic<int> g_range_consumers{0};
/// Number of global callbacks (kept outside GlobalCallbacks so the hot path has no static guard).
std::atomic<int> g_global_callback_count{0};
/// Mirrors `t_callbacks != nullptr` (null or non-empty: removing the last callback installs
/// null) without the TLS init guard of a thread_local shared_ptr.
__thread bool t_has_local_callbacks __attribute__((tls_model("initial-exec"))) = false;

void record_async_end(uint64_t epoch, uint32_t buffer_index, uint64_t begin_seq, uint64_t ticks);
void record_dropped_end(uint64_t epoch, uint32_t buffer_index) noexcept;

struct CallbackEntry {
  CallbackEntry(RecordFunctionCallback c, CallbackHandle h) : cb(std::move(c)), handle(h) {}
  RecordFunctionCallback cb;
  CallbackHandle handle;
  std::atomic<bool> enabled{true};
};

/// An immutable list of thread-local callbacks, shared by the threads that carry it. While a
/// non-empty list is alive it counts as a range consumer.
struct ThreadLocalCallbacks {
  explicit ThreadLocalCallbacks(std::vector<std::shared_ptr<CallbackEntry>> l)
      : list(std::move(l)) {
    if (!list.empty()) g_range_consumers.fetch_add(1, std::memory_order_relaxed);
  }
  ~ThreadLocalCallbacks() {
    if (!list.empty()) g_range_consumers.fetch_sub(1, std::memory_order_relaxed);
  }
  const std::vector<std::shared_ptr<CallbackEntry>> list;
};

/// Callbacks of one range, snapshotted at its start so that removing a callback mid-range keeps
/// the pairing (the entry stays alive through the shared_ptr).
struct ObserverState {
  struct Started {
    std::shared_ptr<CallbackEntry> entry;
    std::unique_ptr<ObserverContext> context;
  };
  /// The started callbacks, in order: the first kInline without a heap allocation.
  class StartedList {
   public:
    static constexpr size_t kInline = 4;
    void push_back(Started s) {
      if (size_ < kInline) {
        inline_[size_] = std::move(s);
      } else {
        more_.push_back(std::move(s));
      }
      ++size_;
    }
    Started* begin_inline() { return inline_; }
    Started* end_inline() { return inline_ + std::min(size_, kInline); }
    template <class F>
    void for_each(F&& f) {
      for (Started* s = begin_inline(); s != end_inline(); ++s) f(*s);
      for (Started& s : more_) f(s);
    }

   private:
    Started inline_[kInline];
    size_t size_ = 0;
    std::vector<Started> more_;
  };
  StartedList callbacks;
  std::string name;
  std::vector<RangeInput> inputs;
  uint64_t handle = 0;
  int64_t seq_nr = -1;
  bool wants_inputs = false;
  bool wants_ids = false;
};

namespace {

std::atomic<uint64_t> g_next_handle{1};        // callback handles
std::atomic<uint64_t> g_next_range_handle{1};  // RecordFunction::handle()
std::atomic<uint64_t> g_next_thread_id{1};

struct GlobalCallbacks {
  std::mutex mutex;
  std::vector<std::shared_ptr<CallbackEntry>> list;
  std::atomic<uint64_t> version{1};
};
GlobalCallbacks& globals() {
  static GlobalCallbacks* g = new GlobalCallbacks();  // outlives exiting threads
  return *g;
}

thread_local std::shared_ptr<ThreadLocalCallbacks> t_callbacks;
thread_local uint64_t t_callbacks_version = 1;
__thread uint64_t t_thread_id = 0;

FRAMESCOPE_NOINLINE uint64_t assign_thread_id() noexcept {
  t_thread_id = g_next_thread_id.fetch_add(1, std::memory_order_relaxed);
  return t_thread_id;
}
FRAMESCOPE_ALWAYS_INLINE uint64_t thread_id_inline() noexcept {
  uint64_t id = t_thread_id;
  return FRAMESCOPE_LIKELY(id != 0) ? id : assign_thread_id();
}

/// Per-thread cache of the callbacks that apply to each scope, with sampling countdowns. Rebuilt
/// only when the global version or this thread's list changes.
struct CallbackCache {
  struct Active {
    std::shared_ptr<CallbackEntry> entry;
    int64_t countdown = 0;  // ranges left until the next sampled one (sampled callbacks)
  };
  uint64_t global_version = 0;
  uint64_t local_version = 0;
  std::vector<Active> by_scope[size_t(RecordScope::kNumScopes)];
  std::mt19937 rng{std::random_device{}()};

  int64_t draw(double p) {
    if (p >= 1.0) return 1;
    std::geometric_distribution<int64_t> dist(p);
    return dist(rng) + 1;
  }
  void rebuild(uint64_t gv) {
    for (auto& v : by_scope) v.clear();
    std::vector<std::shared_ptr<CallbackEntry>> all;
    {
      auto& g = globals();
      std::lock_guard<std::mutex> lock(g.mutex);
      all = g.list;
    }
    if (t_callbacks) all.insert(all.end(), t_callbacks->list.begin(), t_callbacks->list.end());
    for (auto& e : all) {
      for (size_t s = 0; s < size_t(RecordScope::kNumScopes); ++s) {
        if (e->cb.wants_scope(RecordScope(s))) {
          by_scope[s].push_back({e, draw(e->cb.sampling_probability())});
        }
      }
    }
    global_version = gv;
    local_version = t_callbacks_version;
  }
};
thread_local CallbackCache* t_cache = nullptr;
thread_local std::unique_ptr<CallbackCache> t_cache_owner;

CallbackCache& cache() {
  if (!t_cache) {
    t_cache_owner = std::make_unique<CallbackCache>();
    t_cache = t_cache_owner.get();
  }
  uint64_t gv = globals().version.load(std::memory_order_acquire);
  if (t_cache->global_version != gv || t_cache->local_version != t_callbacks_version) {
    t_cache->rebuild(gv);
  }
  return *t_cache;
}

void report_callback_exception(const char* where) {
  static std::atomic<bool> reported{false};
  if (!reported.exchange(true)) {
    std::fprintf(stderr, "framescope: an observer's %s callback threw; exception dropped\n", where);
  }
}

}  // namespace

void lock_callbacks_for_fork() noexcept { globals().mutex.lock(); }
void unlock_callbacks_after_fork() noexcept { globals().mutex.unlock(); }

std::shared_ptr<ThreadLocalCallbacks> capture_thread_local_callbacks() { return t_callbacks; }

void install_thread_local_callbacks(std::shared_ptr<ThreadLocalCallbacks> cbs) {
  if (cbs && cbs->list.empty()) cbs.reset();  // have_callbacks() relies on null-or-non-empty
  if (cbs == t_callbacks) return;
  t_callbacks = std::move(cbs);
  t_has_local_callbacks = t_callbacks != nullptr;
  ++t_callbacks_version;
}

}  // namespace internal

using internal::CallbackEntry;
using internal::globals;

RecordFunctionCallback& RecordFunctionCallback::sampling_prob(double p) {
  if (!(p > 0.0 && p <= 1.0)) {
    throw std::invalid_argument("framescope: sampling probability must be in (0, 1]");
  }
  sampling_prob_ = p;
  return *this;
}

RecordFunctionCallback& RecordFunctionCallback::scopes(std::initializer_list<RecordScope> s) {
  scope_mask_ = 0;
  for (RecordScope x : s) scope_mask_ |= 1u << unsigned(x);
  return *this;
}

CallbackHandle add_global_callback(RecordFunctionCallback cb) {
  auto& g = globals();
  auto entry = std::make_shared<CallbackEntry>(std::move(cb), internal::g_next_handle++);
  std::lock_guard<std::mutex> lock(g.mutex);
  g.list.push_back(entry);
  internal::g_global_callback_count.fetch_add(1, std::memory_order_relaxed);
  internal::g_range_consumers.fetch_add(1, std::memory_order_relaxed);
  g.version.fetch_add(1, std::memory_order_release);
  return entry->handle;
}

CallbackHandle add_thread_local_callback(RecordFunctionCallback cb) {
  auto entry = std::make_shared<CallbackEntry>(std::move(cb), internal::g_next_handle++);
  std::vector<std::shared_ptr<CallbackEntry>> list;
  if (internal::t_callbacks) list = internal::t_callbacks->list;
  list.push_back(entry);
  internal::install_thread_local_callbacks(
      std::make_shared<internal::ThreadLocalCallbacks>(std::move(list)));
  return entry->handle;
}

bool remove_callback(CallbackHandle handle) {
  auto& g = globals();
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    auto it = std::find_if(g.list.begin(), g.list.end(),
                           [&](const auto& e) { return e->handle == handle; });
    if (it != g.list.end()) {
      g.list.erase(it);
      internal::g_global_callback_count.fetch_sub(1, std::memory_order_relaxed);
      internal::g_range_consumers.fetch_sub(1, std::memory_order_relaxed);
      g.version.fetch_add(1, std::memory_order_release);
      return true;
    }
  }
  if (!internal::t_callbacks) return false;
  auto list = internal::t_callbacks->list;
  auto it =
      std::find_if(list.begin(), list.end(), [&](const auto& e) { return e->handle == handle; });
  if (it == list.end()) return false;
  list.erase(it);
  internal::install_thread_local_callbacks(
      list.empty() ? nullptr : std::make_shared<internal::ThreadLocalCallbacks>(std::move(list)));
  return true;
}

namespace {
bool set_enabled(CallbackHandle handle, bool enabled) {
  auto& g = globals();
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    for (auto& e : g.list) {
      if (e->handle == handle) {
        e->enabled.store(enabled, std::memory_order_relaxed);
        return true;
      }
    }
  }
  if (internal::t_callbacks) {
    for (auto& e : internal::t_callbacks->list) {
      if (e->handle == handle) {
        e->enabled.store(enabled, std::memory_order_relaxed);
        return true;
      }
    }
  }
  return false;
}
}  // namespace

bool disable_callback(CallbackHandle handle) { return set_enabled(handle, false); }
bool reenable_callback(CallbackHandle handle) { return set_enabled(handle, true); }

void clear_callbacks() {
  auto& g = globals();
  {
    std::lock_guard<std::mutex> lock(g.mutex);
    internal::g_range_consumers.fetch_sub(int(g.list.size()), std::memory_order_relaxed);
    internal::g_global_callback_count.store(0, std::memory_order_relaxed);
    g.list.clear();
    g.version.fetch_add(1, std::memory_order_release);
  }
  internal::install_thread_local_callbacks(nullptr);
}

void set_record_function_seed_for_testing(uint32_t seed) {
  auto& c = internal::cache();
  c.rng.seed(seed);
  c.global_version = 0;  // redraw countdowns from the new seed
  internal::cache();
}

uint64_t current_thread_id() noexcept { return internal::thread_id_inline(); }

// ---------------------------------------------------------------------------------------------
// RecordFunction

void RecordFunction::init(RecordScope scope) noexcept { init_inline(scope); }

FRAMESCOPE_ALWAYS_INLINE void RecordFunction::init_inline(RecordScope scope) noexcept {
  scope_ = scope;
  static_name_ = nullptr;
  buffer_ = nullptr;
  observers_ = nullptr;
  begin_seq_ = 0;
  session_epoch_ = 0;
  buffer_index_ = 0;
  started_ = false;
  needs_inputs_ = false;
  record_inputs_in_session_ = false;
  initialized_ = true;
  thread_id_ = internal::thread_id_inline();
  if (internal::ThreadBuffer* b = internal::current_buffer()) {
    buffer_ = b;
    buffer_index_ = b->index();
    session_epoch_ = internal::t_slot.epoch;
    record_inputs_in_session_ = b->record_shapes;
    needs_inputs_ = record_inputs_in_session_;
    active_ = true;
  }
  if (!internal::have_callbacks()) return;
  try {
    auto& c = internal::cache();
    for (auto& a : c.by_scope[size_t(scope)]) {
      if (!a.entry->enabled.load(std::memory_order_relaxed)) continue;
      if (a.entry->cb.sampling_probability() < 1.0) {
        if (--a.countdown > 0) continue;
        a.countdown = c.draw(a.entry->cb.sampling_probability());
      }
      if (!observers_) observers_ = new internal::ObserverState();
      observers_->callbacks.push_back({a.entry, nullptr});
      observers_->wants_inputs |= a.entry->cb.wants_inputs();
      observers_->wants_ids |= a.entry->cb.wants_ids();
    }
  } catch (...) {
    // Out of memory while snapshotting callbacks: observe nothing for this range.
    delete observers_;
    observers_ = nullptr;
  }
  if (observers_) {
    active_ = true;
    needs_inputs_ |= observers_->wants_inputs;
  }
}

void RecordFunction::init_and_start(const char* static_name) noexcept {
  // The cases start_named() does not inline: callbacks, input shapes, no buffer yet. Out of line
  // calls keep the inline fast path free of register saves.
  init(scope_);
  if (active_) before(static_name);
}

void RecordFunction::before(const char* static_name, int64_t seq_nr) noexcept {
  if (!active_ || started_) return;
  start_static(static_name, seq_nr);
}

FRAMESCOPE_ALWAYS_INLINE void RecordFunction::start_static(const char* static_name,
                                                           int64_t seq_nr) noexcept {
  if (FRAMESCOPE_LIKELY(!observers_ && seq_nr < 0)) {
    started_ = true;
    static_name_ = static_name;
    if (buffer_) {
      begin_seq_ = buffer_->append(now_ticks(), internal::range_begin_word(static_name, scope_));
    }
    return;
  }
  static_name_ = static_name;
  start_observed(static_name, nullptr, seq_nr);
}

void RecordFunction::before(std::string_view name, int64_t seq_nr) noexcept {
  if (!active_ || started_) return;
  start_observed(name, nullptr, seq_nr);
}

void RecordFunction::before(std::string_view name, std::vector<RangeInput> inputs,
                            int64_t seq_nr) noexcept {
  if (!active_ || started_) return;
  start_observed(name, &inputs, seq_nr);
}

void RecordFunction::start_observed(std::string_view name, std::vector<RangeInput>* inputs,
                                    int64_t seq_nr) noexcept {
  started_ = true;
  try {
    uint64_t handle = 0;
    if (observers_) {
      observers_->name.assign(name.data(), name.size());
      observers_->seq_nr = seq_nr;
      if (observers_->wants_ids) {
        handle = observers_->handle = internal::g_next_range_handle.fetch_add(1);
      }
      if (inputs && observers_->wants_inputs) observers_->inputs = *inputs;
      observers_->callbacks.for_each([this](internal::ObserverState::Started& s) {
        if (!s.entry->cb.start()) return;
        try {
          s.context = s.entry->cb.start()(*this);
        } catch (...) {
          internal::report_callback_exception("start");
        }
      });
    }
    if (buffer_) {
      uint64_t now = now_ticks();
      bool keep_inputs = record_inputs_in_session_ && inputs && !inputs->empty();
      if (static_name_ && seq_nr < 0 && handle == 0 && !keep_inputs) {
        begin_seq_ = buffer_->append(now, internal::range_begin_word(static_name_, scope_));
      } else {
        internal::RangeDetail d;
        d.name.assign(name.data(), name.size());
        d.handle = handle;
        d.seq_nr = seq_nr;
        d.scope = uint8_t(scope_);
        if (keep_inputs) d.inputs = std::move(*inputs);
        begin_seq_ = buffer_->append_range_detail(now, std::move(d));
      }
    }
  } catch (...) {
    // Out of memory while copying a name or inputs: the range is not recorded.
    buffer_ = nullptr;
  }
}

void RecordFunction::end_slow() noexcept {
  active_ = false;
  if (!started_) {
    delete observers_;
    observers_ = nullptr;
    return;
  }
  if (buffer_ && begin_seq_ == internal::ThreadBuffer::kDroppedSeq) {
    // The begin was dropped (memory limit), so no end is written; it still counts as dropped,
    // as it would had the begin been kept: dropped_events counts events, two per range, the
    // unit of recorded_events. Same buffer rules as a recorded end below.
    if (internal::t_slot.buffer == buffer_ && internal::t_slot.epoch == session_epoch_) {
      buffer_->count_dropped(1);
    } else if (internal::g_session_epoch.load(std::memory_order_relaxed) == session_epoch_) {
      if (thread_id_ == current_thread_id()) {
        buffer_->count_dropped(1);
      } else {
        internal::record_dropped_end(session_epoch_, buffer_index_);
      }
    }
  } else if (buffer_) {
    uint64_t now = now_ticks();
    if (internal::t_slot.buffer == buffer_ && internal::t_slot.epoch == session_epoch_) {
      buffer_->append(now, internal::pack_word(internal::EventKind::kRangeEnd, begin_seq_));
    } else if (internal::g_session_epoch.load(std::memory_order_relaxed) == session_epoch_) {
      if (thread_id_ == current_thread_id()) {
        // Still the starting thread, only its slot was invalidated (its thread-local state
        // changed mid-range). While the session runs, the thread keeps owning buffer_.
        buffer_->append(now, internal::pack_word(internal::EventKind::kRangeEnd, begin_seq_));
      } else {
        internal::record_async_end(session_epoch_, buffer_index_, begin_seq_, now);
      }
    }
  }
  if (observers_) {
    observers_->callbacks.for_each([this](internal::ObserverState::Started& s) {
      if (!s.entry->cb.end()) return;
      try {
        s.entry->cb.end()(*this, s.context.get());
      } catch (...) {
        internal::report_callback_exception("end");
      }
    });
    delete observers_;
    observers_ = nullptr;
  }
}

std::string_view RecordFunction::name() const noexcept {
  if (!initialized_) return {};
  if (observers_) return observers_->name;
  return static_name_ ? std::string_view(static_name_) : std::string_view();
}

uint64_t RecordFunction::handle() const noexcept {
  return initialized_ && observers_ ? observers_->handle : 0;
}
int64_t RecordFunction::seq_nr() const noexcept {
  return initialized_ && observers_ ? observers_->seq_nr : -1;
}

const std::vector<RangeInput>& RecordFunction::inputs() const noexcept {
  static const std::vector<RangeInput> kEmpty;
  return initialized_ && observers_ ? observers_->inputs : kEmpty;
}

}  // namespace framescope
