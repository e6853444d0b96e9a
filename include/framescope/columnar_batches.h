// framescope/columnar_batches.h: a replay as fixed-size column batches (the Parquet/Arrow export).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "framescope/trace_visitor.h"

namespace framescope {

/// Row kinds: the EventCategory values, then memory samples of record_memory().
enum class RowKind : uint8_t {
  kPython = 0,   ///< a Python call
  kC = 1,        ///< a builtin (C function) called from Python
  kOp = 2,       ///< a RecordScope::kFunction range (torch op)
  kRange = 3,    ///< a user range (record_function, the C ABI)
  kInstant = 4,  ///< a mark
  kScope = 5,    ///< another scope's range
  kMemory = 6,   ///< a record_memory() sample (a counter row)
};
/// The kinds' names as the table stores them, indexed by RowKind.
extern const char* const kRowKindNames[7];

/// One batch of rows, column by column (one element per row in every per-row vector). Rows come
/// in the order their events end (a slice when it ends, an instant or a memory sample when it
/// happens), thread after thread. Names and details are local to the batch: `name` indexes
/// `symbols` (trace symbol indices; symbol_count() stands for the memory rows' "[memory]"),
/// `detail` indexes `args` (-1: none), so that a consumer's dictionaries hold only what the
/// batch uses.
struct ColumnBatch {
  size_t rows = 0;
  std::vector<int64_t> id;        ///< the event's index in the trace (Slice::index); memory: -1
  std::vector<int64_t> parent;    ///< id of the enclosing event, -1 at the root
  std::vector<int64_t> start_ns;  ///< on the trace's clock plus the batcher's offset
  std::vector<int64_t> dur_ns;    ///< 0 for instants and memory rows
  std::vector<int64_t> self_ns;   ///< dur_ns less the children's time (0: async, instants)
  std::vector<int64_t> cpu_ns;    ///< on-CPU part of dur_ns; -1 when the thread was not sampled
  std::vector<int64_t> cpu_self_ns;
  std::vector<int64_t> alloc_bytes;       ///< bytes allocated inside, children included
  std::vector<int64_t> alloc_self_bytes;  ///< ... directly inside; memory rows: the sample's
  std::vector<int64_t> flops;             ///< the range's flops estimate, else 0
  std::vector<uint32_t> thread;           ///< index into TraceView::threads
  std::vector<uint32_t> name;             ///< index into `symbols`
  std::vector<int32_t> depth;
  std::vector<int32_t> detail;  ///< index into `args`, -1 when none
  std::vector<uint8_t> kind;    ///< RowKind
  // The flags are bit-packed, row i in bit i % 8 of byte i / 8 (Arrow's boolean layout, so a
  // consumer wraps them as they are; read them with flag()): (rows + 7) / 8 bytes each.
  std::vector<uint8_t> is_async;  ///< a range that ended on another thread
  /// Inside an open event of the same name, kind and asyncness on its thread (a recursive
  /// call): its duration is already in the outer one's, so totals skip it (as key_averages).
  std::vector<uint8_t> recursive;
  /// Host code (a replay with host marking, ReplayFilter::host_mode: Slice::host); memory rows
  /// take the flag of the slice they are charged to. All 0 on a replay without marking.
  std::vector<uint8_t> host;
  std::vector<uint32_t> symbols;  ///< the batch's names: trace symbol indices
  std::vector<std::string> args;  ///< the batch's details as JSON objects
  bool any_cpu_known = false;     ///< some row has cpu_ns >= 0
  bool any_cpu_unknown = false;   ///< some row has cpu_ns < 0
};

/// Row `row`'s bit in a bit-packed flag column of ColumnBatch (is_async, recursive, host).
inline bool flag(const std::vector<uint8_t>& bits, size_t row) {
  return (bits[row >> 3] >> (row & 7)) & 1;
}

struct ColumnarOptions {
  size_t batch_rows = size_t(1) << 20;  ///< rows per batch (the last may have fewer)
  int64_t offset_ns = 0;                ///< added to every start_ns (a dataset's merged clock)
};

/// Replays `source` once into batches of `options.batch_rows` rows, handing each to `sink`,
/// which may take its vectors and leave another batch in their place (one it is done with: its
/// memory is reused, emptied, for the next rows). Memory: one batch plus the open slices.
/// Rethrows what `sink` throws.
void write_column_batches(const TraceSource& source, const ColumnarOptions& options,
                          const std::function<void(ColumnBatch&)>& sink);

/// A range's detail as a JSON object: {"inputs": [...], "flops": n, "seq_nr": n} (what it has);
/// a shape input is [dims] or {"shape": [dims], "dtype": "..."}.
std::string detail_json(const EventDetail& d);

}  // namespace framescope
