// framescope/record_function.h: ranges (RecordFunction) and their observers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "framescope/clock.h"
#include "framescope/internal/thread_buffer.h"
#include "framescope/macros.h"
#include "framescope/range_input.h"

namespace framescope {

/// Where a range comes from. Observers filter on it; exporters map it to a category
/// (kFunction -> "cpu_op", kUserScope -> "user_annotation").
enum class RecordScope : uint8_t {
  kFunction = 0,          ///< a native operation (C++ code, cache lookups)
  kUserScope = 1,         ///< a user annotation (record_function, the C ABI)
  kBackwardFunction = 2,  ///< reserved for autograd-like engines
  kCustom0 = 3,           ///< free for library authors
  kCustom1 = 4,
  kCustom2 = 5,
  kNumScopes = 6,
};

class RecordFunction;

/// State an observer's start callback hands to its end callback. Owned by the range.
class ObserverContext {
 public:
  virtual ~ObserverContext() = default;
};

/// Called when an observed range starts; may return a context (or nullptr). Runs on the thread
/// that starts the range; must not throw (an exception is caught, reported once and dropped).
using StartCallback = std::function<std::unique_ptr<ObserverContext>(const RecordFunction&)>;
/// Called when the range ends, with the context its start returned. Runs on the ending thread.
using EndCallback = std::function<void(const RecordFunction&, ObserverContext*)>;

/// An observer: a start/end pair plus what it needs. Value type; configure before adding.
class RecordFunctionCallback {
 public:
  explicit RecordFunctionCallback(StartCallback start, EndCallback end = nullptr)
      : start_(std::move(start)), end_(std::move(end)) {}

  /// Ask ranges to materialise their inputs for this observer.
  RecordFunctionCallback& needs_inputs(bool v = true) {
    needs_inputs_ = v;
    return *this;
  }
  /// Ask ranges for a unique handle (see RecordFunction::handle()).
  RecordFunctionCallback& needs_ids(bool v = true) {
    needs_ids_ = v;
    return *this;
  }
  /// Observe each range with probability p, drawn as a geometric countdown per thread (not a
  /// coin flip per range). Throws std::invalid_argument unless 0 < p <= 1.
  RecordFunctionCallback& sampling_prob(double p);
  /// Observe only these scopes (default: all).
  RecordFunctionCallback& scopes(std::initializer_list<RecordScope> scopes);

  bool wants_scope(RecordScope s) const { return (scope_mask_ >> unsigned(s)) & 1u; }
  double sampling_probability() const { return sampling_prob_; }
  bool wants_inputs() const { return needs_inputs_; }
  bool wants_ids() const { return needs_ids_; }
  const StartCallback& start() const { return start_; }
  const EndCallback& end() const { return end_; }

 private:
  StartCallback start_;
  EndCallback end_;
  double sampling_prob_ = 1.0;
  uint32_t scope_mask_ = ~0u;
  bool needs_inputs_ = false;
  bool needs_ids_ = false;
};

/// Identifies an added callback; 0 is never a valid handle.
using CallbackHandle = uint64_t;

/// Adds an observer for ranges on every thread. Safe at any time from any thread; ranges that
/// already started are not affected (they keep the callbacks they started with).
CallbackHandle add_global_callback(RecordFunctionCallback cb);
/// Adds an observer for ranges on the calling thread only (carried to other threads by
/// ThreadLocalState). Safe at any time.
CallbackHandle add_thread_local_callback(RecordFunctionCallback cb);
/// Removes a callback added by either function. A range that started with it still gets its end
/// call. Returns false for an unknown handle (thread-local handles: from this thread only).
bool remove_callback(CallbackHandle handle);
/// Disables / re-enables a callback without removing it. Returns false for an unknown handle.
bool disable_callback(CallbackHandle handle);
bool reenable_callback(CallbackHandle handle);
/// Removes every global and this thread's thread-local callbacks.
void clear_callbacks();
/// Makes sampling deterministic on the calling thread (tests only).
void set_record_function_seed_for_testing(uint32_t seed);

/// Logical id of the calling thread (1, 2, ... in order of first use); stable for its lifetime.
uint64_t current_thread_id() noexcept;

namespace internal {
/// Non-zero while anything may want ranges: an active session or any callback. The only thing a
/// disabled range reads.
extern std::atomic<int> g_range_consumers;
/// Number of global callbacks; with t_has_local_callbacks, what the inline fast path checks.
extern std::atomic<int> g_global_callback_count;
/// True while the calling thread has thread-local callbacks. Static TLS (see ThreadSlot).
extern __thread bool t_has_local_callbacks __attribute__((tls_model("initial-exec")));
struct ObserverState;

/// The word of a range-begin event named by a string with static storage duration.
FRAMESCOPE_ALWAYS_INLINE uint64_t range_begin_word(const char* static_name,
                                                   RecordScope scope) noexcept {
  return pack_word(
      EventKind::kRangeBegin,
      (reinterpret_cast<uint64_t>(static_name) & kPointerMask) | (uint64_t(scope) << 48));
}

/// True when any callback (global or of this thread) may observe ranges.
FRAMESCOPE_ALWAYS_INLINE bool have_callbacks() noexcept {
  return g_global_callback_count.load(std::memory_order_relaxed) != 0 || t_has_local_callbacks;
}
}  // namespace internal

/// A scoped range. Construction checks (one relaxed load) whether anything consumes ranges; if
/// not the object is inert. Otherwise `before()` records the start for the active session and
/// runs observers' start callbacks, and `end()` (or the destructor) records the end and runs the
/// end callbacks, on whatever thread calls it (an async end). Not copyable or movable; `end()`
/// may be called from another thread exactly once, and not concurrently with `before()`.
///
/// An inert range writes three bytes (scope and two flags); the other members are set only by
/// init(), and every accessor checks `initialized_` first.
class RecordFunction {
 public:
  /// Inert unless something consumes ranges of `scope`; call `before()` to start it.
  explicit RecordFunction(RecordScope scope = RecordScope::kFunction) noexcept
      : scope_(scope), active_(false), initialized_(false) {
    if (FRAMESCOPE_UNLIKELY(internal::g_range_consumers.load(std::memory_order_relaxed) != 0)) {
      init(scope);
    }
  }
  /// Starts a range named by a string with static storage duration (a literal).
  explicit RecordFunction(const char* static_name,
                          RecordScope scope = RecordScope::kFunction) noexcept
      : scope_(scope), active_(false), initialized_(false) {
    if (FRAMESCOPE_UNLIKELY(internal::g_range_consumers.load(std::memory_order_relaxed) != 0)) {
      start_named(static_name);
    }
  }
  ~RecordFunction() {
    if (FRAMESCOPE_UNLIKELY(active_)) end();
  }
  RecordFunction(const RecordFunction&) = delete;
  RecordFunction& operator=(const RecordFunction&) = delete;

  /// True when the range is recorded by a session or observed by a callback.
  bool is_active() const noexcept { return active_; }
  /// True when a consumer wants `before(name, inputs)` rather than `before(name)`.
  bool needs_inputs() const noexcept { return initialized_ && needs_inputs_; }

  /// Starts the range. `name` must outlive the program (a literal). `seq_nr` is free for the
  /// caller (e.g. linking work across threads); -1 means none. No-op when inactive or started.
  void before(const char* static_name, int64_t seq_nr = -1) noexcept;
  /// Starts the range with a name the range copies.
  void before(std::string_view name, int64_t seq_nr = -1) noexcept;
  /// Starts the range with inputs (kept only when a consumer needs them).
  void before(std::string_view name, std::vector<RangeInput> inputs, int64_t seq_nr = -1) noexcept;
  /// Ends the range (idempotent). May run on a thread other than the one that started it.
  FRAMESCOPE_ALWAYS_INLINE void end() noexcept {
    if (!active_) return;
    // Fast path, inline: a started, unobserved range ending on its own thread in its session.
    if (FRAMESCOPE_LIKELY(started_ && observers_ == nullptr && buffer_ != nullptr &&
                          internal::t_slot.buffer == buffer_ &&
                          internal::t_slot.epoch == session_epoch_ &&
                          begin_seq_ != internal::ThreadBuffer::kDroppedSeq)) {
      active_ = false;
      buffer_->append(now_ticks(), internal::pack_word(internal::EventKind::kRangeEnd, begin_seq_));
      return;
    }
    end_slow();
  }

  // ---- read by observers ----
  std::string_view name() const noexcept;
  RecordScope scope() const noexcept { return scope_; }
  /// Unique id of this range (non-zero only when an observer asked for ids).
  uint64_t handle() const noexcept;
  int64_t seq_nr() const noexcept;
  /// Inputs given to before() (empty unless a consumer needed them).
  const std::vector<RangeInput>& inputs() const noexcept;
  /// Logical id of the thread that started the range (0 for an inert range).
  uint64_t thread_id() const noexcept { return initialized_ ? thread_id_ : 0; }

 private:
  void init(RecordScope scope) noexcept;
  inline void init_inline(RecordScope scope) noexcept;  // defined and used in the .cpp only
  void init_and_start(const char* static_name) noexcept;
  // The constructor's path once something consumes ranges. Inline for the common case (recorded
  // by a session only, no callbacks): a range then costs two clock reads and two appends, with
  // no calls into the library.
  FRAMESCOPE_ALWAYS_INLINE void start_named(const char* static_name) noexcept {
    internal::ThreadBuffer* b = internal::current_buffer();
    if (FRAMESCOPE_LIKELY(b != nullptr && !internal::have_callbacks() && !b->record_shapes)) {
      static_name_ = static_name;
      buffer_ = b;
      observers_ = nullptr;
      session_epoch_ = internal::t_slot.epoch;
      thread_id_ = b->logical_tid;
      buffer_index_ = b->index();
      active_ = true;
      initialized_ = true;
      started_ = true;
      needs_inputs_ = record_inputs_in_session_ = false;
      begin_seq_ = b->append(now_ticks(), internal::range_begin_word(static_name, scope_));
      return;
    }
    init_and_start(static_name);  // one call for init() + before()
  }
  void end_slow() noexcept;
  void start_static(const char* static_name, int64_t seq_nr) noexcept;
  void start_observed(std::string_view name, std::vector<RangeInput>* inputs,
                      int64_t seq_nr) noexcept;

  // Set by init() only (indeterminate while !initialized_).
  const char* static_name_;
  internal::ThreadBuffer* buffer_;      // session buffer of the starting thread, or null
  internal::ObserverState* observers_;  // owned; only when callbacks observe it
  uint64_t begin_seq_;
  uint64_t session_epoch_;
  uint64_t thread_id_;
  uint32_t buffer_index_;
  // Set by every constructor.
  RecordScope scope_;
  bool active_;
  bool initialized_;
  // Set by init() only.
  bool started_;
  bool needs_inputs_;
  bool record_inputs_in_session_;
};

}  // namespace framescope
