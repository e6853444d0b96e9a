// cpp/core/trace_file.h: writing the records of a .fstrace (used by serialize and streaming).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "framescope/output.h"
#include "trace_part.h"

namespace framescope::internal {

enum class RecordType : uint32_t { kPart = 1, kChunk = 2, kTables = 3, kProcesses = 4 };

/// Buffers small writes into blocks for an OutputSink (or only into memory without one).
/// Not thread-safe.
class BlockWriter {
 public:
  BlockWriter() : out_(null_) {}
  explicit BlockWriter(OutputSink& out) : out_(out) {}
  template <class T>
  void pod(T v) {
    char b[sizeof v];
    std::memcpy(b, &v, sizeof v);
    buf_.append(b, sizeof v);
  }
  void str(const std::string& s) {
    pod<uint64_t>(s.size());
    buf_.append(s);
  }
  void raw(const char* data, size_t n);
  void begin_record(RecordType type, uint32_t aux, uint64_t length);
  void end_record(uint64_t length);
  void record(RecordType type, uint32_t aux, std::string_view payload);
  /// Hands buffered bytes to the sink.
  void flush();
  /// What is buffered (for writers without a sink).
  const std::string& buffer() const { return buf_; }

 private:
  StringSink null_;
  OutputSink& out_;
  std::string buf_;
};

void write_file_header(BlockWriter& w);
void write_part_header(BlockWriter& w, const TracePart& part, int64_t offset_ns);
void write_chunk(BlockWriter& w, uint32_t buffer_index, uint64_t first_seq, const RawEvent* slots,
                 uint64_t count);
/// `infos`, when given, replaces the part's own thread infos (one per part thread: a merged
/// trace's, whose pids may have been separated).
void write_part_tables(BlockWriter& w, const TracePart& part, const ThreadInfo* infos = nullptr);
/// The trace's process table (after the last part).
void write_processes(BlockWriter& w, const std::vector<ProcessInfo>& processes);

}  // namespace framescope::internal
