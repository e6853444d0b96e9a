// framescope/output.h: byte sinks the writers stream into (files written atomically, gzip).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

namespace framescope {

/// An output failed: `error_code` is the errno (0 when none applies), `path` the file.
class OutputError : public std::runtime_error {
 public:
  OutputError(const std::string& message, int error_code, std::string path)
      : std::runtime_error(message), error_code_(error_code), path_(std::move(path)) {}
  int error_code() const noexcept { return error_code_; }
  const std::string& path() const noexcept { return path_; }

 private:
  int error_code_;
  std::string path_;
};

/// Where a writer's bytes go. Writers buffer and hand over blocks (typically 1 MiB), so a sink
/// needs no buffering of its own. Not thread-safe: one writer at a time.
class OutputSink {
 public:
  virtual ~OutputSink() = default;
  /// Appends bytes. Throws OutputError on failure.
  virtual void write(const char* data, size_t size) = 0;
  void write(std::string_view s) { write(s.data(), s.size()); }
  /// Finishes the output (flushes, renames a temporary file into place). Throws OutputError.
  /// A sink destroyed without commit() leaves no partial output behind (and any previous file
  /// at the path intact).
  virtual void commit() = 0;
};

/// Collects everything in memory (tests, serialize()).
class StringSink final : public OutputSink {
 public:
  void write(const char* data, size_t size) override { out.append(data, size); }
  void commit() override {}
  std::string out;
};

/// Writes `path` atomically: bytes go to a temporary file in the same folder, which commit()
/// flushes and renames over `path` (so readers never see a partial file, and a
/// failed write leaves the old file intact). A regular file reached through a symbolic link is
/// replaced where it lies (the link stays). Anything that is not a regular file (a device such
/// as /dev/null, a FIFO, /dev/stdout, /proc/self/fd/N: any existing path in /dev or /proc but
/// /dev/shm) is opened and written in place, never replaced. With `gzip`, the bytes are
/// gzip-compressed (zlib, level 1: fast). Throws OutputError (with errno and path) when the
/// temporary file cannot be created, and std::invalid_argument when `path` holds a NUL byte.
std::unique_ptr<OutputSink> open_file_output(const std::string& path, bool gzip = false);

/// An atomic file output (as open_file_output without gzip) that can also overwrite bytes it
/// already wrote: a streamed trace completes its header at stop. Not thread-safe.
class SeekableOutput : public OutputSink {
 public:
  /// Overwrites `size` bytes at `offset`, which must lie within what was written. Throws
  /// OutputError.
  virtual void write_at(uint64_t offset, const char* data, size_t size) = 0;
  /// Bytes written so far (the end of the file).
  virtual uint64_t size() const noexcept = 0;
};

/// Opens `path` like open_file_output(path, false), for writing in place later as well. Throws
/// OutputError for a path that is not a regular file (device, FIFO, /dev/stdout).
std::unique_ptr<SeekableOutput> open_seekable_file_output(const std::string& path);

/// True when `path` ends with ".gz".
bool is_gzip_path(std::string_view path) noexcept;

}  // namespace framescope
