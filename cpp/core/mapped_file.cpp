// cpp/core/mapped_file.cpp: read-only trace file mappings and their SIGBUS guard (mapped_file.h).
#include "mapped_file.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "framescope/output.h"

namespace framescope::internal {

namespace {

// The guarded mappings, read by the signal handler: fixed size and lock-free (a handler may not
// take locks or allocate). A mapping beyond the table's size is only checked by stat().
constexpr int kSlots = 512;
struct GuardSlot {
  std::atomic<bool> used{false};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
  std::atomic<bool> faulted{false};
};
GuardSlot g_slots[kSlots];
struct sigaction g_previous;  // the SIGBUS disposition before ours
std::once_flag g_install_once;
bool g_installed = false;

void pass_on(int sig, siginfo_t* info, void* context) {
  const struct sigaction& p = g_previous;
  if ((p.sa_flags & SA_SIGINFO) && p.sa_sigaction) {
    p.sa_sigaction(sig, info, context);
    return;
  }
  if (p.sa_handler != SIG_DFL && p.sa_handler != SIG_IGN) {
    p.sa_handler(sig);
    return;
  }
  // The default action: restore it; a fault re-executes the access and dies of it, a signal
  // sent by kill() is sent again.
  signal(sig, SIG_DFL);
  if (info->si_code <= 0) raise(sig);
}

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const int saved_errno = errno;
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  if (info->si_code > 0) {  // a fault, not kill()
    for (GuardSlot& s : g_slots) {
      if (!s.used.load(std::memory_order_acquire)) continue;
      const uintptr_t begin = s.begin.load(std::memory_order_acquire);
      const uintptr_t end = s.end.load(std::memory_order_acquire);
      if (address < begin || address >= end) continue;
      // The file ends before this page now: zero pages from here to the end of the mapping
      // (the rest of the file is gone too). mmap is a plain system call, safe here.
      const uintptr_t page = address & ~uintptr_t(sysconf(_SC_PAGESIZE) - 1);
      void* p = mmap(reinterpret_cast<void*>(page), end - page, PROT_READ,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (p != MAP_FAILED) {
        s.faulted.store(true, std::memory_order_release);
        errno = saved_errno;
        return;  // the access is retried and reads zeros
      }
      break;
    }
  }
  errno = saved_errno;
  pass_on(sig, info, context);
}

void install_handler() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_sigbus;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  g_installed = sigaction(SIGBUS, &sa, &g_previous) == 0;
}

int register_mapping(const void* addr, size_t size) {
  std::call_once(g_install_once, install_handler);
  if (!g_installed) return -1;
  for (int i = 0; i < kSlots; ++i) {
    bool expected = false;
    GuardSlot& s = g_slots[i];
    if (s.used.load(std::memory_order_relaxed) ||
        !s.used.compare_exchange_strong(expected, true, std::memory_order_acq_rel)) {
      continue;
    }
    // While begin == end nothing matches: the bounds are set before they can be seen as a pair.
    s.end.store(0, std::memory_order_release);
    s.faulted.store(false, std::memory_order_release);
    s.begin.store(reinterpret_cast<uintptr_t>(addr), std::memory_order_release);
    s.end.store(reinterpret_cast<uintptr_t>(addr) + size, std::memory_order_release);
    return i;
  }
  return -1;
}

[[noreturn]] void fail(const std::string& what, const std::string& path, int err) {
  throw OutputError("framescope: " + what + " '" + path + "': " + std::strerror(err), err, path);
}

std::string absolute(const std::string& path) {
  if (char* real = ::realpath(path.c_str(), nullptr)) {
    std::string out(real);
    std::free(real);
    return out;
  }
  return path;
}

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::map(int fd, const struct stat& st,
                                                  const std::string& path) {
  std::shared_ptr<MappedFile> m(new MappedFile());
  m->size_ = size_t(st.st_size);
  m->path_ = absolute(path);
  m->shown_path_ = path;
  m->dev_ = st.st_dev;
  m->ino_ = st.st_ino;
  m->mtime_ = st.st_mtim;
  if (m->size_ > 0) {
    void* addr = mmap(nullptr, m->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (addr == MAP_FAILED) fail("cannot map", path, errno);
    m->addr_ = addr;
    m->slot_ = register_mapping(addr, m->size_);
  }
  return m;
}

MappedFile::~MappedFile() {
  if (slot_ >= 0) {
    GuardSlot& s = g_slots[slot_];
    s.end.store(0, std::memory_order_release);
    s.begin.store(0, std::memory_order_release);
    s.used.store(false, std::memory_order_release);
  }
  if (addr_) munmap(addr_, size_);
}

void MappedFile::check() const {
  const auto changed = [&](const std::string& how) {
    throw OutputError("framescope: the trace file '" + shown_path_ + "' " + how +
                          " after it was loaded; its events can no longer be read (load it "
                          "again)",
                      0, shown_path_);
  };
  if (slot_ >= 0 && g_slots[slot_].faulted.load(std::memory_order_acquire)) {
    changed("was truncated");
  }
  struct stat st;
  // Gone, or another file at the path (replaced by a rename): the mapping keeps the inode it
  // mapped, whose bytes a rename does not change.
  if (::stat(path_.c_str(), &st) != 0 || st.st_dev != dev_ || st.st_ino != ino_) return;
  if (size_t(st.st_size) < size_) changed("was truncated");
  if (size_t(st.st_size) != size_ || st.st_mtim.tv_sec != mtime_.tv_sec ||
      st.st_mtim.tv_nsec != mtime_.tv_nsec) {
    changed("was rewritten");
  }
}

}  // namespace framescope::internal
