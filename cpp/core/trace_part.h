// cpp/core/trace_part.h: one recorded session inside a StoredTrace: slots, side records, tables.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "framescope/clock.h"
#include "framescope/internal/raw_event.h"
#include "framescope/internal/thread_buffer.h"
#include "framescope/stored_trace.h"
#include "framescope/trace.h"

namespace framescope::internal {

/// A run of consecutive slots of one thread (a chunk, or a whole snapshot).
struct SlotRun {
  const RawEvent* slots = nullptr;
  uint64_t count = 0;
};

/// A range that carried side data (kRangeBeginSide): its name as a part symbol, its scope and
/// its EventDetail (index into TracePart::details, or UINT32_MAX).
struct StoredRange {
  uint32_t symbol = 0;
  uint8_t scope = 0;
  uint32_t detail = UINT32_MAX;
};

/// A frame running when the session started.
struct StoredFrame {
  uint32_t symbol = 0;
  uint64_t address = 0;
};

struct PartThread {
  ThreadInfo info;
  uint32_t buffer_index = 0;
  uint64_t first_seq = 0;  // seq of the first slot of runs[0]
  std::vector<SlotRun> runs;
  // side records, indexed by (event payload - base)
  uint64_t ranges_base = 0;
  std::vector<StoredRange> ranges;
  uint64_t marks_base = 0;
  std::vector<uint32_t> marks;  // symbol of each mark
  uint64_t memory_base = 0;
  std::vector<MemoryRecord> memory;
  std::vector<StoredFrame> initial;  // outermost first
  uint64_t dropped = 0;
};

/// Keys the slots carry (code objects, C functions, static names) -> part symbols. A key
/// missing here replays as one of the "unknown" symbols every part has.
struct KeyTables {
  std::vector<uint32_t> compact;  // compact index -> symbol
  std::unordered_map<uint64_t, uint32_t> python, c_function, static_name;
};

struct PartAsyncEnd {
  uint32_t buffer_index = 0;
  uint64_t begin_seq = 0;
  uint64_t ticks = 0;
};

/// A private, read-only mapping of a whole trace file: [begin, end), begin page-aligned.
class MappedFile;

struct MappedSpan {
  const char* begin = nullptr;
  const char* end = nullptr;
  bool empty() const { return begin == end; }
};

/// Immutable after construction (shared between StoredTraces).
struct TracePart {
  ClockConverter clock;
  uint64_t start_ticks = 0;
  uint64_t stop_ticks = 0;
  bool with_flops = false;
  std::vector<Symbol> symbols;
  // every part has these three (replay's fallbacks for keys it cannot resolve)
  uint32_t unknown_python = 0;
  uint32_t unknown_c = 0;
  uint32_t unknown_range = 0;
  KeyTables keys;
  std::vector<PartThread> threads;
  std::vector<EventDetail> details;
  std::vector<PartAsyncEnd> async_ends;
  std::vector<std::string> warnings;
  uint64_t recorded_events = 0;
  uint64_t dropped_events = 0;
  // storage the runs point into: owned slot arrays, or the mapped file
  std::vector<std::vector<RawEvent>> owned_slots;
  std::shared_ptr<const void> mapped;
  // Mapped and large: the replay lets go of the pages it passed (replay.cpp, release_pages).
  bool release_pages = false;
  // The whole private read-only file mapping the slots lie in (load() only; else empty): pages
  // are released only inside it.
  MappedSpan mapped_span;
  // The file `mapped` is, for a part read by load() (else null): checked around every read of
  // the slots, since the file may change on disk (mapped_file.h).
  const MappedFile* file = nullptr;

  int64_t start_ns() const { return clock.to_ns(start_ticks); }
  int64_t stop_ns() const { return clock.to_ns(stop_ticks); }
};

struct RecordedKeys;

/// Builds a part from a stopped session's events (consumes `raw`), resolving every key its slots
/// refer to, and the keys in `more` (slots written to a stream), with `resolver`. Threads whose
/// OS id is in `names` get that name. Defined in part_builder.cpp.
std::shared_ptr<TracePart> build_part(RawTrace&& raw, const KeyResolver& resolver,
                                      const std::vector<std::pair<uint64_t, std::string>>& names,
                                      const RecordedKeys* more = nullptr);

/// Slots replayed in one block (8 MiB), after which a part with release_pages lets them go.
constexpr uint64_t kReleaseBlockSlots = uint64_t(1) << 19;
/// Mapped parts with this many bytes of slots or more have release_pages (a streamed trace of
/// 200 M events maps 1.6 GB); smaller ones stay resident for re-reads.
constexpr uint64_t kReleasePagesFrom = uint64_t(64) << 20;
/// Pages are released in aligned blocks of this size: the kernel maps the page-cache pages
/// around a faulting address in such a block ("fault-around", 64 KiB by default), so pages next
/// to what a reader touched are mapped too and must go with it.
constexpr uintptr_t kReleaseGrain = uintptr_t(64) << 10;
/// Lets go of the pages of `span` (a private, read-only mapping of a trace file) that overlap
/// [begin, end), widened to kReleaseGrain-aligned blocks and clipped to the mapping: a later
/// access faults them in again from the file. Nothing happens outside `span` (an empty span:
/// nothing at all). Defined in replay.cpp.
void release_mapped_pages(const MappedSpan& span, const void* begin, const void* end) noexcept;

/// Replays one part into `visitor`, reporting ids through `ref` (symbol map, thread and detail
/// bases, time offset). `next_index` is the index of the part's first event and is advanced past
/// its events. The tree rules live here (replay.cpp). Never throws on inconsistent slots.
void replay_part(const StoredTrace::PartRef& ref, TraceVisitor& visitor, uint64_t& next_index);

}  // namespace framescope::internal
