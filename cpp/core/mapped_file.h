// cpp/core/mapped_file.h: a trace file mapped read-only, and the guard that notices when the file
// changes under the mapping (truncated or rewritten on disk after load()).
//
// Why a guard rather than a private copy: a loaded or streamed trace replays straight from the
// file's pages and lets them go as it passes them (trace_part.h, release_pages), so a trace of
// gigabytes costs little memory; copying it would cost its full size, in RAM or on disk. But a
// shared file can change under a mapping: a page past a new end of file raises SIGBUS (the
// process dies), and a file rewritten in place shows its new bytes (silently other events). So:
//   - every reader checks the file before and after it reads the slots (check()): same size,
//     same modification time, else a clear error; a change during a read is caught by the check
//     after it, before any result is returned;
//   - a SIGBUS on a guarded mapping (the file was truncated during a read, between two checks)
//     does not kill the process: the handler maps zero pages over the rest of the mapping (zero
//     slots are padding, which the replay skips; it never trusts slot contents anyway) and marks
//     the file, so that the check after the read raises the error. A SIGBUS elsewhere goes to
//     the handler that was installed before (Python's faulthandler, or the default: the crash).
// A file replaced by a rename (framescope's own atomic save, an editor) is not a change: the
// mapping keeps the old inode, whose bytes stay as they were.
// The handler is installed at the first load(). A handler installed after it that re-raises
// the signal instead of returning (faulthandler.enable() called later; faulthandler enabled at
// startup, as pytest and -X faulthandler do, comes before and is chained to) still ends the
// process on a truncation during a read; the checks before each read are unaffected.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <memory>
#include <string>

namespace framescope::internal {

class MappedFile {
 public:
  /// Maps `size` bytes of the open regular file `fd` (which the caller closes), whose fstat is
  /// `st`, read-only and private, and guards the mapping. Throws OutputError.
  static std::shared_ptr<const MappedFile> map(int fd, const struct stat& st,
                                               const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const char* data() const noexcept { return static_cast<const char*>(addr_); }
  size_t size() const noexcept { return size_; }
  /// Throws OutputError (no errno) when the file was truncated, extended or rewritten since it
  /// was mapped, or a read of the mapping faulted. Thread-safe; a stat() per call.
  void check() const;

 private:
  MappedFile() = default;
  void* addr_ = nullptr;
  size_t size_ = 0;
  int slot_ = -1;           // in the guard's table, -1 when unguarded (table full)
  std::string path_;        // absolute, as given to load()
  std::string shown_path_;  // as given, for messages
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  struct timespec mtime_ = {};
};

}  // namespace framescope::internal
