// cpp/core/stack_segments.cpp: per-thread stack segments and the trampoline that switches to one.
#include "stack_segments.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <vector>

#if defined(__linux__) && defined(__x86_64__)
#define FRAMESCOPE_STACK_SEGMENTS 1
#else
#define FRAMESCOPE_STACK_SEGMENTS 0
#endif

#if FRAMESCOPE_STACK_SEGMENTS
// framescope_call_on_stack(arg, fn, stack_top): saves the caller's stack pointer in %rbp (callee-
// saved, so fn keeps it), moves %rsp to stack_top, calls fn(arg) and switches back. The CFI
// defines the frame through %rbp, so an unwinder (gdb, perf, a crash handler) stepping out of fn
// finds the caller's frame on the original stack. endbr64 keeps it a valid indirect-branch
// target under CET.
extern "C" void framescope_call_on_stack(void* arg, void (*fn)(void*), void* stack_top);
asm(R"(
  .text
  .p2align 4
  .globl framescope_call_on_stack
  .hidden framescope_call_on_stack
  .type framescope_call_on_stack, @function
framescope_call_on_stack:
  .cfi_startproc
  endbr64
  pushq %rbp
  .cfi_def_cfa_offset 16
  .cfi_offset %rbp, -16
  movq %rsp, %rbp
  .cfi_def_cfa_register %rbp
  movq %rdx, %rsp
  callq *%rsi
  movq %rbp, %rsp
  popq %rbp
  .cfi_def_cfa %rsp, 8
  retq
  .cfi_endproc
  .size framescope_call_on_stack, .-framescope_call_on_stack
)");
#endif

namespace framescope::internal {
namespace {

std::atomic<size_t> g_budget{size_t(1) << 30};

// The segments of one thread, by level; unmapped at thread exit.
struct ThreadSegments {
  std::vector<void*> bases;  // null where a level is not mapped
  ~ThreadSegments() {
    for (void* base : bases) {
      if (base) munmap(base, kStackSegmentBytes);
    }
  }
};

ThreadSegments& thread_segments() {
  static thread_local ThreadSegments segments;
  return segments;
}

size_t page_size() {
  static const size_t size = size_t(sysconf(_SC_PAGESIZE));
  return size;
}

}  // namespace

bool stack_segments_supported() noexcept { return FRAMESCOPE_STACK_SEGMENTS != 0; }

size_t set_stack_segment_budget(size_t bytes) noexcept {
  return g_budget.exchange(bytes, std::memory_order_relaxed);
}

size_t stack_segment_budget() noexcept { return g_budget.load(std::memory_order_relaxed); }

bool acquire_stack_segment(unsigned level, StackSegment* out) noexcept {
  if (!stack_segments_supported()) return false;
  const size_t allowed = stack_segment_budget() / kStackSegmentBytes;
  if (level >= allowed) return false;
  ThreadSegments& segments = thread_segments();
  try {
    if (segments.bases.size() <= level) segments.bases.resize(level + 1, nullptr);
  } catch (...) {
    return false;
  }
  void*& base = segments.bases[level];
  if (!base) {
    void* mem = mmap(nullptr, kStackSegmentBytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    if (mem == MAP_FAILED) return false;
    // The lowest page is the guard: an overflow of the segment faults there instead of writing
    // into whatever is mapped below.
    if (mprotect(mem, page_size(), PROT_NONE) != 0) {
      munmap(mem, kStackSegmentBytes);
      return false;
    }
    base = mem;
  }
  out->low = reinterpret_cast<uintptr_t>(base) + page_size();
  out->high = reinterpret_cast<uintptr_t>(base) + kStackSegmentBytes;
  return true;
}

void release_stack_segments_above(unsigned level) noexcept {
  ThreadSegments& segments = thread_segments();
  for (size_t i = size_t(level) + 1; i < segments.bases.size(); ++i) {
    if (segments.bases[i]) {
      munmap(segments.bases[i], kStackSegmentBytes);
      segments.bases[i] = nullptr;
    }
  }
}

unsigned mapped_stack_segments() noexcept {
  unsigned n = 0;
  for (void* base : thread_segments().bases) n += base != nullptr;
  return n;
}

void call_on_stack_segment(const StackSegment& segment, void (*fn)(void*), void* arg) noexcept {
#if FRAMESCOPE_STACK_SEGMENTS
  framescope_call_on_stack(arg, fn, reinterpret_cast<void*>(segment.high));
#else
  (void)segment;
  fn(arg);  // unreachable: acquire_stack_segment() never hands out a segment here
#endif
}

}  // namespace framescope::internal
