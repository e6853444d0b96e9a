// cpp/export/file_output.cpp: atomic file output (temp file + rename), gzip-compressed on request.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

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
    while (size > 0) {
      const ssize_t n = ::write(fd_, data, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno("failed writing", path_, errno);
      }
      data += n;
      size -= size_t(n);
      written_ += uint64_t(n);
    }
  }
  void write_at(uint64_t offset, const char* data, size_t size) override {
    if (offset > written_ || size > written_ - offset) {
      throw OutputError("framescope: write_at past the end of '" + path_ + "'", 0, path_);
    }
    while (size > 0) {
      const ssize_t n = ::pwrite(fd_, data, size, off_t(offset));
      if (n < 0) {
        if (errno == EINTR) continue;
        throw_errno("failed writing", path_, errno);
      }
      data += n;
      size -= size_t(n);
      offset += uint64_t(n);
    }
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
  return std::make_unique<AtomicFile>(path);
}

std::unique_ptr<OutputSink> open_file_output(const std::string& path, bool gzip) {
  check_path(path);
  std::unique_ptr<OutputSink> file = std::make_unique<AtomicFile>(path);
  if (!gzip) return file;
  return exporters::make_gzip_sink(std::move(file), exporters::default_gzip_workers());
}

}  // namespace framescope
