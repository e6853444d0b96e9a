// cpp/export/file_output.cpp: file output (atomic for regular files, direct for devices and
// pipes), gzip-compressed on request.
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "framescope/output.h"
#include "gzip_output.h"

namespace framescope {

namespace {

[[noreturn]] void throw_errno(const std::string& what, const std::string& path, int err) {
  throw OutputError("framescope: " + what + " '" + path + "': " + std::strerror(err), err, path);
}

// Writes all `size` bytes to `fd`, at `position` (pwrite) when `at`, else where the file
// stands, advancing `position` by what each write took; retries after EINTR. A write that
// takes nothing (a full device) fails as ENOSPC rather than looping.
void write_fully(int fd, const char* data, size_t size, const std::string& path, bool at,
                 uint64_t& position) {
  while (size > 0) {
    const ssize_t n = at ? ::pwrite(fd, data, size, off_t(position)) : ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("failed writing", path, errno);
    }
    if (n == 0) throw_errno("failed writing", path, ENOSPC);
    data += n;
    size -= size_t(n);
    position += uint64_t(n);
  }
}

// A temporary file next to `path`, renamed over it by commit(). Until then `path` is untouched,
// so a failed or abandoned write never leaves a truncated file (and keeps an older one).
class AtomicFile final : public SeekableOutput {
 public:
  explicit AtomicFile(const std::string& path) : path_(path) {
    static std::atomic<uint64_t> counter{0};
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
    const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
    const uint64_t salt =
        uint64_t(std::chrono::steady_clock::now().time_since_epoch().count()) ^ uint64_t(getpid());
    for (int attempt = 0; attempt < 100; ++attempt) {
      tmp_ = dir + "." + base + "." + std::to_string(salt % 1000000007u) + "." +
             std::to_string(counter.fetch_add(1)) + ".tmp";
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ >= 0 || errno != EEXIST) break;
    }
    if (fd_ < 0) throw_errno("cannot create a file next to", path_, errno);
    // Keep the mode of a file being replaced.
    struct stat st;
    if (::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode)) fchmod(fd_, st.st_mode & 07777);
  }
  ~AtomicFile() override {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(tmp_.c_str());
    }
  }
  void write(const char* data, size_t size) override {
    write_fully(fd_, data, size, path_, false, written_);
  }
  void write_at(uint64_t offset, const char* data, size_t size) override {
    if (offset > written_ || size > written_ - offset) {
      throw OutputError("framescope: write_at past the end of '" + path_ + "'", 0, path_);
    }
    write_fully(fd_, data, size, path_, true, offset);
  }
  uint64_t size() const noexcept override { return written_; }
  void commit() override {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) {
      const int err = errno;
      ::unlink(tmp_.c_str());
      throw_errno("failed writing", path_, err);
    }
    if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
      const int err = errno;
      ::unlink(tmp_.c_str());
      throw_errno("cannot replace", path_, err);
    }
  }

 private:
  std::string path_;
  std::string tmp_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// Writes straight into an existing file that is not a regular file: a device (/dev/null,
// /dev/full), a FIFO, a terminal, a /proc/self/fd or /dev/stdout link. Renaming a temporary file
// over such a path would replace the device node or pipe with a regular file (for the whole
// machine, in /dev), so these are opened and written in place, as a shell redirection does. There
// is nothing to keep intact on failure: a device has no previous contents.
class DirectFile final : public SeekableOutput {
 public:
  explicit DirectFile(const std::string& path) : path_(path) {
    // No O_CREAT: the path exists (it was just stat()ed); if it vanished meanwhile, failing is
    // better than creating a regular file in /dev. O_TRUNC applies to a regular file reached
    // through /proc/self/fd (as `>` would) and is ignored by devices and pipes.
    do {
      fd_ = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOCTTY);
    } while (fd_ < 0 && errno == EINTR);
    if (fd_ < 0) throw_errno("cannot open", path_, errno);
  }
  ~DirectFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  void write(const char* data, size_t size) override {
    write_fully(fd_, data, size, path_, false, written_);
  }
  void write_at(uint64_t, const char*, size_t) override {
    throw OutputError("framescope: cannot write back into '" + path_ + "': not a regular file",
                      ESPIPE, path_);
  }
  uint64_t size() const noexcept override { return written_; }
  void commit() override {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0 && errno != EINTR) throw_errno("failed writing", path_, errno);
  }

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

// Where output to `path` goes: straight into it (not a regular file, or a path in /dev or /proc,
// where no temporary file can or may be created), or atomically to `target` (the path, or the
// regular file a symbolic link names: the link stays a link).
struct OutputTarget {
  bool direct = false;
  std::string target;
};

// True for a folder in /dev (but /dev/shm) or /proc: nothing but device nodes and links lives
// there, so no file may be made there (a temporary, or a new regular file in /dev).
bool in_dev_or_proc(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string folder = slash == std::string::npos ? "."
                             : slash == 0               ? "/"
                                                        : path.substr(0, slash);
  char* real = ::realpath(folder.c_str(), nullptr);
  if (!real) return false;
  const std::string f(real);
  std::free(real);
  const auto under = [&f](const char* top) {
    return f == top || f.rfind(std::string(top) + "/", 0) == 0;
  };
  return (under("/dev") && !under("/dev/shm")) || under("/proc");
}

OutputTarget resolve_output(const std::string& path) {
  OutputTarget t;
  t.target = path;
  struct stat st;
  const bool exists = ::stat(path.c_str(), &st) == 0;
  // Devices, FIFOs, sockets, terminals (a directory fails at open: EISDIR); and /dev/stdout,
  // /dev/fd/N, /proc/self/fd/N, which name an open file description even when it is a regular
  // file: written through, as a shell redirection would, never renamed over. A path there that
  // does not exist fails at open (no O_CREAT) rather than create a file in /dev.
  if ((exists && !S_ISREG(st.st_mode)) || in_dev_or_proc(path)) {
    t.direct = true;
    return t;
  }
  if (!exists) return t;  // a new file (or an error the open reports)
  // A regular file, possibly through a symbolic link: replace the file, keep the link.
  if (char* real = ::realpath(path.c_str(), nullptr)) {
    t.target = real;
    std::free(real);
  }
  return t;
}

std::unique_ptr<SeekableOutput> open_output(const std::string& path) {
  OutputTarget t = resolve_output(path);
  if (t.direct) return std::make_unique<DirectFile>(path);
  return std::make_unique<AtomicFile>(t.target);
}

}  // namespace

bool is_gzip_path(std::string_view path) noexcept {
  return path.size() >= 3 && path.substr(path.size() - 3) == ".gz";
}

namespace {
void check_path(const std::string& path) {
  if (path.find('\0') != std::string::npos) {
    throw std::invalid_argument("framescope: path contains a NUL byte");
  }
  if (path.empty()) throw std::invalid_argument("framescope: empty path");
}
}  // namespace

std::unique_ptr<SeekableOutput> open_seekable_file_output(const std::string& path) {
  check_path(path);
  OutputTarget t = resolve_output(path);
  if (t.direct) {
    // A streamed trace is completed in place at stop and then read back from the file (mapped):
    // a device or pipe can do neither. Refused before the session starts.
    throw OutputError("framescope: cannot stream to '" + path +
                          "': not a regular file (a streamed trace is completed in place and "
                          "read back from the file; stream to a file and copy it)",
                      0, path);
  }
  return std::make_unique<AtomicFile>(t.target);
}

std::unique_ptr<OutputSink> open_file_output(const std::string& path, bool gzip) {
  check_path(path);
  std::unique_ptr<OutputSink> file = open_output(path);
  if (!gzip) return file;
  return exporters::make_gzip_sink(std::move(file), exporters::default_gzip_workers());
}

}  // namespace framescope
