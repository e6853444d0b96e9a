// framescope/internal/thread_buffer.h: per-thread chunked event buffer and its lock-free append.
// Not API: included by the inline fast paths of the public headers and by the extension.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "framescope/internal/raw_event.h"
#include "framescope/macros.h"
#include "framescope/range_input.h"

struct _object;  // CPython's PyObject, for HookThreadState (the core does not include Python.h)

namespace framescope::internal {

/// Indices of the first side record (detail, string, memory) that events from some point on can
/// reference. Side records are appended in the order of their events.
struct SideRecordMarks {
  uint64_t details = 0;
  uint64_t strings = 0;
  uint64_t memory = 0;
};

/// A fixed-size block of events. Chunks come pre-faulted from the ChunkPool and go back to it.
struct Chunk {
  RawEvent* events = nullptr;
  uint64_t first_seq = 0;  // seq of events[0]
  uint32_t capacity = 0;
  SideRecordMarks first_side;  // the first side records this chunk's events may reference
};

/// Side data of a range that needs more than 56 bits: a copied name, ids, inputs.
struct RangeDetail {
  std::string name;
  uint64_t handle = 0;
  int64_t seq_nr = -1;
  uint8_t scope = 0;
  std::vector<RangeInput> inputs;
};

/// A native allocation or free (bytes < 0) reported through record_memory().
struct MemoryRecord {
  uint64_t address = 0;
  int64_t bytes = 0;
  int64_t total_allocated = 0;
  int64_t total_reserved = 0;
  int32_t device = -1;
};

class Session;
class StreamWriter;

/// Events of one thread in one session. The owning thread appends without locks: it writes the
/// event, then publishes the cursor past it with a release store, so a reader (the session at
/// stop) that acquires the cursor sees whole events only. Everything else (new chunks, side
/// records) happens under `mutex_`, which the reader also takes.
class ThreadBuffer {
 public:
  ThreadBuffer(Session* session, uint32_t index);
  ~ThreadBuffer();
  ThreadBuffer(const ThreadBuffer&) = delete;
  ThreadBuffer& operator=(const ThreadBuffer&) = delete;

  /// Appends one event; returns its sequence number in this buffer. Owner thread only.
  FRAMESCOPE_ALWAYS_INLINE uint64_t append(uint64_t ticks, uint64_t word) noexcept {
    if (FRAMESCOPE_UNLIKELY(cursor_ == limit_)) return append_slow(ticks, word);
    return write_slot(ticks, word);
  }

  /// Appends one compact event (see raw_event.h): `bits` is compact_call_bits(index) or
  /// kCompactReturnBits. Compact events have no sequence number. Owner thread only.
  FRAMESCOPE_ALWAYS_INLINE void append_compact(uint64_t ticks, uint64_t bits) noexcept {
    if (FRAMESCOPE_UNLIKELY(!append_compact_fast(ticks, bits))) append_compact_slow(ticks, bits);
  }

  /// append_compact() without its slow path: false, writing nothing, when the event needs it
  /// (a new chunk, or a base for the delta); the caller then calls append_compact_slow(). For a
  /// hot path that must not call out and come back (each such call keeps its live values in
  /// callee-saved registers, which every call then saves and restores). Owner thread only.
  FRAMESCOPE_ALWAYS_INLINE bool append_compact_fast(uint64_t ticks, uint64_t bits) noexcept {
    const uint64_t delta = ticks - base_ticks_;
    // base_window_ is 0 until the current chunk has a base: the slow path writes one.
    if (FRAMESCOPE_UNLIKELY(delta >= base_window_)) return false;
    // The open pair slot takes the event as its second half only while it is still the newest
    // slot: any event written since (an ordinary one, padding) closed it, keeping the order.
    // Checked here rather than by a store in append(), which C++ ranges use. (cursor_ is never
    // null here: base_window_ is 0 whenever the buffer has no chunk.)
    RawEvent* const cursor = cursor_;
    if (pending_end_ == cursor) {
      // A reader may be copying this (already committed) slot right now, hence the atomic
      // store; it sees the event or the empty half.
      __atomic_store_n(&cursor[-1].ticks, bits | delta, __ATOMIC_RELAXED);
      pending_end_ = nullptr;
      return true;
    }
    if (FRAMESCOPE_UNLIKELY(cursor == limit_)) return false;
    open_pair(cursor, bits | delta);
    return true;
  }

  /// The slow path of append_compact(). Owner thread only.
  FRAMESCOPE_NOINLINE void append_compact_slow(uint64_t ticks, uint64_t bits) noexcept;

  // ---- slow path, owner thread only ----
  // Side records are not kept once the buffer stopped recording (limit reached with the stop
  // policy, or the session stopped): they return kDroppedSeq like the event would.
  uint64_t append_range_detail(uint64_t ticks, RangeDetail detail) noexcept;
  uint64_t append_mark(uint64_t ticks, std::string name) noexcept;
  uint64_t append_memory(uint64_t ticks, const MemoryRecord& rec) noexcept;

  /// Counts `n` events that were produced for this buffer but not appended: the end of a range
  /// whose begin was dropped (kDroppedSeq) is not written, yet counts like the begin did, so
  /// that `dropped` stays in events, the unit of recorded_events. Any thread.
  void count_dropped(uint64_t n) noexcept { dropped_.fetch_add(n, std::memory_order_relaxed); }

  /// Counts `bytes` the owner holds for the session (a pinned name) against its memory limit.
  /// False, charging nothing, when they do not fit or this buffer no longer records. Owner.
  bool try_charge(size_t bytes) noexcept;

  uint32_t index() const noexcept { return index_; }
  Session* session() const noexcept { return session_; }

  // ---- read side (session), any thread ----
  /// Side records are indexed by the payload of their event minus the matching `*_base` (records
  /// of recycled chunks are released in keep-newest mode, so the bases then grow).
  struct Snapshot {
    std::vector<RawEvent> events;  // in order
    uint64_t first_seq = 0;        // seq of events[0] (> 0 when older chunks were recycled)
    std::vector<RangeDetail> details;
    std::vector<std::string> strings;
    std::vector<MemoryRecord> memory;
    uint64_t details_base = 0;
    uint64_t strings_base = 0;
    uint64_t memory_base = 0;
    /// Events not kept, in the unit of count_events(): appends refused at the limit (with the
    /// ends of ranges whose begin was refused), and the events of recycled chunks (keep-newest)
    /// except those still carried.
    uint64_t dropped = 0;
    /// Replayed before `events`: what the events of recycled chunks (keep-newest) or of the
    /// parent process (after fork) leave behind, so that the kept events keep their context:
    /// closes of frames that were running when the session started (kPyReturn, kPyAnchor), then
    /// the begins still open (ranges, Python calls as kPyCall or as a kBase + pair slot, C
    /// calls), outermost first, each with its original ticks (never below the floor set at fork).
    std::vector<RawEvent> carried;
    std::vector<uint64_t> carried_seq;  ///< seq of each carried event (kRangeEnd refers to it)
    /// Side records of carried kRangeBeginSide events: their payload indexes this vector.
    std::vector<RangeDetail> carried_details;
  };
  /// Copies what is committed so far. Safe while the owner keeps appending.
  Snapshot snapshot() const;
  /// Returns chunks to the pool. Call only once the owner can no longer append (it exited or
  /// let go of the buffer).
  void release_chunks() noexcept;
  /// Stops recording into this buffer at session stop: later slow-path appends are dropped and
  /// all chunks the owner cannot still be writing to go back to the pool (all of them when the
  /// caller is the owner).
  void detach(bool owner_is_caller) noexcept;
  /// The owning thread is exiting: in a streamed session its chunks go to the stream now rather
  /// than wait for the stop (a pool that churns threads would otherwise hold a chunk per dead
  /// thread); otherwise the buffer is marked exited (keep-newest may let go of its events).
  /// Owner only.
  void owner_exiting() noexcept;
  /// True once the owner exited (any thread).
  bool exited() const noexcept { return exited_.load(std::memory_order_acquire); }
  /// Makes this buffer one that keeps nothing and counts every event as dropped, shared by the
  /// threads that start once the memory limit is reached (stop policy): they then cost no
  /// memory, and dropped_events still counts what they did. Before the buffer is published.
  void make_counting_only() noexcept {
    full_ = true;
    counting_only_ = true;
  }
  bool counting_only() const noexcept { return counting_only_; }
  /// Keep-newest at the limit, for an exited buffer (the session's mutex held): gives every
  /// chunk and side record back and returns the events let go of (from then on the buffer
  /// holds only its dropped count).
  uint64_t evict_exited() noexcept;

  // ---- fork (session.cpp's pthread_atfork handlers) ----
  /// Takes / releases mutex_ around fork(), so that no other thread is inside it when the
  /// process is copied.
  void lock_for_fork() noexcept { mutex_.lock(); }
  void unlock_after_fork() noexcept { mutex_.unlock(); }
  /// In the child, on the forking thread (the owner; the only thread left): the events recorded
  /// before the fork belong to the parent's trace, so every chunk goes back to the pool, and the
  /// begins still open become carried events at `fork_ticks` at the earliest (the child's trace
  /// starts with the frames and ranges open at the fork). Returns the closes of pre-existing
  /// frames among the dropped events (kPyReturn / kPyAnchor), for the session to apply to this
  /// thread's initial stack. Recording goes on into fresh chunks; sequence numbers continue.
  std::vector<RawEvent> restart_in_fork_child(uint64_t fork_ticks, uint64_t os_tid) noexcept;

  /// Returned by append() when the event was not kept.
  static constexpr uint64_t kDroppedSeq = ~uint64_t(0);

  // identity of the owning thread, set at creation
  uint64_t os_tid = 0;
  uint64_t pthread_id = 0;
  uint64_t logical_tid = 0;
  uint64_t epoch = 0;  // of the session the buffer belongs to
  // copies of the session's config, readable without touching the session (which may be gone
  // once the buffer is detached)
  bool record_shapes = false;
  bool profile_memory = false;

 private:
  FRAMESCOPE_NOINLINE uint64_t append_slow(uint64_t ticks, uint64_t word) noexcept;
  // Makes room for `slots` more events, starting a new chunk if needed (under mutex_, owner).
  // False when the memory limit (or detach) stops recording; the caller counts the drop.
  bool reserve_slots_locked(size_t slots, uint64_t first_word) noexcept;
  // Writes one slot at the cursor (which must have room) and publishes it; returns its seq.
  FRAMESCOPE_ALWAYS_INLINE uint64_t write_slot(uint64_t ticks, uint64_t word) noexcept {
    RawEvent* const cursor = cursor_;
    cursor->ticks = ticks;
    cursor->word = word;
    publish_cursor(cursor + 1);
    return seq_of(cursor);
  }
  // Starts a pair slot with compact event `first` (its second half empty) at `cursor` (the
  // cursor, which has room).
  FRAMESCOPE_ALWAYS_INLINE void open_pair(RawEvent* cursor, uint64_t first) noexcept {
    cursor->ticks = 0;
    cursor->word = first;
    pending_end_ = cursor + 1;
    publish_cursor(cursor + 1);
  }
  // The cursor is the publication: a reader (under mutex_, which every change of chunk takes)
  // acquires it and then sees every slot before it whole. Only the owner moves it, so the
  // owner's own plain reads of it are exact. (A separate count published at each event cost
  // three instructions more per traced call: its load, add and store.)
  FRAMESCOPE_ALWAYS_INLINE void publish_cursor(RawEvent* cursor) noexcept {
    __atomic_store_n(&cursor_, cursor, __ATOMIC_RELEASE);
  }
  // The sequence number of the slot at `slot` in the current chunk. Slots are 16 bytes, so the
  // address shifted by 4 counts slots whatever the chunk's alignment; seq_bias_ maps it to seq.
  FRAMESCOPE_ALWAYS_INLINE uint64_t seq_of(const RawEvent* slot) const noexcept {
    static_assert(sizeof(RawEvent) == 16, "seq_of() counts 16-byte slots");
    return seq_bias_ + (reinterpret_cast<uintptr_t>(slot) >> 4);
  }
  // Slots appended so far (the next sequence number): under mutex_, or by the owner.
  uint64_t committed_locked() const noexcept {
    const RawEvent* cursor = __atomic_load_n(&cursor_, __ATOMIC_ACQUIRE);
    return cursor ? seq_of(cursor) : committed_without_chunk_;
  }
  // Lets go of the current chunk: the cursor no longer counts the slots (under mutex_).
  void drop_cursor_locked() noexcept {
    committed_without_chunk_ = committed_locked();
    __atomic_store_n(&cursor_, static_cast<RawEvent*>(nullptr), __ATOMIC_RELEASE);
    limit_ = nullptr;
    pending_end_ = nullptr;
    base_window_ = 0;  // no chunk: append_compact() must take its slow path
  }
  // Streaming capture: hands every chunk to `stream` with the side records that only they
  // reference (those below `keep`), leaving the buffer without a chunk (under mutex_, owner).
  void stream_chunks_locked(StreamWriter& stream, const SideRecordMarks& keep) noexcept;
  // The first side records that events from `first_word` (the first event of a new chunk) on
  // may reference (under mutex_).
  SideRecordMarks side_marks_from(uint64_t first_word) const noexcept;
  // Releases the side records below `keep` once the chunks referencing them are recycled (under
  // mutex_). O(records released): no scan of the recycled chunk.
  void release_side_records_below(const SideRecordMarks& keep) noexcept;
  // Keeps `record` in `records` (side records numbered from `base`, under mutex_) and appends
  // the slot of `kind` that refers to it; dropped as a slot is while only counting, or once
  // the buffer is full or detached. Defined in thread_buffer.cpp, its only user.
  template <class Records, class Record>
  uint64_t append_side(uint64_t ticks, EventKind kind, Records& records, const uint64_t& base,
                       Record&& record) noexcept;
  // What side records cost against the session's memory limit (charged while they are here).
  static int64_t bytes_of(const RangeDetail& d) noexcept;
  static int64_t bytes_of(const std::string& s) noexcept;
  static int64_t bytes_of(const MemoryRecord&) noexcept { return sizeof(MemoryRecord); }
  // Folds the `slots` events of a chunk that leaves the buffer (recycled, or dropped at fork)
  // into the carried state: begins still open join open_begins_, ends and returns remove the
  // begins they close, closes of pre-existing frames join initial_closes_. Mirrors replay's
  // stack rules. Under mutex_; runs once per recycled chunk, never on the hot path.
  void carry_open_begins(const Chunk& chunk, size_t slots) noexcept;
  // Events the carried state replays (one per carried begin or close), as count_events()
  // counts them in a snapshot's `carried` (under mutex_).
  uint64_t carried_events_locked() const noexcept {
    return open_begins_.size() + initial_closes_.size();
  }

  // A begin that outlived its chunk: the event as recorded (ticks absolute; a compact call keeps
  // its bits with delta 0; a side range's payload indexes open_details_) and its seq.
  struct OpenBegin {
    uint64_t ticks;
    uint64_t word;
    uint64_t seq;
  };
  // At most this many carried begins (deeper stacks lose their outermost begins, counted as
  // dropped) and closes of pre-existing frames.
  static constexpr size_t kMaxCarried = size_t(1) << 16;
  static constexpr size_t kMaxInitialCloses = 4096;

  RawEvent* cursor_ = nullptr;  // next slot (published: see publish_cursor()); null: no chunk
  RawEvent* limit_ = nullptr;
  uint64_t seq_bias_ = 0;  // seq_of() for the current chunk (set with it, under mutex_)
  uint64_t committed_without_chunk_ = 0;  // committed_locked() while cursor_ is null
  // Just past the last pair slot with an empty second half: equal to cursor_ while that slot is
  // the newest (one compare on the hot path), else null or older.
  RawEvent* pending_end_ = nullptr;
  uint64_t base_ticks_ = 0;   // base of compact events in the current chunk
  uint64_t base_window_ = 0;  // kCompactDeltaLimit once the current chunk has a base
  Session* session_;
  uint32_t index_;
  bool full_ = false;      // at the memory limit with the stop policy: events counted, not kept
  bool detached_ = false;  // the session stopped
  std::atomic<bool> exited_{false};
  bool counting_only_ = false;        // shared by several threads: only dropped_ (atomic) changes
  uint32_t next_chunk_events_ = 256;  // size of the next chunk (ChunkPool::kMinChunkEvents, x4)

  mutable std::mutex mutex_;
  std::deque<Chunk> chunks_;
  std::deque<RangeDetail> details_;
  std::deque<std::string> strings_;
  std::deque<MemoryRecord> memory_;
  uint64_t details_base_ = 0;  // payload index of details_.front()
  uint64_t strings_base_ = 0;
  uint64_t memory_base_ = 0;
  std::atomic<uint64_t> dropped_{0};
  // carried state of chunks that left the buffer (under mutex_)
  std::vector<OpenBegin> open_begins_;     // outermost first
  std::vector<RangeDetail> open_details_;  // side records of carried side begins
  std::vector<RawEvent> initial_closes_;   // kPyReturn / kPyAnchor closing pre-existing frames
  uint64_t carried_floor_ticks_ = 0;       // carried events start no earlier (set at fork)
};

/// Per-thread state of the Python layer's PEP 523 frame hook (cpp/python/tracer/frame_hook.h;
/// the core itself never reads it). It lives in the thread's slot below, not in a TLS object of
/// its own, so that the hook's hot path reaches the thread's buffer and its own state through
/// one initial-exec TLS block: one GOT load and one base register where two cost a GOT load,
/// a callee-saved register and its save and restore each (docs/performance.md). Plain data;
/// fields are owned and documented by the hook.
struct HookThreadState {
  /// eval_frame API callback of this thread (strong ref, owned by the eval_frame API): null =
  /// None, Py_False = run-only, else a callable. `_object` is CPython's PyObject.
  ::_object* eval_callback;
  /// Below this stack address the hook takes its slow path. Starts at the top of the address
  /// space, so a thread's first frame takes it and learns the real bounds.
  uintptr_t stack_check_below;
  uintptr_t stack_low;      ///< lowest usable address of this thread's stack (0: unknown)
  const void* last_anchor;  ///< tracer: pre-existing frame of the last depth-0 call
  uint64_t anchor_epoch;    ///< tracer: session in which last_anchor was recorded
  int depth;                ///< tracer: hook frames open on this thread
  /// Stack segments (cpp/core/stack_segments.h) this thread runs on now, 0 on its own stack.
  /// The stack_* fields above describe the segment in use.
  unsigned stack_segment_level;
};

/// The hot-path view of the calling thread: trivially constructible so that reading it is a
/// plain TLS load. `epoch` says which session `buffer` belongs to. Declared `__thread` rather
/// than `thread_local`: an `extern thread_local` makes every use in another translation unit
/// call through (or test for) a TLS init wrapper; `__thread` guarantees static initialization.
///
/// Initial-exec TLS model: the slot is reached at a fixed offset from %fs, even when the core is
/// linked into a dlopen()ed Python extension, where the default (general-dynamic) model calls
/// __tls_get_addr on every access -- twice per traced Python call. glibc keeps static TLS room
/// for such objects in dlopen()ed libraries; 72 bytes is far below that reserve.
struct ThreadSlot {
  ThreadBuffer* buffer;
  uint64_t epoch;
  HookThreadState hook;
  /// Sets the buffer and its session's epoch, leaving `hook` alone. (Assigning the whole slot
  /// is deleted: a `{buffer, epoch}` initializer would zero the hook's state.)
  void set(ThreadBuffer* b, uint64_t e) noexcept {
    buffer = b;
    epoch = e;
  }
  ThreadSlot& operator=(const ThreadSlot&) = delete;
};
extern __thread ThreadSlot t_slot __attribute__((tls_model("initial-exec")));
/// Epoch of the recording session, 0 when none records.
extern std::atomic<uint64_t> g_session_epoch;

/// Slow path of current_buffer(): attaches this thread to the active session (or caches that it
/// must not record). Returns null when this thread does not record.
ThreadBuffer* attach_current_thread() noexcept;

/// The calling thread's buffer in the recording session, or null when it does not record.
FRAMESCOPE_ALWAYS_INLINE ThreadBuffer* current_buffer() noexcept {
  uint64_t epoch = g_session_epoch.load(std::memory_order_relaxed);
  if (FRAMESCOPE_LIKELY(t_slot.epoch == epoch)) return t_slot.buffer;
  return attach_current_thread();
}

/// Returned by register_compact_key() when a key gets no compact index.
constexpr uint32_t kNoCompactIndex = UINT32_MAX;

/// Registers `key` (a Python key, as kPyCall records it) in the compact key table of the session
/// with `epoch` and returns its index for compact_call_bits(); kNoCompactIndex when that session
/// is no longer the active one or its table is full (then record kPyCall events instead).
/// Thread-safe; a slow path (once per code object per session).
uint32_t register_compact_key(uint64_t epoch, uint64_t key) noexcept;

/// Events in a snapshot's slots: a pair slot holds one or two, a base or padding slot none.
uint64_t count_events(const std::vector<RawEvent>& slots) noexcept;
/// count_events() of the `n` slots at `slots`.
uint64_t count_events(const RawEvent* slots, size_t n) noexcept;

/// Stops the calling thread from recording in any session until resume_thread_recording(): its
/// current_buffer() answers null (the hook, the fallback backends and ranges then record nothing
/// on it), also in a session started meanwhile. Nests (counted). For work framescope does on a
/// recording thread on its own behalf (a dump, a snapshot's analysis): none of it, nor what it
/// calls, is the program's. Owner thread only; never fails.
void pause_thread_recording() noexcept;
/// Ends one pause_thread_recording(); the thread records again (re-attaching to the session on
/// its next event) when no pause is left. Unbalanced calls are ignored.
void resume_thread_recording() noexcept;

/// Forces the next current_buffer() on this thread to re-check (after its thread-local state
/// changed, e.g. under a ThreadLocalStateGuard).
inline void invalidate_thread_slot() noexcept { t_slot.epoch = ~uint64_t(0); }

}  // namespace framescope::internal
